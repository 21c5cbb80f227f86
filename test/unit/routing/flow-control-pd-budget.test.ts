/**
 * in P/D mode, flow control's round budget is the room of the pool with the fewest workers
 * with room (prefill or decode), also for a held request that never uses the prefill pool (a
 * parallel-sampling request, a short prompt prefilled on its decode worker, a stored response's
 * follow-up: PdDispatcher.needsPrefill false). While the prefill pool is saturated such a request is
 * never let go, though its decode worker has room: it waits until --flow-queue-ttl-ms and gets a 503.
 */
import { describe, expect, it } from 'vitest';
import type { Cancellation, Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { FlowControl } from '../../../src/routing/flow-control.js';
import { ObjectiveTable } from '../../../src/routing/objectives.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import type { Worker } from '../../../src/workers/worker.js';
import { harness, register } from '../workers/pool-harness.js';

function sampling(n: number): RouteRequest {
  const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi', n }));
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    body: raw,
    inference: parseInferenceRequest('completions', undefined, raw),
  };
}

const cancellation = (): Cancellation => ({ signal: new AbortController().signal });

describe('flow control in P/D mode', () => {
  it('lets a decode-only request go when its decode worker has room while the prefill pool is saturated', async () => {
    const h = harness();
    register(h.registry, 'prefill', 8000);
    register(h.registry, 'decode', 8001);
    const prefillPool = h.pool('prefill', 'round_robin');
    const decodePool = h.pool('decode', 'round_robin');
    prefillPool.reconcile();
    decodePool.reconcile();
    const full = new Set<Worker>([...prefillPool.workers, ...decodePool.workers]);
    const inner = new PoolDispatcher({
      pool: decodePool,
      observer: {},
      clock: h.clock.read,
      decisionHeader: false,
    });
    const flow = new FlowControl(inner, {
      objectives: new ObjectiveTable(new Map()),
      pool: decodePool,
      prefillPool,
      // As PdDispatcher.needsPrefill: a request for several sequences is served by its decode worker alone.
      needsPrefill: (req) => (req.inference?.sequences ?? 1) <= 1,
      hasRoom: (w) => !full.has(w),
      clock: h.clock.read,
      ttlMs: 30_000,
      maxQueued: 100,
      pollMs: 3_600_000,
    });
    let released: Dispatch | undefined;
    const p = flow.dispatch(sampling(2), cancellation()) as Promise<Dispatch>;
    void p.then((d) => (released = d));
    expect(flow.held).toBe(1);
    // The decode worker gets room; the prefill worker (which this request never uses) stays saturated.
    full.delete(decodePool.workers[0] as Worker);
    h.clock.advance(100);
    flow.pump();
    await new Promise((r) => setImmediate(r));
    expect(flow.held).toBe(0);
    expect(released?.worker).toBe(decodePool.workers[0]);
    released?.finish({ kind: 'response', status: 200 });
    flow.close();
  });
});
