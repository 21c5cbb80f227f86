/**
 * Admission (routing/admission.ts): a request whose objective has a negative priority is answered 429
 * while every candidate worker of a pool it needs is saturated; everything else reaches the dispatcher.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, Dispatcher, RouteRequest } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { RouterError } from '../../../src/request/router-error.js';
import { withAdmission } from '../../../src/routing/admission.js';
import { OBJECTIVE_HEADER, ObjectiveTable } from '../../../src/routing/objectives.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import type { Worker } from '../../../src/workers/worker.js';
import type { WorkerPool } from '../../../src/workers/worker-pool.js';
import { harness, register } from '../workers/pool-harness.js';

const OBJECTIVES = new ObjectiveTable(
  new Map([
    ['batch', -1],
    ['standard', 0],
    ['realtime', 10],
  ]),
);

function completion(objective?: string, extra: Partial<RouteRequest> = {}): RouteRequest {
  const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi' }));
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: objective === undefined ? {} : { [OBJECTIVE_HEADER]: objective },
    body: raw,
    inference: parseInferenceRequest('completions', undefined, raw),
    ...extra,
  };
}

/** Two regular workers behind a PoolDispatcher; `busy` holds the workers without room. */
function setup(objectives = OBJECTIVES) {
  const h = harness();
  for (const port of [8000, 8001]) register(h.registry, 'regular', port);
  const pool = h.pool('regular', 'round_robin');
  const busy = new Set<Worker>();
  const shed: Array<[string, number, string]> = [];
  const inner = new PoolDispatcher({ pool, observer: {}, clock: h.clock.read, decisionHeader: false });
  const dispatcher = withAdmission(inner, {
    objectives,
    pool,
    saturated: (workers) => workers.every((w) => busy.has(w)),
    shed: (objective, priority, role) => shed.push([objective, priority, role]),
  });
  pool.reconcile();
  return { h, pool, busy, shed, inner, dispatcher };
}

const loads = (pool: WorkerPool): number[] => pool.workers.map((w) => w.load);

function shedError(d: Dispatcher, req: RouteRequest): RouterError {
  try {
    d.dispatch(req, { signal: new AbortController().signal });
  } catch (err) {
    if (err instanceof RouterError) return err;
    throw err;
  }
  throw new Error('the request was not shed');
}

const cancel = { signal: new AbortController().signal };

describe('withAdmission', () => {
  it('sheds a sheddable request with a JSON 429 while every candidate is saturated, loading nothing', () => {
    const s = setup();
    for (const w of s.pool.workers) s.busy.add(w);
    const err = shedError(s.dispatcher, completion('batch'));
    expect(err.status).toBe(429);
    expect(err.code).toBe('pool_saturated');
    expect(err.toJSON().error.message).toMatch(/objective "batch" \(priority -1\)/);
    expect(err.headers).toEqual({ 'retry-after': '1' });
    expect(s.shed).toEqual([['batch', -1, 'regular']]);
    expect(loads(s.pool)).toEqual([0, 0]);
    expect(s.pool.workers.map((w) => w.processed)).toEqual([0, 0]);
  });

  it('routes a sheddable request while one candidate has room', () => {
    const s = setup();
    const [a, b] = s.pool.workers as [Worker, Worker];
    s.busy.add(a);
    const d = s.dispatcher.dispatch(completion('batch'), cancel) as Dispatch;
    expect([a, b]).toContain(d.worker);
    d.finish({ kind: 'response', status: 200 });
    expect(s.shed).toEqual([]);
    expect(loads(s.pool)).toEqual([0, 0]);
  });

  it.each([undefined, 'standard', 'realtime', 'unknown-objective'])(
    'never sheds objective %j (priority >= 0), saturated or not',
    (objective) => {
      const s = setup();
      for (const w of s.pool.workers) s.busy.add(w);
      const d = s.dispatcher.dispatch(completion(objective), cancel) as Dispatch;
      expect(d.worker).toBeDefined();
      d.finish({ kind: 'response', status: 200 });
      expect(s.shed).toEqual([]);
      expect(loads(s.pool)).toEqual([0, 0]);
    },
  );

  it("leaves a request without any candidate to the dispatcher's own 503", () => {
    const s = setup();
    for (const w of s.pool.workers) s.busy.add(w);
    const err = shedError(s.dispatcher, completion('batch', { subset: new Set(['10.9.9.9:1']) }));
    expect(err.status).toBe(503);
    expect(err.code).toBe('no_workers');
    expect(s.shed).toEqual([]);
  });

  it("reads only the candidates the request could go to (the gateway's subset)", () => {
    const s = setup();
    const [a, b] = s.pool.workers as [Worker, Worker];
    s.busy.add(a);
    // b has room, but the gateway allows a alone.
    const err = shedError(s.dispatcher, completion('batch', { subset: new Set([a.endpoint]) }));
    expect(err.code).toBe('pool_saturated');
    const d = s.dispatcher.dispatch(
      completion('batch', { subset: new Set([b.endpoint]) }),
      cancel,
    ) as Dispatch;
    expect(d.worker).toBe(b);
    d.finish({ kind: 'response', status: 200 });
    expect(loads(s.pool)).toEqual([0, 0]);
  });

  it('is the dispatcher itself when no objective is sheddable, and passes adopt through', () => {
    const s = setup(new ObjectiveTable(new Map([['standard', 0]])));
    expect(s.dispatcher).toBe(s.inner);
    const shedding = setup();
    const routed = shedding.dispatcher.dispatch(completion(), cancel) as Dispatch;
    const other = shedding.pool.workers.find((w) => w !== routed.worker) as Worker;
    const req: RouteRequest = { method: 'POST', path: '/v1/completions', headers: {} };
    const adopted = shedding.dispatcher.adopt?.(req, routed, other.endpoint) as Dispatch;
    expect(adopted.worker).toBe(other);
    routed.finish({ kind: 'failed_over', served: other.endpoint });
    adopted.finish({ kind: 'response', status: 200 });
    expect(loads(shedding.pool)).toEqual([0, 0]);
  });
});

describe('withAdmission with objectives watched from Kubernetes', () => {
  it('stays in place while nothing sheds, and sheds once a watched objective turns negative', () => {
    const objectives = new ObjectiveTable(new Map(), true);
    const s = setup(objectives);
    expect(s.dispatcher).not.toBe(s.inner);
    for (const w of s.pool.workers) s.busy.add(w);
    const d = s.dispatcher.dispatch(completion('bulk'), cancel) as Dispatch;
    d.finish({ kind: 'response', status: 200 });
    objectives.setWatched(new Map([['bulk', -2]]));
    expect(shedError(s.dispatcher, completion('bulk')).code).toBe('pool_saturated');
    expect(s.shed).toEqual([['bulk', -2, 'regular']]);
    expect(loads(s.pool)).toEqual([0, 0]);
  });
});

describe('withAdmission in P/D mode', () => {
  function pd(needsPrefill?: (req: RouteRequest) => boolean) {
    const h = harness();
    register(h.registry, 'prefill', 9000);
    register(h.registry, 'decode', 9100);
    const prefill = h.pool('prefill', 'round_robin');
    const decode = h.pool('decode', 'round_robin');
    const busy = new Set<Worker>();
    const shed: string[] = [];
    const inner = new PoolDispatcher({
      pool: decode,
      observer: {},
      clock: h.clock.read,
      decisionHeader: false,
    });
    const dispatcher = withAdmission(inner, {
      objectives: OBJECTIVES,
      pool: decode,
      prefillPool: prefill,
      ...(needsPrefill ? { needsPrefill } : {}),
      saturated: (workers) => workers.every((w) => busy.has(w)),
      shed: (_o, _p, role) => shed.push(role),
    });
    prefill.reconcile();
    decode.reconcile();
    return { prefill, decode, busy, shed, dispatcher };
  }

  it('sheds an inference request when the prefill pool is saturated, naming the role', () => {
    const s = pd();
    s.busy.add(s.prefill.workers[0] as Worker);
    const err = shedError(s.dispatcher, completion('batch'));
    expect(err.message).toMatch(/Every prefill worker/);
    expect(s.shed).toEqual(['prefill']);
  });

  it('reads only the decode pool for an inference request the P/D dispatcher serves without a leg (a short prompt)', () => {
    const s = pd(() => false);
    s.busy.add(s.prefill.workers[0] as Worker);
    const d = s.dispatcher.dispatch(completion('batch'), cancel) as Dispatch;
    expect(d.worker).toBe(s.decode.workers[0]);
    d.finish({ kind: 'response', status: 200 });
    expect(s.shed).toEqual([]);
    s.busy.add(s.decode.workers[0] as Worker);
    expect(shedError(s.dispatcher, completion('batch')).message).toMatch(/Every decode worker/);
  });

  it('reads only the decode pool for a request that has no prefill leg', () => {
    const s = pd();
    s.busy.add(s.prefill.workers[0] as Worker);
    const req: RouteRequest = { method: 'GET', path: '/v1/models', headers: { [OBJECTIVE_HEADER]: 'batch' } };
    const d = s.dispatcher.dispatch(req, cancel) as Dispatch;
    expect(d.worker).toBe(s.decode.workers[0]);
    d.finish({ kind: 'response', status: 200 });
    s.busy.add(s.decode.workers[0] as Worker);
    expect(shedError(s.dispatcher, req).message).toMatch(/Every decode worker/);
    expect(s.decode.workers[0]?.load).toBe(0);
  });
});
