/**
 * vLLM's audio endpoints, as far as routing needs them: `POST /v1/audio/transcriptions` and
 * `POST /v1/audio/translations` take a `multipart/form-data` body (the audio `file`, the `model` and
 * other parameters as form fields) and answer `{"text": ...}`. The simulator transcribes nothing: it
 * checks the form (vLLM's 400 without a file), answers a model it does not serve with vLLM's 404 when
 * the simulator is strict about models, and returns a text naming the model and the audio's size.
 * The form is parsed by undici's own multipart parser (`Response.formData`).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody } from './openai-format.js';
import { readBody } from './read-body.js';

export function isAudioPath(path: string): boolean {
  return path === '/v1/audio/transcriptions' || path === '/v1/audio/translations';
}

/** Reads the form and answers it; `serves(model)`: undefined when any model is served. */
export function serveAudio(
  req: IncomingMessage,
  res: ServerResponse,
  defaultModel: string,
  serves: ((model: string) => boolean) | undefined,
  maxBodyBytes: number,
): void {
  readBody(req, maxBodyBytes, (body) => {
    if (body === undefined) return send(res, 413, errorBody(413, 'request body too large'));
    void answer(body, req.headers['content-type'] ?? '', defaultModel, serves).then(({ status, body }) =>
      send(res, status, body),
    );
  });
}

async function answer(
  body: Buffer,
  contentType: string,
  defaultModel: string,
  serves: ((model: string) => boolean) | undefined,
): Promise<{ status: number; body: string }> {
  let form: FormData;
  try {
    form = await new Response(new Uint8Array(body), { headers: { 'content-type': contentType } }).formData();
  } catch {
    return { status: 400, body: errorBody(400, 'request body must be multipart/form-data') };
  }
  const file = form.get('file');
  if (file === null || typeof file === 'string') {
    return { status: 400, body: errorBody(400, 'the form needs an audio file in field "file"') };
  }
  const named = form.get('model');
  const model = typeof named === 'string' && named !== '' ? named : defaultModel;
  if (serves !== undefined && !serves(model)) {
    return { status: 404, body: errorBody(404, `The model \`${model}\` does not exist.`) };
  }
  return { status: 200, body: JSON.stringify({ text: `${model} heard ${file.size} bytes of audio` }) };
}

function send(res: ServerResponse, status: number, body: string): void {
  if (res.destroyed) return;
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
