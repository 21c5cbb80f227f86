/**
 * Flow control (routing/flow-control.ts): requests wait in the router while their pool is saturated
 * and are let go as room appears, the highest priority first; a client that goes away, a full queue
 * and a request held too long are answered without any worker; loads end at 0.
 */
import { describe, expect, it } from 'vitest';
import type { Cancellation, Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { RouterError } from '../../../src/request/router-error.js';
import { FlowControl } from '../../../src/routing/flow-control.js';
import { ObjectiveTable } from '../../../src/routing/objectives.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import type { Worker } from '../../../src/workers/worker.js';
import { harness, register, servingPool } from '../workers/pool-harness.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { ModelCatalog, parseModelList } from '../../../src/workers/served-models.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';

const OBJECTIVES = new ObjectiveTable(
  new Map([
    ['batch', -1],
    ['realtime', 10],
  ]),
);

function completion(objective?: string, fairness?: string, model = 'm', prompt = 'hi'): RouteRequest {
  const raw = Buffer.from(JSON.stringify({ model, prompt }));
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {
      ...(objective === undefined ? {} : { 'x-gateway-inference-objective': objective }),
      ...(fairness === undefined ? {} : { 'x-gateway-inference-fairness-id': fairness }),
    },
    body: raw,
    inference: parseInferenceRequest('completions', undefined, raw),
  };
}

const cancellation = (): Cancellation & { abort(): void } => {
  const ac = new AbortController();
  return { signal: ac.signal, abort: () => ac.abort() };
};

/** Two workers; `full` holds the workers without room. The poll timer never fires on its own. */
function setup(opts: { maxQueued?: number; maxBytes?: number; ttlMs?: number } = {}) {
  const h = harness();
  for (const port of [8000, 8001]) register(h.registry, 'regular', port);
  const pool = h.pool('regular', 'round_robin');
  pool.reconcile();
  const full = new Set<Worker>(pool.workers);
  const refused: string[] = [];
  const waits: number[] = [];
  const routed: string[] = [];
  const inner = new PoolDispatcher({ pool, observer: {}, clock: h.clock.read, decisionHeader: false });
  const flow = new FlowControl(
    {
      dispatch: (req) => {
        routed.push(req.headers['x-gateway-inference-objective'] ?? '-');
        return inner.dispatch(req);
      },
      adopt: (req, from, endpoint) => inner.adopt(req, from, endpoint),
    },
    {
      objectives: OBJECTIVES,
      pool,
      hasRoom: (w) => !full.has(w),
      clock: h.clock.read,
      ttlMs: opts.ttlMs ?? 30_000,
      maxQueued: opts.maxQueued ?? 100,
      ...(opts.maxBytes !== undefined ? { maxBytes: opts.maxBytes } : {}),
      pollMs: 3_600_000,
      observer: {
        released: (ms) => waits.push(ms),
        refused: (reason, objective) => refused.push(`${reason}:${objective}`),
      },
    },
  );
  return { h, pool, full, flow, refused, waits, routed };
}

/** Workers 8000 (serving llama) and 8001 (qwen) behind flow control; `full` holds those without room. */
function twoModels() {
  const h = harness();
  const pool = servingPool(h, [8000, 8001], (port) => (port === 8000 ? 'llama' : 'qwen'));
  const [llamaWorker, qwenWorker] = pool.workers as [Worker, Worker];
  const full = new Set<Worker>();
  const inner = new PoolDispatcher({ pool, observer: {}, clock: h.clock.read, decisionHeader: false });
  const flow = new FlowControl(inner, {
    objectives: OBJECTIVES,
    pool,
    hasRoom: (w) => !full.has(w),
    clock: h.clock.read,
    ttlMs: 30_000,
    maxQueued: 100,
    pollMs: 3_600_000,
  });
  return { pool, flow, full, llamaWorker, qwenWorker };
}

const loads = (s: { pool: { workers: readonly Worker[] } }): number[] => s.pool.workers.map((w) => w.load);
const settle = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

async function rejection(p: Promise<Dispatch>): Promise<RouterError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof RouterError) return err;
    throw err;
  }
  throw new Error('resolved');
}

describe('FlowControl', () => {
  it('routes at once while a worker has room and nothing is held', () => {
    const s = setup();
    s.full.clear();
    const d = s.flow.dispatch(completion('batch'), cancellation()) as Dispatch;
    expect(d.worker).toBeDefined();
    expect(s.flow.held).toBe(0);
    d.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0]);
  });

  it('holds requests while saturated and lets them go as room appears, highest priority first', async () => {
    const s = setup();
    const order: string[] = [];
    const held = ['batch', undefined, 'realtime', 'batch', undefined].map((o) => {
      const p = s.flow.dispatch(completion(o), cancellation()) as Promise<Dispatch>;
      return p.then((d) => {
        order.push(o ?? '-');
        return d;
      });
    });
    expect(s.flow.held).toBe(5);
    expect(loads(s)).toEqual([0, 0]);
    // Still saturated: nothing goes.
    s.flow.pump();
    expect(s.flow.held).toBe(5);
    // One worker has room: one request per round (a worker's room is read again after each).
    s.full.delete(s.pool.workers[0] as Worker);
    s.h.clock.advance(40);
    s.flow.pump();
    expect(s.flow.held).toBe(4);
    s.full.clear();
    s.flow.pump();
    s.flow.pump();
    s.flow.pump();
    const ds = await Promise.all(held);
    expect(order).toEqual(['realtime', '-', '-', 'batch', 'batch']);
    expect(s.waits[0]).toBe(40);
    for (const d of ds) d.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0]);
  });

  it('keeps arrival order: a request arriving while others are held waits behind them', async () => {
    const s = setup();
    const first = s.flow.dispatch(completion(), cancellation()) as Promise<Dispatch>;
    s.full.clear();
    // Room now, but one is held: the newcomer queues behind it.
    const second = s.flow.dispatch(completion('realtime'), cancellation());
    expect(second).toBeInstanceOf(Promise);
    s.flow.pump();
    s.flow.pump();
    for (const d of await Promise.all([first, second])) d.finish({ kind: 'response', status: 200 });
    expect(s.routed).toEqual(['realtime', '-']);
    expect(loads(s)).toEqual([0, 0]);
  });

  it('drops a held request whose client goes away: no worker sees it', async () => {
    const s = setup();
    const c = cancellation();
    const p = s.flow.dispatch(completion('batch'), c) as Promise<Dispatch>;
    c.abort();
    const err = await rejection(p);
    expect(err.code).toBe('client_cancelled');
    expect(s.flow.held).toBe(0);
    s.full.clear();
    s.flow.pump();
    expect(s.routed).toEqual([]);
    expect(loads(s)).toEqual([0, 0]);
  });

  it('answers a request held too long: 429 for a sheddable objective, 503 for others, with retry-after', async () => {
    const s = setup({ ttlMs: 1000 });
    const batch = s.flow.dispatch(completion('batch'), cancellation()) as Promise<Dispatch>;
    const plain = s.flow.dispatch(completion(), cancellation()) as Promise<Dispatch>;
    s.h.clock.advance(999);
    s.flow.pump();
    expect(s.flow.held).toBe(2);
    s.h.clock.advance(1);
    s.flow.pump();
    const [b, p] = await Promise.all([rejection(batch), rejection(plain)]);
    expect([b.status, b.code, p.status, p.code]).toEqual([429, 'queue_timeout', 503, 'queue_timeout']);
    expect(b.headers).toEqual({ 'retry-after': '1' });
    expect(s.refused.sort()).toEqual(['queue_timeout:', 'queue_timeout:batch']);
    expect(loads(s)).toEqual([0, 0]);
  });

  it('refuses one more than --flow-queue-max of no higher priority at once with a 429', async () => {
    const s = setup({ maxQueued: 2 });
    const held = [
      s.flow.dispatch(completion(), cancellation()) as Promise<Dispatch>,
      s.flow.dispatch(completion(), cancellation()) as Promise<Dispatch>,
    ];
    let err: unknown;
    try {
      s.flow.dispatch(completion(), cancellation());
    } catch (e) {
      err = e;
    }
    expect((err as RouterError).code).toBe('queue_full');
    expect((err as RouterError).status).toBe(429);
    // Closing answers the held ones (503) and routes nothing.
    s.flow.close();
    for (const p of held) expect((await rejection(p)).status).toBe(503);
    await settle();
    expect(s.routed).toEqual([]);
    expect(loads(s)).toEqual([0, 0]);
  });

  it('holds a more important request when the queue is full of batch ones: the newest batch request gets the 429', async () => {
    const s = setup({ maxQueued: 2 });
    const older = s.flow.dispatch(completion('batch'), cancellation()) as Promise<Dispatch>;
    const newer = s.flow.dispatch(completion('batch'), cancellation()) as Promise<Dispatch>;
    // Full of batch requests: an interactive one still waits (ahead of them), a batch request's room goes.
    const realtime = s.flow.dispatch(completion('realtime'), cancellation()) as Promise<Dispatch>;
    expect(realtime).toBeInstanceOf(Promise);
    const err = await rejection(newer);
    expect([err.status, err.code, err.headers]).toEqual([429, 'queue_full', { 'retry-after': '1' }]);
    expect(s.refused).toEqual(['queue_full:batch']);
    expect(s.flow.held).toBe(2);
    // One more of no higher priority than any held request is refused itself, as before.
    expect(() => s.flow.dispatch(completion('batch'), cancellation())).toThrow(RouterError);
    s.full.clear();
    s.flow.pump();
    s.flow.pump();
    const ds = await Promise.all([realtime, older]);
    expect(s.routed).toEqual(['realtime', 'batch']);
    for (const d of ds) d.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0]);
  });

  it('holds at most --flow-queue-max-bytes of request bodies: a big one beyond gets a 429, unless batch ones give way', async () => {
    const MiB = 1024 * 1024;
    const big = (objective?: string): RouteRequest => completion(objective, undefined, 'm', 'x'.repeat(MiB));
    const s = setup({ maxBytes: 3 * MiB });
    const held = [big('batch'), big()].map((r) => s.flow.dispatch(r, cancellation()) as Promise<Dispatch>);
    expect(s.flow.held).toBe(2);
    // Two of about 1 MiB each are held; a third of no higher priority than any would pass 3 MiB.
    let err: unknown;
    try {
      s.flow.dispatch(big('batch'), cancellation());
    } catch (e) {
      err = e;
    }
    expect([(err as RouterError).status, (err as RouterError).code]).toEqual([429, 'queue_full']);
    expect(s.flow.held).toBe(2);
    // A more important one takes the batch request's bytes.
    const realtime = s.flow.dispatch(big('realtime'), cancellation()) as Promise<Dispatch>;
    expect((await rejection(held[0] as Promise<Dispatch>)).code).toBe('queue_full');
    expect(s.refused).toEqual(['queue_full:batch', 'queue_full:batch']);
    s.full.clear();
    s.flow.pump();
    s.flow.pump();
    const ds = await Promise.all([realtime, held[1] as Promise<Dispatch>]);
    expect(s.routed).toEqual(['realtime', '-']);
    for (const d of ds) d.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0]);
  });

  it('passes adopt through to the wrapped dispatcher', () => {
    const s = setup();
    s.full.clear();
    const routed = s.flow.dispatch(completion(), cancellation()) as Dispatch;
    const other = s.pool.workers.find((w) => w !== routed.worker) as Worker;
    const adopted = s.flow.adopt?.(completion(), routed, other.endpoint) as Dispatch;
    expect(adopted.worker).toBe(other);
    routed.finish({ kind: 'failed_over', served: other.endpoint });
    adopted.finish({ kind: 'response', status: 200 });
    expect(loads(s)).toEqual([0, 0]);
  });

  it('reads room per model: a model whose workers have room never waits behind another model', async () => {
    const { pool, flow, full, llamaWorker, qwenWorker } = twoModels();
    full.add(llamaWorker);
    const llama = flow.dispatch(completion(undefined, undefined, 'llama'), cancellation());
    expect(llama).toBeInstanceOf(Promise);
    // qwen's worker has room: routed at once, though a llama request is held.
    const qwen = flow.dispatch(completion(undefined, undefined, 'qwen'), cancellation()) as Dispatch;
    expect(qwen.worker).toBe(qwenWorker);
    // A round lets go only what has room: the llama request stays while its worker is full ...
    const llamaBatch = flow.dispatch(completion('batch', undefined, 'llama'), cancellation());
    flow.pump();
    expect(flow.held).toBe(2);
    // ... and goes once it has room, the best first.
    full.clear();
    flow.pump();
    flow.pump();
    const [a, b] = (await Promise.all([llama, llamaBatch])) as [Dispatch, Dispatch];
    expect([a.worker, b.worker]).toEqual([llamaWorker, llamaWorker]);
    for (const d of [qwen, a, b]) d.finish({ kind: 'response', status: 200 });
    expect(pool.workers.map((w) => w.load)).toEqual([0, 0]);
  });

  it('lets a later request of another flow go when the earlier ones cannot', async () => {
    const { pool, flow, full, llamaWorker, qwenWorker } = twoModels();
    full.add(llamaWorker).add(qwenWorker);
    const first = flow.dispatch(completion('realtime', 't', 'llama'), cancellation()) as Promise<Dispatch>;
    const later = flow.dispatch(completion(undefined, 't', 'qwen'), cancellation()) as Promise<Dispatch>;
    full.delete(qwenWorker);
    flow.pump();
    // The higher-priority llama request cannot go (its worker is full); the qwen one can.
    expect(flow.held).toBe(1);
    const q = await later;
    expect(q.worker).toBe(qwenWorker);
    full.clear();
    flow.pump();
    const l = await first;
    for (const d of [q, l]) d.finish({ kind: 'response', status: 200 });
    expect(pool.workers.map((w) => w.load)).toEqual([0, 0]);
  });
});

describe('FlowControl: a held request whose workers are gone', () => {
  it("answers a held request at once (503 no_workers) when its model's workers all go down while another model's are saturated", async () => {
    const { pool, flow, full, llamaWorker, qwenWorker } = twoModels();
    full.add(llamaWorker).add(qwenWorker);
    const held = flow.dispatch(
      completion(undefined, undefined, 'llama'),
      cancellation(),
    ) as Promise<Dispatch>;
    expect(flow.held).toBe(1);
    // llama's only worker goes down (its breaker opens, its checks fail); qwen's stays saturated.
    llamaWorker.healthy = false;
    flow.pump();
    // No worker can take it: the next round answers it, as a request arriving now is answered.
    expect(flow.held).toBe(0);
    const err = await rejection(held);
    expect([err.status, err.code]).toEqual([503, 'no_workers']);
    // A later request for llama is not held behind anything either.
    expect(() => flow.dispatch(completion(undefined, undefined, 'llama'), cancellation())).toThrow(
      RouterError,
    );
    expect(pool.workers.map((w) => w.load)).toEqual([0, 0]);
  });

  it('answers a held request at once when the only worker of its gateway subset goes down while the others are saturated', async () => {
    const s = setup();
    const [a] = s.pool.workers as [Worker, Worker];
    const held = s.flow.dispatch(
      { ...completion(), subset: new Set([a.endpoint]) },
      cancellation(),
    ) as Promise<Dispatch>;
    expect(s.flow.held).toBe(1);
    a.healthy = false;
    s.flow.pump();
    expect(s.flow.held).toBe(0);
    const err = await rejection(held);
    expect([err.status, err.code]).toEqual([503, 'no_workers']);
    expect(loads(s)).toEqual([0, 0]);
  });
});

describe('FlowControl: requests of one model that fit different workers', () => {
  /** Model m on 8000 (max_model_len 4096) and 8001 (131072); `full` holds the workers without room. */
  function mixedLengths() {
    const h = harness();
    const catalog = new ModelCatalog();
    for (const [port, len] of [
      [8000, 4096],
      [8001, 131_072],
    ] as const) {
      const { url } = register(h.registry, 'regular', port);
      catalog.recordListed(url, parseModelList(JSON.stringify({ data: [{ id: 'm', max_model_len: len }] })));
    }
    const pool = new WorkerPool('regular', createPolicy('round_robin', {}), h.registry, {
      models: {
        get version() {
          return catalog.version;
        },
        of: (w) => catalog.of(w.url),
      },
      tokensOf: (_model, chars) => Math.ceil(chars / 4),
    });
    pool.reconcile();
    const [short, long] = pool.workers as [Worker, Worker];
    const full = new Set<Worker>();
    const inner = new PoolDispatcher({ pool, observer: {}, clock: h.clock.read, decisionHeader: false });
    const flow = new FlowControl(inner, {
      objectives: OBJECTIVES,
      pool,
      hasRoom: (w) => !full.has(w),
      clock: h.clock.read,
      ttlMs: 30_000,
      maxQueued: 100,
      pollMs: 3_600_000,
    });
    return { pool, flow, full, short, long };
  }

  const prompt = (chars: number): RouteRequest => {
    const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'x'.repeat(chars) }));
    return {
      method: 'POST',
      path: '/v1/completions',
      headers: {},
      body: raw,
      inference: parseInferenceRequest('completions', undefined, raw),
    };
  };

  it('lets a short request go to a worker with room while a long one waits for the only long-context worker', async () => {
    const { pool, flow, full, short, long } = mixedLengths();
    full.add(long);
    // ~10k tokens: only the 128k worker takes it, and it is full.
    const big = flow.dispatch(prompt(40_000), cancellation()) as Promise<Dispatch>;
    expect(flow.held).toBe(1);
    // A short one of the same model queues behind it (arrival order) ...
    const small = flow.dispatch(prompt(100), cancellation()) as Promise<Dispatch>;
    expect(flow.held).toBe(2);
    // ... and goes with the next round: the 4k worker has room for it.
    flow.pump();
    expect(flow.held).toBe(1);
    const s = await small;
    expect(s.worker).toBe(short);
    full.clear();
    flow.pump();
    const b = await big;
    expect(b.worker).toBe(long);
    for (const d of [s, b]) d.finish({ kind: 'response', status: 200 });
    expect(pool.workers.map((w) => w.load)).toEqual([0, 0]);
  });
});
