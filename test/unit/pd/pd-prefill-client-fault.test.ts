/**
 * a prefill worker that refuses the request as the client's fault (vLLM's 400 for a prompt
 * longer than the context, a bad parameter, ...) is retried on another prefill worker and then turned
 * into a 502 "bad_gateway" whose message drops vLLM's explanation. The same request to a regular
 * (non-P/D) fleet gets vLLM's 400 and its message. A 404 (a model the worker does not serve) is tried on
 * another prefill worker, and when none serves it the client gets vLLM's 404 "The model `x` does not
 * exist.", not a 502. Real PrefillClient, real HTTP servers on port 0.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { PrefillClient } from '../../../src/pd/prefill-client.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { harness, register } from '../workers/pool-harness.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';

const VLLM_400 = JSON.stringify({
  object: 'error',
  message:
    "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens in the messages. Please reduce the length of the messages.",
  type: 'BadRequestError',
  param: null,
  code: 400,
});

const REQ: RouteRequest = COMPLETION_REQ;

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanup.splice(0)) await c();
});

const VLLM_404 = JSON.stringify({
  error: { message: 'The model `mistral` does not exist.', type: 'NotFoundError', param: 'model', code: 404 },
});

async function badRequestServer(
  status = 400,
  body = VLLM_400,
): Promise<{ port: number; hits: () => number }> {
  let hits = 0;
  const server = http.createServer((req, res) => {
    hits++;
    req.resume();
    req.on('end', () => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(body);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { port: (server.address() as AddressInfo).port, hits: () => hits };
}

describe('a prefill worker answering 4xx', () => {
  it("gives the client the worker's 4xx and message, without retrying on another prefill worker", async () => {
    const a = await badRequestServer();
    const b = await badRequestServer();
    const h = harness();
    register(h.registry, 'prefill', 8000, { endpoint: `127.0.0.1:${a.port}` });
    register(h.registry, 'prefill', 8001, { endpoint: `127.0.0.1:${b.port}` });
    register(h.registry, 'decode', 9000);
    const prefillPool = h.pool('prefill', 'round_robin');
    const decodePool = h.pool('decode', 'round_robin');
    const client = new PrefillClient();
    cleanup.push(() => client.close());
    const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
      client,
      connector: 'nixl',
      dispatch: 'sequential',
      prefillTimeoutMs: 10_000,
      prefillRetries: 1,
      decisionHeader: false,
    });
    const err = (await (dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>).then(
      () => ({ status: 200, message: 'dispatched' }),
      (e: unknown) => e,
    )) as { status: number; message: string };
    expect(prefillPool.workers.map((w) => w.load)).toEqual([0, 0]);
    expect({ status: err.status, message: err.message }).toEqual({
      status: 400,
      message: expect.stringContaining('maximum context length'),
    });
    expect(a.hits() + b.hits()).toBe(1); // the client's own fault: no other prefill worker asked
  });

  it("a model no prefill worker serves: tried on another, then the client gets vLLM's 404 and message", async () => {
    const a = await badRequestServer(404, VLLM_404);
    const b = await badRequestServer(404, VLLM_404);
    const h = harness();
    register(h.registry, 'prefill', 8000, { endpoint: `127.0.0.1:${a.port}` });
    register(h.registry, 'prefill', 8001, { endpoint: `127.0.0.1:${b.port}` });
    register(h.registry, 'decode', 9000);
    const prefillPool = h.pool('prefill', 'round_robin');
    const decodePool = h.pool('decode', 'round_robin');
    const client = new PrefillClient();
    cleanup.push(() => client.close());
    const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
      client,
      connector: 'nixl',
      dispatch: 'sequential',
      prefillTimeoutMs: 10_000,
      prefillRetries: 1,
      decisionHeader: false,
    });
    const err = (await (dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>).then(
      () => ({ status: 200, message: 'dispatched' }),
      (e: unknown) => e,
    )) as { status: number; message: string };
    expect(prefillPool.workers.map((w) => w.load)).toEqual([0, 0]);
    expect({ status: err.status, message: err.message }).toEqual({
      status: 404,
      message: 'The model `mistral` does not exist.',
    });
    expect([a.hits(), b.hits()]).toEqual([1, 1]); // another prefill worker may serve it (an adapter)
  });
});
