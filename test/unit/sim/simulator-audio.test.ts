/** The simulator's audio endpoints (sim/audio-api.ts): a multipart form in, `{"text": ...}` out. */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

async function upload(url: string, fields: [string, string | Blob][]) {
  const form = new FormData();
  for (const [name, value] of fields) {
    if (typeof value === 'string') form.append(name, value);
    else form.append(name, value, 'a.wav');
  }
  const res = await fetch(url, { method: 'POST', body: form });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe('simulator: /v1/audio/transcriptions and /v1/audio/translations', () => {
  const file = new Blob([new Uint8Array(100)]);

  it('answers a form with a file with a text naming the model', async () => {
    const s = await start({ model: 'whisper' });
    for (const path of ['/v1/audio/transcriptions', '/v1/audio/translations']) {
      const r = await upload(`${s.url}${path}`, [
        ['model', 'whisper'],
        ['file', file],
      ]);
      expect(r).toEqual({ status: 200, json: { text: 'whisper heard 100 bytes of audio' } });
    }
  });

  it("strict about models: another model is vLLM's 404; no file is a 400; JSON is a 400", async () => {
    const s = await start({ model: 'whisper', strictModels: true });
    const other = await upload(`${s.url}/v1/audio/transcriptions`, [
      ['model', 'chat'],
      ['file', file],
    ]);
    expect(other.status).toBe(404);
    expect(JSON.stringify(other.json)).toContain('The model `chat` does not exist.');
    const noFile = await upload(`${s.url}/v1/audio/transcriptions`, [['model', 'whisper']]);
    expect(noFile.status).toBe(400);
    const json = await request(`${s.url}/v1/audio/transcriptions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":"whisper"}',
    });
    expect(json.statusCode).toBe(400);
    await json.body.text();
  });
});
