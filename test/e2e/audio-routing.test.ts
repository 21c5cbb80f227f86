/**
 * End to end through a real Envoy: vLLM's audio endpoints in a fleet that mixes models. One simulated
 * worker serves a speech model, the other a chat model, and each answers a model it does not serve
 * with vLLM's 404. A transcription or translation is a multipart/form-data upload whose `model` is a
 * form field; the router reads it (request/multipart-field.ts) and sends every upload to the worker
 * serving that model, whichever part of the form comes first. Ends with every load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, waitAllScraped } from '../support/router-fixture.js';

let stack: Stack;
const MODELS = ['whisper-large-v3', 'chat-model'];

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    sim: (i) => ({ model: MODELS[i]!, strictModels: true, timeScale: 0 }),
    router: { scrapeIntervalMs: 50 },
  });
  await waitAllScraped(stack.router); // the router knows what each worker serves
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
});

/** A WAV-looking file whose bytes include line breaks and dashes, as real audio does. */
const AUDIO = new Uint8Array(4096).map((_, i) => (i % 7 === 0 ? 0x0d : i % 5 === 0 ? 0x2d : i % 251));

async function upload(path: string, fields: [string, string | Blob][]) {
  const form = new FormData();
  for (const [name, value] of fields) {
    if (typeof value === 'string') form.append(name, value);
    else form.append(name, value, 'speech.wav');
  }
  const res = await fetch(`${stack.url}${path}`, { method: 'POST', body: form });
  return { status: res.status, text: await res.text() };
}

describe('audio uploads in a mixed fleet', () => {
  it.each(['/v1/audio/transcriptions', '/v1/audio/translations'])(
    "%s goes to the worker serving the form's model, before or after the file",
    async (path) => {
      const file = new Blob([AUDIO], { type: 'audio/wav' });
      for (let i = 0; i < 6; i++) {
        const fields: [string, string | Blob][] =
          i % 2 === 0
            ? [
                ['model', 'whisper-large-v3'],
                ['file', file],
              ]
            : [
                ['file', file],
                ['language', 'en'],
                ['model', 'whisper-large-v3'],
              ];
        const r = await upload(path, fields);
        expect(r.status, r.text).toBe(200);
        expect(JSON.parse(r.text)).toEqual({ text: `whisper-large-v3 heard ${AUDIO.length} bytes of audio` });
      }
    },
  );

  it('routes a recording of realistic size (8 MB, model after the file)', async () => {
    const big = new Uint8Array(8 * 1024 * 1024).map((_, i) =>
      i % 7 === 0 ? 0x0d : i % 5 === 0 ? 0x2d : i % 251,
    );
    const r = await upload('/v1/audio/transcriptions', [
      ['file', new Blob([big], { type: 'audio/wav' })],
      ['model', 'whisper-large-v3'],
    ]);
    expect(r.status, r.text).toBe(200);
    expect(JSON.parse(r.text)).toEqual({ text: `whisper-large-v3 heard ${big.length} bytes of audio` });
  });

  it('still routes JSON bodies by their model next to it', async () => {
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'chat-model',
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
      }),
    });
    expect(res.status, await res.text()).toBe(200);
  });
});
