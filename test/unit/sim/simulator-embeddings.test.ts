/**
 * The simulator's POST /v1/embeddings (embeddings-api.ts): vLLM's shapes of input and answer, its
 * `priority` rules, a model it does not serve, and the request recorded like a generation request.
 */
import { describe, expect, it } from 'vitest';
import { postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

describe('simulator: /v1/embeddings', () => {
  it.each([
    { name: 'a string', input: 'hello world', vectors: 1 },
    { name: 'strings', input: ['a', 'b', 'c'], vectors: 3 },
    { name: 'token ids', input: [1, 2, 3], vectors: 1 },
    { name: 'lists of token ids', input: [[1, 2], [3]], vectors: 2 },
  ])('answers $name with one vector per input and its prompt tokens', async ({ input, vectors }) => {
    const s = await start({ model: 'm' });
    const r = await postJson(`${s.url}/v1/embeddings`, { model: 'm', input });
    expect(r.status).toBe(200);
    const body = r.json as {
      object: string;
      data: Array<{ index: number; embedding: number[] }>;
      usage: { prompt_tokens: number };
    };
    expect(body.object).toBe('list');
    expect(body.data.map((d) => d.index)).toEqual(Array.from({ length: vectors }, (_, i) => i));
    expect(body.data.every((d) => d.embedding.length === 8)).toBe(true);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    expect(s.records.at(-1)).toMatchObject({ path: '/v1/embeddings', status: 200, outcome: 'ok' });
  });

  it('the same input gets the same vector', async () => {
    const s = await start();
    const vec = async () =>
      (
        (await postJson(`${s.url}/v1/embeddings`, { input: 'same' })).json as {
          data: Array<{ embedding: number[] }>;
        }
      ).data[0]!.embedding;
    expect(await vec()).toEqual(await vec());
  });

  it.each([
    { name: 'no input', body: { model: 'm' }, status: 400 },
    { name: 'an empty list', body: { input: [] }, status: 400 },
    { name: 'mixed input', body: { input: ['a', 1] }, status: 400 },
    { name: 'a priority without priority scheduling', body: { input: 'a', priority: 1 }, status: 400 },
    { name: 'a model it does not serve (strict)', body: { model: 'other', input: 'a' }, status: 404 },
  ])('refuses $name as vLLM does', async ({ body, status }) => {
    const s = await start({ model: 'm', strictModels: true });
    const r = await postJson(`${s.url}/v1/embeddings`, body);
    expect(r.status).toBe(status);
    expect(s.records.at(-1)).toMatchObject({ status, outcome: 'error' });
  });

  it('takes a priority under priority scheduling', async () => {
    const s = await start({ schedulingPolicy: 'priority' });
    expect((await postJson(`${s.url}/v1/embeddings`, { input: 'a', priority: -1 })).status).toBe(200);
  });
});
