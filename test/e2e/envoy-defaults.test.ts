/**
 * Plain Envoy defaults for the ext_proc stream's end: no `ext_proc_graceful_grpc_close` runtime flag
 * and no `max_requests_per_connection` on the router cluster. Envoy then resets every finished
 * ext_proc stream (RST_STREAM); without the router's connection draining, nghttp2's rapid-reset
 * protection would answer the 1,001st fast reset on a connection with GOAWAY(INTERNAL_ERROR) and
 * the streams in flight would fail as empty 500s. A bounded burst must lose not one request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Pool } from 'undici';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    router: { policy: 'round_robin' },
    // One Envoy worker thread: every ext_proc stream shares one connection pool (the case that trips
    // the reset limit soonest).
    envoy: { envoyDefaults: true, concurrency: 1 },
  });
});
afterAll(async () => {
  await stack?.close();
});

const REQUESTS = 2000;
const CONCURRENCY = 16;

describe('Envoy defaults (no graceful close flag, no max_requests_per_connection)', () => {
  it(`serves ${REQUESTS} small requests at concurrency ${CONCURRENCY} without one failure`, async () => {
    const pool = new Pool(stack.url, { connections: CONCURRENCY });
    const failures: string[] = [];
    let next = 0;
    const body = JSON.stringify({ model: 'sim-model', prompt: 'hello', max_tokens: 1 });
    const user = async (): Promise<void> => {
      while (next < REQUESTS) {
        next++;
        try {
          const res = await pool.request({
            method: 'POST',
            path: '/v1/completions',
            headers: { 'content-type': 'application/json' },
            body,
          });
          const text = await res.body.text();
          if (res.statusCode !== 200) failures.push(`${res.statusCode} ${text.slice(0, 100)}`);
        } catch (err) {
          failures.push(String(err));
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: CONCURRENCY }, user));
    } finally {
      await pool.close();
    }
    expect(failures).toEqual([]);
    // The router drained each connection after its 500th stream: Envoy opened new ones.
    const stats = await stack.envoy.stats('cluster.vllm_router.upstream_cx_total');
    expect(Number(/upstream_cx_total: (\d+)/.exec(stats)?.[1])).toBeGreaterThanOrEqual(3);
    await expectAllLoadsZero(stack.router);
  }, 240_000);
});
