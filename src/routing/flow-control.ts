/**
 * Flow control (`--flow-control`): while the pool a request needs is saturated (load/saturation.ts: no
 * worker has room), the request waits HERE, in the router, instead of in a worker's queue, and requests
 * are let go as room appears, the most important first (routing/flow-queue.ts: by the priority of
 * their objective, routing/objectives.ts, then taking turns between fairness ids). This is the endpoint
 * picker's flow control: a worker's own queue is first come, first served, so a flood of batch
 * requests queued there delays every interactive request behind it; held here, an interactive request
 * goes before every batch request still waiting.
 *
 * - A request is held only while the workers it could go to (its model's, inside the gateway's subset;
 *   in P/D the decode workers and, for a request with a prefill leg, the prefill workers too) are all
 *   saturated, or others for its model are held (their arrival order is kept); otherwise it goes to the
 *   wrapped dispatcher at once, as without flow control. A request for a model whose workers have room
 *   never waits behind another model's saturated workers.
 * - Holding is Envoy waiting for the ext_proc reply: `--flow-queue-ttl-ms` (default 30 s) must stay
 *   below the filter's `message_timeout` (90 s in the shipped configs). A request held that long gets a
 *   JSON 429 (a sheddable objective) or 503 (others) `queue_timeout`, with `retry-after`. A request let
 *   go carries when it was held (RouteRequest `arrivedAt`): its P/D prefill leg, which Envoy waits for
 *   too, gets what is left of `--prefill-timeout-ms` counted from then, so the two never add up.
 * - At most `--flow-queue-max` requests, and `--flow-queue-max-bytes` of their bodies (held for up to
 *   the TTL: a flood of long prompts or images must not run the router out of memory), are held; one
 *   more gets a 429 `queue_full` at once, unless it matters more than some held requests: then the
 *   newest of the least important held ones get it (the endpoint picker bounds each priority band on
 *   its own, so a flood of batch requests never keeps an interactive one out).
 * - A client that goes away while held is dropped from the queue: nothing was loaded or sent.
 * - Room is read on a timer every `pollMs` while anything is held. A round lets go, best first, the
 *   held requests whose workers have room, at most one per worker with room in each pool it uses (a
 *   request without a prefill leg spends only the decode pool's), reading room again after each: with the cost
 *   model (the default policy) the router's own queued prefills count on top of each sample at once
 *   (load/saturation.ts); with other policies a worker's room shows only in its next scrape, so a
 *   round's budget bounds how far one sample's room is handed out.
 * - Sheddable requests are held too (flow control replaces shedding at arrival), behind everything
 *   of a higher priority.
 *
 * One queue per router, as the endpoint picker keeps one per pool; room is read per request.
 */
import type { Cancellation, Dispatch, Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import { RouterError } from '../request/router-error.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { Worker } from '../workers/worker.js';
import { FAIRNESS_HEADER } from '../extproc/headers.js';
import { OBJECTIVE_HEADER, type ObjectiveTable } from './objectives.js';
import { FlowQueue, type QueuedRequest } from './flow-queue.js';
import { RETRY_AFTER_S } from './admission.js';
import { routingContext } from './pool-dispatcher.js';
import { candidates, type RoutingContext } from './selector.js';

export interface FlowControlOptions {
  readonly objectives: ObjectiveTable;
  /** The decode pool in P/D mode, else the regular pool. */
  readonly pool: WorkerPool;
  /** P/D mode: the prefill pool, which inference requests need too. */
  readonly prefillPool?: WorkerPool;
  /** P/D mode: whether the request gets a prefill leg (pd-dispatcher.ts `needsPrefill`); default: an inference request. */
  needsPrefill?(req: RouteRequest): boolean;
  /** Whether this worker has room for one more request (load/saturation.ts `hasRoom`). */
  hasRoom(worker: Worker): boolean;
  readonly clock: () => number;
  /** How long a request may be held. */
  readonly ttlMs: number;
  /** How many requests may be held at once. */
  readonly maxQueued: number;
  /** How many bytes of request bodies may be held at once; absent: no bound. */
  readonly maxBytes?: number;
  /** How often room is looked for while requests are held. */
  readonly pollMs: number;
  readonly observer?: FlowObserver;
}

export interface FlowObserver {
  /** A held request was let go after `waitedMs`. */
  released?(waitedMs: number): void;
  /** A request was refused: the queue was full, or it was held `--flow-queue-ttl-ms`. */
  refused?(reason: 'queue_full' | 'queue_timeout', objective: string): void;
}

interface Held {
  readonly req: RouteRequest;
  readonly cancel: Cancellation;
  readonly objective: string;
  /** What the pools' candidate filter reads of the request (its model, the gateway's subset). */
  readonly ctx: RoutingContext;
  resolve(d: Dispatch | Promise<Dispatch>): void;
  reject(err: unknown): void;
  onAbort?: () => void;
}

export class FlowControl implements Dispatcher {
  private readonly queue = new FlowQueue<Held>();
  /** Requests held per model: a request for a model with requests held waits behind them. */
  private readonly heldByModel = new Map<string, number>();
  /** Held requests that name a gateway subset. */
  private subsetHeld = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  readonly adopt: Dispatcher['adopt'];

  constructor(
    private readonly inner: Dispatcher,
    private readonly opts: FlowControlOptions,
  ) {
    this.adopt = inner.adopt?.bind(inner);
  }

  /** Requests held now. */
  get held(): number {
    return this.queue.size;
  }

  dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
    const ctx = routingContext(req);
    if (!this.heldByModel.has(ctx.model)) {
      this.reconcile();
      if (this.roomFor(ctx, req)) return this.inner.dispatch(req, cancel);
    }
    const objective = req.headers[OBJECTIVE_HEADER] ?? '';
    if (this.closed) throw closing();
    const priority = this.opts.objectives.priority(req.headers[OBJECTIVE_HEADER]);
    const bytes = req.body?.length ?? 0;
    if (!this.hasSpace(0, 0, bytes)) {
      // Full: the newest of the least important held requests give way to one that matters more,
      // when enough of them can.
      const lower = this.queue.below(priority);
      if (!this.hasSpace(lower.count, lower.bytes, bytes)) {
        this.opts.observer?.refused?.('queue_full', objective);
        throw queueFull();
      }
      while (!this.hasSpace(0, 0, bytes)) {
        const out = this.queue.displace(priority) as QueuedRequest<Held>;
        this.leave(out.item);
        this.opts.observer?.refused?.('queue_full', out.item.objective);
        out.item.reject(queueFull());
      }
    }
    return new Promise<Dispatch>((resolve, reject) => {
      const held: Held = { req, cancel, objective, ctx, resolve, reject };
      const entry: QueuedRequest<Held> = {
        item: held,
        priority,
        flow: req.headers[FAIRNESS_HEADER] ?? '',
        queuedAt: this.opts.clock(),
        bytes,
      };
      const signal = cancel.signal;
      if (signal.aborted) {
        reject(cancelled());
        return;
      }
      this.queue.push(entry);
      this.count(held, 1);
      held.onAbort = () => {
        if (!this.queue.remove(entry)) return;
        this.count(held, -1);
        reject(cancelled());
      };
      signal.addEventListener('abort', held.onAbort, { once: true });
      this.schedule();
    });
  }

  /** Lets held requests go while their workers have room (called on the timer; exposed for tests). */
  pump(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const now = this.opts.clock();
    for (const e of this.queue.expired(now - this.opts.ttlMs)) {
      this.leave(e.item);
      this.opts.observer?.refused?.('queue_timeout', e.item.objective);
      e.item.reject(queueTimeout(e.priority, this.opts.ttlMs));
    }
    this.reconcile();
    // A round's budget per pool: a request without a prefill leg spends the decode pool's alone.
    let budget = this.room(this.opts.pool);
    let prefillBudget = this.opts.prefillPool === undefined ? Infinity : this.room(this.opts.prefillPool);
    // Room per candidate set within one pick (a release changes the room of its workers: read again).
    // Keyed by the pool's candidates array, not the model: requests of one model that fit different
    // workers (context length) or gateway subsets have candidate sets of their own.
    const memo = new Map<readonly Worker[], boolean>();
    // A request spends a pool's budget only when it has a candidate there: one with none (its model's
    // workers all down or gone) goes to the dispatcher's 503 even while the other workers are saturated.
    let spends: Fit = NO_FIT;
    const ready = (e: QueuedRequest<Held>): boolean => {
      const fit = this.fit(e.item.ctx, e.item.req, memo, budget > 0, prefillBudget > 0);
      if (fit === undefined) return false;
      spends = fit;
      return true;
    };
    // No room at all (the common case while saturated): look through the queue only when some held
    // request may have no worker to wait for.
    while (this.queue.size > 0 && (budget > 0 || this.someUnserved())) {
      const e = this.queue.take(ready);
      if (e === undefined) break;
      if (spends.decode) budget--;
      if (spends.prefill) prefillBudget--;
      memo.clear();
      this.leave(e.item);
      this.opts.observer?.released?.(now - e.queuedAt);
      try {
        e.item.resolve(this.inner.dispatch({ ...e.item.req, arrivedAt: e.queuedAt }, e.item.cancel));
      } catch (err) {
        e.item.reject(err);
      }
    }
    this.schedule();
  }

  /** Refuses everything held (the router is closing) and stops the timer. Idempotent. */
  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    for (const e of this.queue.drain()) {
      this.leave(e.item);
      e.item.reject(closing());
    }
  }

  private schedule(): void {
    if (this.timer !== undefined || this.queue.size === 0 || this.closed) return;
    this.timer = setTimeout(() => this.pump(), this.opts.pollMs);
    this.timer.unref();
  }

  /** Whether one more request of `bytes` fits, once `count` held requests of `freed` bytes are gone. */
  private hasSpace(count: number, freed: number, bytes: number): boolean {
    return (
      this.queue.size - count < this.opts.maxQueued &&
      this.queue.bytes - freed + bytes <= (this.opts.maxBytes ?? Infinity)
    );
  }

  /**
   * Whether some held request may have no decode (or regular) candidate: its model has none, or it
   * names a gateway subset (checked request by request).
   */
  private someUnserved(): boolean {
    if (this.subsetHeld > 0) return true;
    for (const model of this.heldByModel.keys()) {
      if (this.opts.pool.candidatesFor(model).length === 0) return true;
    }
    return false;
  }

  /** A held request leaves the queue (let go, expired, or the router closing). */
  private leave(held: Held): void {
    if (held.onAbort) held.cancel.signal.removeEventListener('abort', held.onAbort);
    this.count(held, -1);
  }

  private count(held: Held, delta: 1 | -1): void {
    if (held.ctx.subset !== undefined) this.subsetHeld += delta;
    const model = held.ctx.model;
    const n = (this.heldByModel.get(model) ?? 0) + delta;
    if (n > 0) this.heldByModel.set(model, n);
    else this.heldByModel.delete(model);
  }

  private reconcile(): void {
    this.opts.pool.reconcile();
    this.opts.prefillPool?.reconcile();
  }

  /** Whether the request's workers have room (see `fit`). */
  private roomFor(ctx: RoutingContext, req: RouteRequest): boolean {
    return this.fit(ctx, req) !== undefined;
  }

  /**
   * Undefined while the request must wait: some pool it needs has candidates for it, none with room
   * (or that pool's round budget is spent: `decodeOpen`, `prefillOpen` false). Else the pools whose
   * workers it would take (those with a candidate for it). A pool with no candidate for it counts as
   * room: the dispatcher answers it (503). `memo`: room per candidates array.
   */
  private fit(
    ctx: RoutingContext,
    req: RouteRequest,
    memo?: Map<readonly Worker[], boolean>,
    decodeOpen = true,
    prefillOpen = true,
  ): Fit | undefined {
    const { pool, prefillPool, hasRoom } = this.opts;
    const someRoom = (workers: readonly Worker[]): boolean => {
      let room = memo?.get(workers);
      if (room === undefined) {
        room = workers.some(hasRoom);
        memo?.set(workers, room);
      }
      return room;
    };
    const decodeWorkers = candidates(pool, ctx);
    const decode = decodeWorkers.length > 0;
    if (decode && !(decodeOpen && someRoom(decodeWorkers))) return undefined;
    if (!this.needsPrefill(req)) return decode ? DECODE_FIT : NO_FIT;
    const prefillWorkers = candidates(prefillPool as WorkerPool, ctx);
    const prefill = prefillWorkers.length > 0;
    if (prefill && !(prefillOpen && someRoom(prefillWorkers))) return undefined;
    return { decode, prefill };
  }

  /** P/D: whether the request uses the prefill pool too (a prefill leg). */
  private needsPrefill(req: RouteRequest): boolean {
    return (
      this.opts.prefillPool !== undefined && (this.opts.needsPrefill?.(req) ?? req.inference !== undefined)
    );
  }

  /** Selectable workers with room; Infinity for a pool without any (its requests get the 503). */
  private room(pool: WorkerPool): number {
    const workers = pool.candidates();
    if (workers.length === 0) return Infinity;
    let n = 0;
    for (const w of workers) if (this.opts.hasRoom(w)) n++;
    return n;
  }
}

/** The pools a request let go takes a worker of (the decode pool, or the regular one; the prefill pool). */
interface Fit {
  readonly decode: boolean;
  readonly prefill: boolean;
}
const NO_FIT: Fit = Object.freeze({ decode: false, prefill: false });
const DECODE_FIT: Fit = Object.freeze({ decode: true, prefill: false });

function queueFull(): RouterError {
  return new RouterError(
    'queue_full',
    429,
    'The router already holds as many requests (--flow-queue-max), or request bytes (--flow-queue-max-bytes), ' +
      'for saturated workers as it may. Retry later.',
    'rate_limit_error',
    { 'retry-after': String(RETRY_AFTER_S) },
  );
}

function queueTimeout(priority: number, ttlMs: number): RouterError {
  const message = `Held ${ttlMs} ms while every worker was saturated (--flow-queue-ttl-ms). Retry later.`;
  const headers = { 'retry-after': String(RETRY_AFTER_S) };
  return priority < 0
    ? new RouterError('queue_timeout', 429, message, 'rate_limit_error', headers)
    : new RouterError('queue_timeout', 503, message, 'service_unavailable', headers);
}

function cancelled(): RouterError {
  return new RouterError('client_cancelled', 499, 'The client went away while the request was held.');
}

function closing(): RouterError {
  return new RouterError('no_workers', 503, 'The router is closing.', 'service_unavailable');
}
