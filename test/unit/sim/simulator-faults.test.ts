import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import {
  readUntilCut,
  getText,
  postJson,
  postStream,
  sseEvents,
  simulatorsClosedAfterEach,
} from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

const STREAM = { prompt: 'hello', max_tokens: 5, stream: true };
const STALL = { timeScale: 1, timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 } };

function post(url: string, body: unknown, signal?: AbortSignal) {
  return request(url, { method: 'POST', body: JSON.stringify(body), signal });
}

describe('simulator fault injection', () => {
  it('answers an injected status for `count` requests, then recovers', async () => {
    const s = await sim();
    s.injectFault({ status: 503, message: 'overloaded' }, { count: 2 });
    const statuses: number[] = [];
    for (let i = 0; i < 3; i++)
      statuses.push((await postJson(`${s.url}/v1/completions`, { prompt: 'x' })).status);
    expect(statuses).toEqual([503, 503, 200]);
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'x' });
    expect(r.status).toBe(200);
    expect(s.records.map((x) => x.outcome)).toEqual(['error', 'error', 'ok', 'ok']);
    expect(s.records[0]!.status).toBe(503);
  });

  it('returns an OpenAI-style error body', async () => {
    const s = await sim();
    s.injectFault({ status: 500 });
    const r = await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'u', content: 'x' }] });
    expect(r.json).toEqual({
      error: { message: 'injected fault', type: 'InternalServerError', param: null, code: 500 },
    });
  });

  it('unfiltered faults skip health checks; a path filter targets them', async () => {
    const s = await sim();
    s.injectFault({ status: 500 });
    expect((await getText(`${s.url}/health`)).status).toBe(200);
    s.clearFaults();
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'x' })).status).toBe(200);
    s.injectFault({ status: 503 }, { path: '/health' });
    expect((await getText(`${s.url}/health`)).status).toBe(503);
    expect((await getText(`${s.url}/health`)).status).toBe(200);
  });

  it('path filter picks the chat endpoint only', async () => {
    const s = await sim();
    s.injectFault({ status: 429 }, { path: '/chat/' });
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'x' })).status).toBe(200);
    expect(
      (await postJson(`${s.url}/v1/chat/completions`, { messages: [{ role: 'u', content: 'x' }] })).status,
    ).toBe(429);
  });

  it.each([
    { path: '/v1/completions', body: STREAM, n: 2, tokens: 2 },
    { path: '/v1/completions', body: { ...STREAM, max_tokens: 2 }, n: 3, tokens: 2 }, // after [DONE], before the final chunk
    {
      path: '/v1/chat/completions',
      body: { ...STREAM, messages: [{ role: 'u', content: 'x' }] },
      n: 1,
      tokens: 1,
    },
  ])('resets the socket right after chunk $n ($path)', async ({ path, body, n, tokens }) => {
    const s = await sim();
    s.injectFault({ resetAfterChunks: n });
    const res = await post(`${s.url}${path}`, body);
    expect(res.statusCode).toBe(200);
    const { received, cut } = await readUntilCut(res.body);
    expect(cut).toBe(true);
    expect(sseEvents(received)).toHaveLength(n);
    await s.waitForIdle();
    expect(s.records[0]).toMatchObject({ outcome: 'reset', completionTokens: tokens });
    expect(s.inFlight()).toBe(0);
    expect(s.running()).toBe(0);
    // The next request is served normally.
    const ok = await postStream(`${s.url}/v1/completions`, STREAM);
    expect(ok.events.at(-1)).toBe('[DONE]');
  });

  it.each([
    { name: 'streaming, before headers', body: STREAM },
    { name: 'non-streaming', body: { prompt: 'x' } },
  ])('resetAfterChunks 0 destroys the socket ($name)', async ({ body }) => {
    const s = await sim();
    s.injectFault({ resetAfterChunks: 0 });
    await expect(post(`${s.url}/v1/completions`, body)).rejects.toThrow();
    await s.waitForIdle();
    expect(s.records[0]!.outcome).toBe('reset');
  });

  it('client abort mid-stream records aborted, stops generating, in-flight back to 0', async () => {
    const s = await sim(STALL);
    const ac = new AbortController();
    const res = await post(`${s.url}/v1/completions`, STREAM, ac.signal);
    for await (const chunk of res.body) {
      expect(String(chunk)).toContain('"text"'); // the first token arrived
      break;
    }
    expect(s.running()).toBe(1);
    ac.abort();
    await s.waitForIdle();
    expect(s.records[0]).toMatchObject({ outcome: 'aborted', completionTokens: 1 });
    expect([s.inFlight(), s.running(), s.waiting()]).toEqual([0, 0, 0]);
  });

  it('hang never answers until the client aborts', async () => {
    const s = await sim();
    s.injectFault({ hang: true });
    const ac = new AbortController();
    const pending = post(`${s.url}/v1/completions`, { prompt: 'x' }, ac.signal);
    await s.waitForRequests(1);
    expect(s.inFlight()).toBe(1);
    expect(s.records[0]!.outcome).toBeUndefined();
    ac.abort();
    await expect(pending).rejects.toThrow();
    await s.waitForIdle();
    expect(s.records[0]!.outcome).toBe('aborted');
  });

  it('delays a request then serves it', async () => {
    const s = await sim();
    s.injectFault({ delayMs: 5 });
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 2 });
    expect(r.status).toBe(200);
    expect(s.records[0]!.outcome).toBe('ok');
  });

  it('abort during an injected delay clears the delay', async () => {
    const s = await sim();
    s.injectFault({ delayMs: 600_000 });
    const ac = new AbortController();
    const pending = post(`${s.url}/v1/completions`, { prompt: 'x' }, ac.signal);
    await s.waitForRequests(1);
    ac.abort();
    await expect(pending).rejects.toThrow();
    await s.waitForIdle();
    expect(s.records[0]!.outcome).toBe('aborted');
    expect(s.running()).toBe(0);
  });
});
