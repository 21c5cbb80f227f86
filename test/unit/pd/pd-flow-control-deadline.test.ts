/**
 * --flow-control holds a request in the router (up to --flow-queue-ttl-ms) and, in P/D sequential
 * mode, the router then runs its prefill leg (up to --prefill-timeout-ms) before it answers: Envoy
 * waits for that one ext_proc reply, bounded by the filter's `message_timeout` (envoy/envoy.yaml). The
 * docs ask to keep each setting below it; the router's answer must then come before it too, or the
 * client gets Envoy's bare 504 (a fail-open Envoy sends the request on without the router) instead of
 * the router's JSON error. A hung prefill worker, on the harness's fake clock.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import type { Dispatch } from '../../../src/extproc/dispatch.js';
import { ENVOY_YAML } from '../../../src/envoy/envoy-config.js';
import { PrefillError, type PrefillClient, type PrefillResult } from '../../../src/pd/prefill-client.js';
import { RouterError } from '../../../src/request/router-error.js';
import { FlowControl } from '../../../src/routing/flow-control.js';
import { ObjectiveTable } from '../../../src/routing/objectives.js';
import type { Worker } from '../../../src/workers/worker.js';
import { harness, register } from '../workers/pool-harness.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';

/** The shipped Envoy's ext_proc message_timeout (envoy/envoy.yaml), in ms. */
function shippedMessageTimeoutMs(): number {
  const doc = parse(readFileSync(ENVOY_YAML, 'utf8'));
  const filters = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters;
  const extProc = filters.find((f: { name: string }) => f.name === 'envoy.filters.http.ext_proc');
  const m = /^(\d+)s$/.exec(extProc.typed_config.message_timeout);
  expect(m, 'message_timeout in seconds').not.toBeNull();
  return Number(m![1]) * 1000;
}

describe('P/D sequential prefill after a flow-control hold', () => {
  it("answers before Envoy's message_timeout with each setting below it, as documented", async () => {
    const messageTimeoutMs = shippedMessageTimeoutMs();
    const prefillTimeoutMs = 60_000; // the default
    const ttlMs = 45_000; // below message_timeout, as --flow-queue-ttl-ms asks
    expect(prefillTimeoutMs).toBeLessThan(messageTimeoutMs);
    expect(ttlMs).toBeLessThan(messageTimeoutMs);

    const h = harness(3_600_000); // workers registered for longer than the test's fake hour
    register(h.registry, 'prefill', 8000);
    register(h.registry, 'decode', 9000);
    const prefillPool = h.pool('prefill', 'round_robin');
    const decodePool = h.pool('decode', 'round_robin');
    prefillPool.reconcile();
    decodePool.reconcile();
    // A hung prefill worker: the leg's own timer fires after the time it was given.
    const given: number[] = [];
    const client = {
      send: (
        _w: Worker,
        _path: string,
        _body: Buffer,
        _headers: unknown,
        _id: string,
        _signal: AbortSignal,
        timeoutMs: number,
      ): Promise<PrefillResult> => {
        given.push(timeoutMs);
        h.clock.advance(timeoutMs);
        return Promise.reject(new PrefillError('timeout', `timed out after ${timeoutMs} ms`));
      },
      close: async () => undefined,
    } as unknown as PrefillClient;
    const pd = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
      client,
      connector: 'nixl',
      dispatch: 'sequential',
      prefillTimeoutMs,
      prefillRetries: 1,
      decisionHeader: false,
    });
    const full = new Set<Worker>(prefillPool.workers);
    const flow = new FlowControl(pd, {
      objectives: new ObjectiveTable(new Map()),
      pool: decodePool,
      prefillPool,
      needsPrefill: (req) => pd.needsPrefill(req),
      hasRoom: (w) => !full.has(w),
      clock: h.clock.read,
      ttlMs,
      maxQueued: 10,
      pollMs: 3_600_000,
    });
    const arrived = h.clock.read();
    const pending = flow.dispatch(COMPLETION_REQ, {
      signal: new AbortController().signal,
    }) as Promise<Dispatch>;
    expect(flow.held).toBe(1);
    // Room appears just before the hold would have expired.
    h.clock.advance(ttlMs - 10);
    full.clear();
    flow.pump();
    const err = await pending.then(
      () => undefined,
      (e: unknown) => e,
    );
    const answeredAfter = h.clock.read() - arrived;
    expect(err).toBeInstanceOf(RouterError);
    expect(err).toMatchObject({ code: 'prefill_timeout', status: 502 });
    expect(answeredAfter).toBeLessThanOrEqual(prefillTimeoutMs);
    expect(answeredAfter).toBeLessThan(messageTimeoutMs);
    expect(given).toEqual([prefillTimeoutMs - (ttlMs - 10)]);
    expect([...prefillPool.workers, ...decodePool.workers].map((w) => w.load)).toEqual([0, 0]);
    flow.close();
  });
});
