/**
 * `JSON.parse` of a UTF-8 request body that holds long string values (a 220 KB prompt, a document in a
 * chat message), without first turning the whole body into one string.
 *
 * Why: V8 allocates every string above ~128 KB (kMaxRegularHeapObjectSize) in its own freshly mapped
 * large-object page, unmapped again after the next scavenge, so each one costs a page fault per 4 KB
 * touched and an munmap on top of the copy. Decoding a 220 KB body and then parsing it made two such
 * strings per request (the body text, then the prompt that JSON.parse copies out of it): ~115 page
 * faults per request and a quarter of the router's CPU for such a request (`perf`, issue 15). Here the
 * body text is never built, and the texts routing reads are not joined either (below).
 *
 * How: the body's string tokens are found on the bytes (`indexOf` of `"`, skipping escaped quotes).
 * Each string VALUE of at least MIN_CARVED_BYTES is cut out and decoded on its own, in pieces of about
 * PIECE_BYTES, each by `JSON.parse` of that piece as a string literal (so escapes and the ban on raw
 * control characters are JSON.parse's own), or, for a piece with no backslash and no byte below 0x20,
 * by decoding its bytes alone (the same value, one copy instead of three). What remains (the
 * "skeleton": the body with a short placeholder string in place of each cut value) is parsed by
 * `JSON.parse`, whose reviver puts the long values back. A piece never ends inside an escape sequence
 * (no backslash among its last 6 bytes) nor inside a multi-byte UTF-8 character (it ends before an
 * ASCII byte).
 *
 * Long values stay in pieces: a value under one of LONG_TEXT_KEYS (`prompt`, a message's `content`, a
 * content part's `text`, a tool call's `arguments`, a function call's `output`) comes back as a
 * PieceText (util/piece-text.ts), the form routing reads, so no string above V8's large-object size is
 * built on the request path; `joinLongTexts` turns them into strings for a caller that needs the whole
 * body (a P/D rewrite, a tokenizer). Any other long value is joined at once.
 *
 * Equivalence: outside strings a valid JSON text has no quote byte, so the tokens found here are the
 * document's string tokens; replacing a string token by another string token changes neither the
 * document's validity nor its structure, and the pieces of a token are valid exactly when the token
 * is. Anything unusual returns undefined and the caller parses the plain way, which also gives the
 * exact error for a bad body: a body that is not valid UTF-8, an unterminated string, a skeleton that
 * does not parse or nests too deep, a leading byte-order mark (TextDecoder drops it, JSON.parse does
 * not), or a placeholder that also occurs as a value in the body (a placeholder must be met exactly
 * once).
 */
import { isAscii, isUtf8 } from 'node:buffer';
import { exceedsDepth } from './json-depth.js';
import { PieceText } from '../util/piece-text.js';

/**
 * Bodies below this are parsed the plain way: their text is (for ASCII, exactly) no large-object
 * string, and cutting values out of them only adds copies (an 86 KB ASCII body took 229 us of CPU
 * this way, 181 us the plain way; at 225 KB this way is the cheaper one, 755 us vs 901 us).
 */
export const MIN_BODY_BYTES = 128 * 1024;
/** String values at least this long (bytes between the quotes) are cut out of the skeleton. */
export const MIN_CARVED_BYTES = 16 * 1024;
/** Target size of one decoded piece of a cut value: well below V8's large-object threshold. */
export const PIECE_BYTES = 32 * 1024;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
/** Longest JSON escape sequence (`\uXXXX`). */
const MAX_ESCAPE_BYTES = 6;
const PLACEHOLDER = '\u0000vllm-router-long-string:';
/**
 * Keys whose long string values are returned as PieceText (the texts routing reads): a completion's
 * prompt, a message's content, a content part's text, a tool call's arguments (an agent writing a
 * file), a Responses API function call's output.
 */
const LONG_TEXT_KEYS: ReadonlySet<string> = new Set(['prompt', 'content', 'text', 'arguments', 'output']);

/**
 * The parsed body (`{ value }`, long texts as PieceText), or undefined when this path does not apply or
 * sees anything unusual (the caller then decodes the body and parses it whole).
 */
export function parseLongStringBody(body: Buffer, maxDepth: number): { value: unknown } | undefined {
  if (body.length < MIN_BODY_BYTES) return undefined;
  const ascii = isAscii(body);
  if (!ascii && !isUtf8(body)) return undefined;
  const decode = (start: number, end: number): string => body.toString(ascii ? 'latin1' : 'utf8', start, end);
  const skeleton: string[] = [];
  const values: string[][] = [];
  let from = 0;
  let pos = 0;
  for (;;) {
    const open = body.indexOf(QUOTE, pos);
    if (open < 0) break;
    const close = closingQuote(body, open);
    if (close < 0) return undefined;
    pos = close + 1;
    if (close - open - 1 < MIN_CARVED_BYTES || isKey(body, pos)) continue;
    const value = decodeStringContent(body, open + 1, close, decode);
    if (value === undefined) return undefined;
    skeleton.push(decode(from, open), JSON.stringify(PLACEHOLDER + values.length));
    values.push(value);
    from = pos;
  }
  if (values.length === 0) return undefined;
  skeleton.push(decode(from, body.length));
  const text = skeleton.join('');
  if (exceedsDepth(text, maxDepth)) return undefined;
  const met = new Array<boolean>(values.length).fill(false);
  let duplicate = false;
  let value: unknown;
  try {
    value = JSON.parse(text, (key, v: unknown) => {
      if (typeof v !== 'string' || !v.startsWith(PLACEHOLDER)) return v;
      const index = Number(v.slice(PLACEHOLDER.length));
      if (!(index >= 0 && index < values.length) || v !== PLACEHOLDER + index) return v;
      if (met[index]) {
        duplicate = true;
        return v;
      }
      met[index] = true;
      const pieces = values[index] as string[];
      if (pieces.length === 1) return pieces[0];
      return LONG_TEXT_KEYS.has(key) ? new PieceText(pieces) : pieces.join('');
    });
  } catch {
    return undefined;
  }
  if (duplicate || met.includes(false)) return undefined;
  return { value };
}

/** The index of the quote closing the string token opened at `open`, or -1 if it is unterminated. */
export function closingQuote(body: Buffer, open: number): number {
  let from = open + 1;
  for (;;) {
    const q = body.indexOf(QUOTE, from);
    if (q < 0) return -1;
    let backslashes = 0;
    for (let k = q - 1; k > open && body[k] === BACKSLASH; k--) backslashes++;
    if (backslashes % 2 === 0) return q;
    from = q + 1;
  }
}

/** Whether the string token ending before `after` is an object key (a colon follows it). */
function isKey(body: Buffer, after: number): boolean {
  let i = after;
  while (i < body.length && isJsonSpace(body[i]!)) i++;
  return body[i] === COLON;
}

function isJsonSpace(b: number): boolean {
  return b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;
}

/**
 * The value of the string token whose content (between the quotes) is body[start, end), decoded in
 * pieces of about PIECE_BYTES; undefined if JSON.parse rejects a piece.
 */
function decodeStringContent(
  body: Buffer,
  start: number,
  end: number,
  decode: (start: number, end: number) => string,
): string[] | undefined {
  const parts: string[] = [];
  let s = start;
  let backslash = body.indexOf(BACKSLASH, start);
  try {
    while (s < end) {
      const e = pieceEnd(body, s, end);
      if (backslash >= 0 && backslash < s) backslash = body.indexOf(BACKSLASH, s);
      // A piece with no escape is its own value once it holds no raw control character (which JSON
      // forbids): decoded once, without JSON.parse's second scan and two more copies of it.
      const plain = (backslash < 0 || backslash >= e) && !hasControlByte(body, s, e);
      parts.push(plain ? decode(s, e) : (JSON.parse(`"${decode(s, e)}"`) as string));
      s = e;
    }
  } catch {
    return undefined;
  }
  return parts;
}

/**
 * Whether body[start, end) holds a byte below 0x20, four bytes at a time: for a 32-bit word x,
 * (x - 0x20202020) & ~x & 0x80808080 is non-zero exactly when some byte of x is below 0x20 (a borrow
 * only starts at such a byte).
 */
export function hasControlByte(body: Buffer, start: number, end: number): boolean {
  const base = body.byteOffset;
  let i = start;
  for (; i < end && ((base + i) & 3) !== 0; i++) if ((body[i] as number) < 0x20) return true;
  const words = (end - i) >>> 2;
  if (words > 0) {
    const w = new Uint32Array(body.buffer, base + i, words);
    for (let k = 0; k < words; k++) {
      const x = w[k] as number;
      if (((x - 0x20202020) & ~x & 0x80808080) !== 0) return true;
    }
    i += words * 4;
  }
  for (; i < end; i++) if ((body[i] as number) < 0x20) return true;
  return false;
}

/**
 * `value` (a body from parseLongStringBody) with every PieceText joined into a string, in place (the
 * body's objects and arrays are the caller's own); returns it.
 */
export function joinLongTexts(value: unknown): unknown {
  if (value instanceof PieceText) return value.toString();
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = joinLongTexts(value[i]);
    return value;
  }
  const obj = value as Record<string, unknown>;
  for (const key of Object.keys(obj)) obj[key] = joinLongTexts(obj[key]);
  return value;
}

/**
 * Where the piece starting at `s` ends: the first index from s + PIECE_BYTES on that starts a
 * character with an ASCII byte and has no backslash among the MAX_ESCAPE_BYTES bytes before it (so no
 * escape sequence is cut); `end` if there is none.
 */
export function pieceEnd(body: Buffer, s: number, end: number): number {
  for (let p = s + PIECE_BYTES; p < end; p++) {
    if (body[p]! >= 0x80) continue;
    let escaped = false;
    for (let k = p - MAX_ESCAPE_BYTES; k < p; k++) {
      if (body[k] === BACKSLASH) {
        escaped = true;
        break;
      }
    }
    if (!escaped) return p;
  }
  return end;
}
