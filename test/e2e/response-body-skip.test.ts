/**
 * Skipping response bodies (src/extproc/response-body-mode.ts) through real Envoy 1.40: on its reply to
 * a 2xx response's headers the router sets `mode_override` (response body NONE, trailers SEND) when
 * nothing reads that response's chunks. Envoy then sends no chunk, and keeps the ext_proc stream open
 * until the downstream response has ended or was cut, so the worker's load still follows the response
 * to its end. Checked with Envoy's graceful close (half-close) and without it (reset), for streamed
 * and non-streamed responses, a client that goes away mid-stream and a worker that resets the stream
 * mid-body (each ends the request once); the first streamed response of
 * a worker is still watched (timing samples), so is its first non-streamed one (its usage teaches the
 * characters per token), and P/D responses always are.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Router } from '../../src/router.js';

/** vllm_router_requests_total for one outcome (all routes). */
async function outcomes(router: Router, outcome: string): Promise<number> {
  let sum = 0;
  for (const line of (await metricsText(router)).split('\n')) {
    if (line.startsWith('vllm_router_requests_total{') && line.includes(`outcome="${outcome}"`)) {
      sum += Number(line.slice(line.indexOf('}') + 2));
    }
  }
  return sum;
}

/** vllm_router_requests_total, every outcome: one per request that ended. */
async function ended(router: Router): Promise<number> {
  let sum = 0;
  for (const line of (await metricsText(router)).split('\n')) {
    if (line.startsWith('vllm_router_requests_total{')) sum += Number(line.slice(line.indexOf('}') + 2));
  }
  return sum;
}

/** Envoy's count of ext_proc messages it sent to the router. */
async function messagesSent(stack: { envoy: Stack['envoy'] }): Promise<number> {
  const line = (await stack.envoy.stats('ext_proc.stream_msgs_sent')).split('\n')[0] ?? '';
  return Number(line.split(': ')[1] ?? NaN);
}

function completion(url: string, stream: boolean, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: 'skip the body', max_tokens: 6, stream }),
    ...(signal ? { signal } : {}),
  });
}

interface WorkerView {
  url: string;
  estimates: { ttftSamples: number };
}

describe.each([
  ['with ext_proc_graceful_grpc_close (half-close)', false],
  ["with Envoy's defaults (reset)", true],
])('response body skipped, %s', (_name, envoyDefaults) => {
  let stack: Stack;
  const load = () => stack.load(stack.sims[0]!);

  beforeAll(async () => {
    stack = await startStack({ workers: 1, router: { policy: 'round_robin' }, envoy: { envoyDefaults } });
  });
  afterAll(async () => {
    await stack?.close();
  });
  afterEach(async () => {
    await expectAllLoadsZero(stack.router);
  });

  it("watches a worker's first streamed response (timing sample), then skips: load held to the end", async () => {
    const ttft = async () =>
      (await adminJson<WorkerView[]>(stack.router, '/workers')).body[0]!.estimates.ttftSamples;
    // The first streamed response of the worker is the sampled one: every chunk, a TTFT sample, ok.
    const firstSent = await messagesSent(stack);
    expect(await (await completion(stack.url, true)).text()).toContain('data: [DONE]');
    await waitFor(() => load() === 0);
    expect(await ttft()).toBe(1);
    expect(await outcomes(stack.router, 'ok')).toBe(1);
    const watchedMessages = (await messagesSent(stack)) - firstSent;
    expect(watchedMessages).toBeGreaterThan(3);
    // So is its first non-streamed one, for its usage (load/chars-per-token.ts): watched, ok.
    expect(await (await completion(stack.url, false)).json()).toHaveProperty('usage');
    await waitFor(() => load() === 0);
    expect(await outcomes(stack.router, 'ok')).toBe(2);

    // The next one is skipped: held after its first SSE event, the worker's load stays 1.
    const hold = stack.sims[0]!.hold({ afterChunks: 1 });
    const before = await messagesSent(stack);
    const res = await completion(stack.url, true);
    const reader = res.body!.getReader();
    const first = await reader.read(); // headers and a chunk passed Envoy: the router chose the mode
    expect(first.done).toBe(false);
    await hold.reached();
    // Another request through the same Envoy and router completes meanwhile; the held one still counts.
    expect(await (await completion(stack.url, false)).json()).toHaveProperty('choices');
    await waitFor(() => load() === 1);
    expect(await outcomes(stack.router, 'unwatched')).toBe(1); // the non-streamed one, ended
    hold.release();
    let text = new TextDecoder().decode(first.value);
    for (let r = await reader.read(); !r.done; r = await reader.read())
      text += new TextDecoder().decode(r.value);
    expect(text).toContain('data: [DONE]');
    await waitFor(() => load() === 0);
    expect(await outcomes(stack.router, 'unwatched')).toBe(2);
    expect(await outcomes(stack.router, 'ok')).toBe(2);
    expect(await ttft()).toBe(1); // skipped responses teach nothing
    // Envoy sent the router request headers, body and response headers for each: no chunk.
    await waitFor(async () => (await messagesSent(stack)) - before === 6);
  });

  it('a non-streamed response held by the worker keeps the load until it is answered', async () => {
    const hold = stack.sims[0]!.hold({ stream: false });
    const pending = completion(stack.url, false);
    await hold.reached();
    expect(load()).toBe(1);
    hold.release();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(await res.json()).toHaveProperty('choices');
    await waitFor(() => load() === 0);
  });

  it('a client that goes away mid-stream releases the load, once', async () => {
    const unwatched = await outcomes(stack.router, 'unwatched');
    const before = await ended(stack.router);
    const hold = stack.sims[0]!.hold({ afterChunks: 1 });
    const ac = new AbortController();
    const res = await completion(stack.url, true, ac.signal);
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    await hold.reached();
    expect(load()).toBe(1);
    ac.abort();
    await waitFor(() => load() === 0);
    expect(await outcomes(stack.router, 'unwatched')).toBe(unwatched + 1);
    expect(await ended(stack.router)).toBe(before + 1);
    hold.release();
  });

  it('a worker that resets the stream mid-body releases the load at the reset, once', async () => {
    const unwatched = await outcomes(stack.router, 'unwatched');
    const before = await ended(stack.router);
    stack.sims[0]!.injectFault({ resetAfterChunks: 2 });
    const hold = stack.sims[0]!.hold({ afterChunks: 1 });
    const res = await completion(stack.url, true);
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    await hold.reached();
    expect(load()).toBe(1);
    hold.release(); // the next event is the worker's last: it resets the connection
    await expect(
      (async () => {
        for (let r = await reader.read(); !r.done; r = await reader.read());
      })(),
    ).rejects.toThrow();
    await waitFor(() => load() === 0);
    expect(await outcomes(stack.router, 'unwatched')).toBe(unwatched + 1);
    expect(await ended(stack.router)).toBe(before + 1);
  });
});

describe('P/D responses are always watched (usage rewriting)', () => {
  let s: PdStack;

  beforeAll(async () => {
    s = await startPdStack({ router: { responseBodySample: 1000 } });
  });
  afterAll(async () => {
    await s?.close();
  });
  afterEach(async () => {
    await expectAllLoadsZero(s.router);
  });

  it('streams every chunk through the router: outcome ok, none unwatched', async () => {
    for (let i = 0; i < 3; i++) {
      const before = await messagesSent(s);
      expect(await (await completion(s.url, true)).text()).toContain('data: [DONE]');
      await waitFor(() => s.load(s.decode[0]!, 'decode') === 0);
      expect((await messagesSent(s)) - before).toBeGreaterThan(3);
    }
    expect(await outcomes(s.router, 'ok')).toBe(3);
    expect(await outcomes(s.router, 'unwatched')).toBe(0);
  });
});
