/**
 * Flow control (`--flow-control`): while the pool a request needs is saturated (load/saturation.ts: no
 * worker has room), the request waits HERE, in the router, instead of in a worker's queue, and requests
 * are let go as room appears, the most important first (routing/flow-queue.ts: by the priority of
 * their objective, routing/objectives.ts, then taking turns between fairness ids). This is the endpoint
 * picker's flow control: a worker's own queue is first come, first served, so a flood of batch
 * requests queued there delays every interactive request behind it; held here, an interactive request
 * goes before every batch request still waiting.
 *
 * - A request is held only while the pool is saturated or others are held (arrival order is kept);
 *   otherwise it goes to the wrapped dispatcher at once, as without flow control.
 * - Holding is Envoy waiting for the ext_proc reply: `--flow-queue-ttl-ms` (default 30 s) must stay
 *   below the filter's `message_timeout` (90 s in the shipped configs). A request held that long gets a
 *   JSON 429 (a sheddable objective) or 503 (others) `queue_timeout`, with `retry-after`.
 * - At most `--flow-queue-max` requests are held; one more gets a 429 `queue_full` at once.
 * - A client that goes away while held is dropped from the queue: nothing was loaded or sent.
 * - Room is read on a timer every `pollMs` while anything is held. One round lets go at most one
 *   request per worker with room (of the pool with the fewest), then reads room again: with the cost
 *   model (the default policy) the router's own queued prefills count on top of each sample at once
 *   (load/saturation.ts); with other policies a worker's room shows only in its next scrape, so a
 *   round's budget bounds how far one sample's room is handed out.
 * - Sheddable requests are held too (flow control replaces shedding at arrival), behind everything
 *   of a higher priority.
 *
 * Saturation here is the pool's (every selectable worker of the role), not per model: one queue per
 * router, as the endpoint picker keeps one per pool.
 */
import type { Cancellation, Dispatch, Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import { RouterError } from '../request/router-error.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { Worker } from '../workers/worker.js';
import { FAIRNESS_HEADER } from '../extproc/headers.js';
import { OBJECTIVE_HEADER, type ObjectiveTable } from './objectives.js';
import { FlowQueue, type QueuedRequest } from './flow-queue.js';
import { RETRY_AFTER_S } from './admission.js';

export interface FlowControlOptions {
  readonly objectives: ObjectiveTable;
  /** The decode pool in P/D mode, else the regular pool. */
  readonly pool: WorkerPool;
  /** P/D mode: the prefill pool, which inference requests need too. */
  readonly prefillPool?: WorkerPool;
  /** Whether this worker has room for one more request (load/saturation.ts `hasRoom`). */
  hasRoom(worker: Worker): boolean;
  readonly clock: () => number;
  /** How long a request may be held. */
  readonly ttlMs: number;
  /** How many requests may be held at once. */
  readonly maxQueued: number;
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
  resolve(d: Dispatch | Promise<Dispatch>): void;
  reject(err: unknown): void;
  onAbort?: () => void;
}

export class FlowControl implements Dispatcher {
  private readonly queue = new FlowQueue<Held>();
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
    if (this.queue.size === 0 && !this.saturatedFor(req)) return this.inner.dispatch(req, cancel);
    const objective = req.headers[OBJECTIVE_HEADER] ?? '';
    if (this.closed) throw closing();
    if (this.queue.size >= this.opts.maxQueued) {
      this.opts.observer?.refused?.('queue_full', objective);
      throw queueFull(this.opts.maxQueued);
    }
    return new Promise<Dispatch>((resolve, reject) => {
      const held: Held = { req, cancel, objective, resolve, reject };
      const entry: QueuedRequest<Held> = {
        item: held,
        priority: this.opts.objectives.priority(req.headers[OBJECTIVE_HEADER]),
        flow: req.headers[FAIRNESS_HEADER] ?? '',
        queuedAt: this.opts.clock(),
      };
      this.queue.push(entry);
      const signal = cancel.signal;
      if (signal.aborted) {
        this.queue.remove(entry);
        reject(cancelled());
        return;
      }
      held.onAbort = () => {
        if (this.queue.remove(entry)) reject(cancelled());
      };
      signal.addEventListener('abort', held.onAbort, { once: true });
      this.schedule();
    });
  }

  /** Lets held requests go while there is room (called on the timer; exposed for tests). */
  pump(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const now = this.opts.clock();
    for (const e of this.queue.expired(now - this.opts.ttlMs)) {
      this.forget(e.item);
      this.opts.observer?.refused?.('queue_timeout', e.item.objective);
      e.item.reject(queueTimeout(e.priority, this.opts.ttlMs));
    }
    let budget = this.roomy();
    while (this.queue.size > 0 && budget > 0 && this.roomy() > 0) {
      budget--;
      const e = this.queue.pop() as QueuedRequest<Held>;
      this.forget(e.item);
      this.opts.observer?.released?.(now - e.queuedAt);
      try {
        e.item.resolve(this.inner.dispatch(e.item.req, e.item.cancel));
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
      this.forget(e.item);
      e.item.reject(closing());
    }
  }

  private schedule(): void {
    if (this.timer !== undefined || this.queue.size === 0 || this.closed) return;
    this.timer = setTimeout(() => this.pump(), this.opts.pollMs);
    this.timer.unref();
  }

  private forget(held: Held): void {
    if (held.onAbort) held.cancel.signal.removeEventListener('abort', held.onAbort);
  }

  /**
   * Whether a pool the request needs has no selectable worker with room. A pool without selectable
   * workers is not saturated: the dispatcher answers 503.
   */
  private saturatedFor(req: RouteRequest): boolean {
    const { pool, prefillPool } = this.opts;
    if (this.room(pool) === 0) return true;
    return prefillPool !== undefined && req.inference !== undefined && this.room(prefillPool) === 0;
  }

  /** Workers with room in the pool with the fewest (P/D: prefill or decode). */
  private roomy(): number {
    const { pool, prefillPool } = this.opts;
    const room = this.room(pool);
    return prefillPool === undefined ? room : Math.min(room, this.room(prefillPool));
  }

  /** Selectable workers with room; Infinity for a pool without any (its requests get the 503). */
  private room(pool: WorkerPool): number {
    pool.reconcile();
    const workers = pool.candidates();
    if (workers.length === 0) return Infinity;
    let n = 0;
    for (const w of workers) if (this.opts.hasRoom(w)) n++;
    return n;
  }
}

function queueFull(max: number): RouterError {
  return new RouterError(
    'queue_full',
    429,
    `The router already holds ${max} requests for saturated workers (--flow-queue-max). Retry later.`,
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
