/**
 * Fallback endpoints: which other workers the destination list names, and how the pool dispatcher
 * names them and takes a request back from the gateway's fallback (routing/fallback-endpoints.ts,
 * PoolDispatcher.adopt).
 */
import { describe, expect, it } from 'vitest';
import { destinationList, fallbackWorkers } from '../../../src/routing/fallback-endpoints.js';
import { FAILOVER, PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { DESTINATION_HEADER } from '../../../src/extproc/headers.js';
import { Worker } from '../../../src/workers/worker.js';
import { harness, register } from '../workers/pool-harness.js';

function workers(n: number): Worker[] {
  return Array.from(
    { length: n },
    (_, i) =>
      new Worker({
        role: 'regular',
        url: `http://10.0.0.1:${8000 + i}`,
        endpoint: `10.0.0.1:${8000 + i}`,
        generation: 1,
      }),
  );
}

describe('fallbackWorkers', () => {
  it('names the least loaded others, by (load, processed, index), never the chosen one', () => {
    const [a, b, c, d] = workers(4) as [Worker, Worker, Worker, Worker];
    b.load = 3;
    c.load = 1;
    d.load = 1;
    d.processed = 0;
    c.processed = 5;
    expect(fallbackWorkers([a, b, c, d], a, 2)).toEqual([d, c]);
    expect(fallbackWorkers([a, b, c, d], a, 5)).toEqual([d, c, b]);
    expect(fallbackWorkers([a, b, c, d], d, 1)).toEqual([a]);
  });

  it("puts the cost model's runner-up first when it is a candidate", () => {
    const [a, b, c] = workers(3) as [Worker, Worker, Worker];
    b.load = 9;
    expect(fallbackWorkers([a, b, c], a, 2, b)).toEqual([b, c]);
    // A runner-up that is no longer a candidate, or the chosen one itself, is not named.
    const [, , , gone] = workers(4) as [Worker, Worker, Worker, Worker];
    expect(fallbackWorkers([a, b, c], a, 2, gone)).toEqual([c, b]);
    expect(fallbackWorkers([a, b, c], a, 1, a)).toEqual([c]);
  });

  it('names none when asked for none or when the chosen worker is alone', () => {
    const [a, b] = workers(2) as [Worker, Worker];
    expect(fallbackWorkers([a, b], a, 0)).toEqual([]);
    expect(fallbackWorkers([a], a, 3)).toEqual([]);
  });

  it('fills the slots the fallbacks leave with the chosen endpoint (no retry reaches a host it did not name)', () => {
    const [a, b] = workers(2) as [Worker, Worker];
    expect(destinationList(a, [b], 3)).toBe('10.0.0.1:8000,10.0.0.1:8001,10.0.0.1:8000,10.0.0.1:8000');
    expect(destinationList(a, [], 1)).toBe('10.0.0.1:8000,10.0.0.1:8000');
    expect(destinationList(a, [], 0)).toBe('10.0.0.1:8000');
  });

  it('lists the chosen endpoint first, comma-separated, as the endpoint-picker protocol writes it', () => {
    const [a, b, c] = workers(3) as [Worker, Worker, Worker];
    expect(destinationList(a, [])).toBe('10.0.0.1:8000');
    expect(destinationList(a, [c, b])).toBe('10.0.0.1:8000,10.0.0.1:8002,10.0.0.1:8001');
  });
});

function setup(fallbackEndpoints: number) {
  const h = harness();
  for (const port of [8000, 8001, 8002]) register(h.registry, 'regular', port);
  const pool = h.pool('regular', 'round_robin');
  const decided: string[] = [];
  const dispatcher = new PoolDispatcher({
    pool,
    observer: { decided: (_p, d) => decided.push(d.branch) },
    clock: h.clock.read,
    decisionHeader: true,
    fallbackEndpoints,
  });
  const completion = (): RouteRequest => {
    const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi' }));
    return {
      method: 'POST',
      path: '/v1/completions',
      headers: {},
      body: raw,
      inference: parseInferenceRequest('completions', undefined, raw),
    };
  };
  return { pool, dispatcher, decided, completion };
}

const loads = (d: { pool: { workers: readonly Worker[] } }): number[] => d.pool.workers.map((w) => w.load);

describe('PoolDispatcher with fallback endpoints', () => {
  it('names the chosen worker, then the others, in the destination header', () => {
    const s = setup(2);
    const d = s.dispatcher.dispatch(s.completion());
    const list = d.setHeaders[DESTINATION_HEADER]?.split(',') ?? [];
    expect(list).toHaveLength(3);
    expect(list[0]).toBe(d.worker.endpoint);
    expect(new Set(list).size).toBe(3);
    d.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0, 0]);
  });

  it('counts the named fallbacks as pending until the response starts or the request ends', () => {
    // A worker being put to sleep waits for them: the gateway may still retry a request onto it.
    const s = setup(2);
    const pending = () => s.pool.workers.map((w) => s.dispatcher.pendingFallbacks(w));
    const answered = s.dispatcher.dispatch(s.completion());
    const cut = s.dispatcher.dispatch(s.completion());
    const chosen = [answered.worker, cut.worker];
    expect(pending()).toEqual(s.pool.workers.map((w) => 2 - chosen.filter((c) => c === w).length));
    answered.onResponseStart?.(200, false); // answered: no retry can move it any more
    expect(pending()).toEqual(s.pool.workers.map((w) => (w === cut.worker ? 0 : 1)));
    answered.finish({ kind: 'unwatched', status: 200 });
    cut.finish({ kind: 'cancelled', afterHeaders: false }); // ended before any answer
    expect(pending()).toEqual([0, 0, 0]);
    expect(loads(s)).toEqual([0, 0, 0]);
    // One endpoint only: nothing is pending anywhere.
    const single = setup(0);
    const d = single.dispatcher.dispatch(single.completion());
    expect(single.pool.workers.map((w) => single.dispatcher.pendingFallbacks(w))).toEqual([0, 0, 0]);
    d.finish({ kind: 'response', status: 200 });
  });

  it('names one endpoint when the setting is 0; a body named for the chosen worker names it in every slot', () => {
    const s = setup(0);
    const d = s.dispatcher.dispatch(s.completion());
    expect(d.setHeaders[DESTINATION_HEADER]).toBe(d.worker.endpoint);
    d.finish({ kind: 'response', status: 200 });
    // A /v1/responses body carries a response id naming its worker: no other worker may serve it, and
    // no retry may walk past the list to Envoy's own choice of host.
    const named = setup(2);
    const raw = Buffer.from(JSON.stringify({ model: 'm', input: 'hello' }));
    const r = named.dispatcher.dispatch({
      method: 'POST',
      path: '/v1/responses',
      headers: {},
      body: raw,
      inference: parseInferenceRequest('responses', undefined, raw),
    });
    expect(r.body).toBeDefined();
    const ep = r.worker.endpoint;
    expect(r.setHeaders[DESTINATION_HEADER]).toBe(`${ep},${ep},${ep}`);
    expect(named.pool.workers.map((w) => named.dispatcher.pendingFallbacks(w))).toEqual([0, 0, 0]);
    r.finish({ kind: 'response', status: 200 });
    expect(loads(named)).toEqual([0, 0, 0]);
  });

  it("adopt moves the request's load to the worker that served it; an unknown endpoint adopts nothing", () => {
    const s = setup(1);
    const routed: Dispatch = s.dispatcher.dispatch(s.completion());
    const named = routed.setHeaders[DESTINATION_HEADER]?.split(',')[1];
    const other = s.pool.workers.find((w) => w.endpoint === named) as Worker;
    const req: RouteRequest = { method: 'POST', path: '/v1/completions', headers: {} };
    const adopted = s.dispatcher.adopt(req, routed, other.endpoint) as Dispatch;
    expect(adopted.worker).toBe(other);
    expect(adopted.decision.branch).toBe(FAILOVER);
    expect(s.decided).toEqual(['round_robin', FAILOVER]);
    expect(adopted.responseHeaders?.(200)?.['x-vllm-router-decision']).toContain(`worker=${other.url}`);
    expect(routed.worker.load).toBe(1);
    expect(other.load).toBe(1);
    routed.finish({ kind: 'failed_over', served: other.endpoint });
    expect(routed.worker.load).toBe(0);
    expect(other.load).toBe(1);
    adopted.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0, 0]);
    expect(other.processed).toBe(1);
    expect(s.dispatcher.adopt(req, routed, '10.9.9.9:1')).toBeUndefined();
  });
});

describe("PoolDispatcher with the gateway's endpoint subset", () => {
  const withSubset = (req: RouteRequest, subset: string[]): RouteRequest => ({
    ...req,
    subset: new Set(subset),
  });

  it('chooses among the allowed endpoints only, and names fallbacks among them', () => {
    const s = setup(2);
    const allowed = ['10.0.0.1:8001', '10.0.0.1:8002'];
    for (let n = 0; n < 4; n++) {
      const d = s.dispatcher.dispatch(withSubset(s.completion(), allowed));
      expect(allowed).toContain(d.worker.endpoint);
      // One fallback is all the subset allows; the chosen endpoint fills the second slot.
      const list = d.setHeaders[DESTINATION_HEADER]?.split(',') ?? [];
      expect([...new Set(list)].sort()).toEqual(allowed);
      expect(list).toEqual([
        d.worker.endpoint,
        allowed.find((e) => e !== d.worker.endpoint),
        d.worker.endpoint,
      ]);
      d.finish({ kind: 'response', status: 200 });
    }
    expect(s.pool.workers.find((w) => w.endpoint === '10.0.0.1:8000')?.processed).toBe(0);
  });

  it('a subset with no selectable worker is a JSON 503 that says so', () => {
    const s = setup(0);
    for (const subset of [['10.9.9.9:1'], []]) {
      expect(() => s.dispatcher.dispatch(withSubset(s.completion(), subset))).toThrow(
        expect.objectContaining({
          status: 503,
          code: 'no_workers',
          message: expect.stringContaining('x-gateway-destination-endpoint-subset'),
        }),
      );
    }
    expect(loads(s)).toEqual([0, 0, 0]);
  });
});
