/**
 * One text field of a `multipart/form-data` body (RFC 7578), read without parsing the rest: the `model`
 * of vLLM's audio endpoints (`POST /v1/audio/transcriptions`, `/v1/audio/translations`), which take the
 * audio file and their parameters as a form, so a fleet that mixes models sends them to the workers
 * serving the model they name, as a JSON body's `model` does (inference-request.ts `bodyModel`).
 *
 * The scan goes part by part with Buffer.indexOf (the audio file's bytes are skipped, never copied or
 * decoded) to the form's end: a field given twice is read at its LAST part, as vLLM reads the form
 * (FastAPI takes a field's value with Starlette's `FormData.get`, whose later duplicates win), so a
 * form naming two models is routed, and rewritten, by the one the worker serves. Anything malformed (no boundary, a part without the blank line that
 * ends its headers, headers longer than MAX_HEADER_BYTES, a field longer than MAX_VALUE_BYTES, a file
 * part of that name) reads as no field: the request then goes on unrouted by model and the worker
 * answers it, as for a JSON body that names none. The same scan finds the field for the gateway's
 * model-name rewrite (withFormField). Pure: no I/O, timers or logging.
 */

const MAX_HEADER_BYTES = 8 * 1024;
const MAX_VALUE_BYTES = 1024;
const CRLF = Buffer.from('\r\n');
const HEADERS_END = Buffer.from('\r\n\r\n');

/** The `boundary` parameter of a `multipart/form-data` content type, or undefined for anything else. */
export function formBoundary(contentType: string | undefined): string | undefined {
  if (contentType === undefined) return undefined;
  const [type, ...params] = contentType.split(';');
  if (type?.trim().toLowerCase() !== 'multipart/form-data') return undefined;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq === -1 || param.slice(0, eq).trim().toLowerCase() !== 'boundary') continue;
    let value = param.slice(eq + 1).trim();
    if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
    // RFC 2046: 1 to 70 characters.
    return value.length >= 1 && value.length <= 70 ? value : undefined;
  }
  return undefined;
}

/** The text of form field `name` (not a file), or undefined when the body has none (or is malformed). */
export function formField(body: Buffer, boundary: string, name: string): string | undefined {
  const found = findField(body, boundary, name);
  return found?.start === undefined ? undefined : body.toString('utf8', found.start, found.end);
}

/**
 * `body` with the text of form field `name` set to `value` (the gateway's model-name rewrite,
 * model-rewrite.ts): the field's bytes replaced, every other byte (the file's) as it was; a form
 * without the field gets it as a first part. Undefined, the body to be left as it is, when the form is
 * malformed (as formField reads it), the field is a file, or `value` could end its part early. A
 * field given twice has its last part set (the one vLLM reads).
 */
export function withFormField(
  body: Buffer,
  boundary: string,
  name: string,
  value: string,
): Buffer | undefined {
  if (/[\r\n]/.test(value) || value.includes(`--${boundary}`) || /["\r\n]/.test(name)) return undefined;
  const found = findField(body, boundary, name);
  if (found === undefined) return undefined;
  if (found.start !== undefined) {
    return Buffer.concat([body.subarray(0, found.start), Buffer.from(value), body.subarray(found.end)]);
  }
  const part = `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  return Buffer.concat([body.subarray(0, found.first), Buffer.from(part), body.subarray(found.first)]);
}

/**
 * Where form field `name`'s text lies ([start, end)) in its last part, or, when the form has no such
 * field, where its first delimiter starts (`first`, start undefined); undefined when malformed, or
 * when that last part is a file or too long (see the header).
 */
function findField(
  body: Buffer,
  boundary: string,
  name: string,
): { first: number; start?: number; end?: number } | undefined {
  const delimiter = Buffer.from(`--${boundary}`);
  const next = Buffer.from(`\r\n--${boundary}`);
  // The first delimiter opens the body or follows a preamble's line break.
  let at: number;
  if (body.subarray(0, delimiter.length).equals(delimiter)) at = 0;
  else {
    const first = body.indexOf(next);
    if (first === -1) return undefined;
    at = first + CRLF.length;
  }
  const first = at;
  let last: { start: number; end: number } | 'unreadable' | undefined;
  for (;;) {
    const afterDelimiter = at + delimiter.length;
    if (body[afterDelimiter] === 0x2d && body[afterDelimiter + 1] === 0x2d) {
      // "--": the end
      if (last === 'unreadable') return undefined;
      return last === undefined ? { first } : { first, ...last };
    }
    const lineEnd = body.indexOf(CRLF, afterDelimiter);
    if (lineEnd === -1) return undefined;
    const headersEnd = body.indexOf(HEADERS_END, lineEnd);
    if (headersEnd === -1 || headersEnd - lineEnd > MAX_HEADER_BYTES) return undefined;
    const contentStart = headersEnd + HEADERS_END.length;
    const contentEnd = body.indexOf(next, headersEnd);
    if (contentEnd === -1) return undefined;
    const disposition = partDisposition(body.toString('latin1', lineEnd + CRLF.length, headersEnd));
    if (disposition?.name === name) {
      last =
        disposition.file || contentEnd - contentStart > MAX_VALUE_BYTES
          ? 'unreadable'
          : { start: contentStart, end: contentEnd };
    }
    at = contentEnd + CRLF.length;
  }
}

/** The `name` of a part's `Content-Disposition: form-data` header, and whether it is a file. */
function partDisposition(headers: string): { name: string; file: boolean } | undefined {
  for (const line of headers.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon === -1 || line.slice(0, colon).trim().toLowerCase() !== 'content-disposition') continue;
    const [kind, ...params] = line.slice(colon + 1).split(';');
    if (kind?.trim().toLowerCase() !== 'form-data') return undefined;
    let name: string | undefined;
    let file = false;
    for (const param of params) {
      const eq = param.indexOf('=');
      if (eq === -1) continue;
      const key = param.slice(0, eq).trim().toLowerCase();
      let value = param.slice(eq + 1).trim();
      if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) value = value.slice(1, -1);
      if (key === 'name') name = value;
      else if (key === 'filename' || key === 'filename*') file = true;
    }
    return name === undefined ? undefined : { name, file };
  }
  return undefined;
}
