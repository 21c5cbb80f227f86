/**
 * Health state of every Worker, combining two signals into the one field selection reads:
 *
 *   worker.healthy = active === 'healthy' && breaker.allows(now)
 *
 * - Active checks (health-checker.ts, `GET /health`): a worker turns unhealthy after
 *   `checkFailureThreshold` consecutive failed checks (config `health-failure-threshold`, 3) and
 *   healthy again after `checkSuccessThreshold` consecutive passed checks (`health-success-threshold`,
 *   2). One failed check never flips a worker, and one lucky check never brings it back.
 * - Passive outcomes of real requests feed a CircuitBreaker (circuit-breaker.ts; thresholds there).
 *   Failures: 5xx response headers (`server_error`), a reset before response headers (`reset`), a
 *   routed stream that ended without response headers (`no_response`: how Envoy's local reply to an
 *   upstream connect failure looks to ext_proc, which never sees that reply), an explicit connect
 *   failure (`connect_failed`), a failed prefill leg (`prefill_failed`). Successes: any response
 *   below 500 (a 4xx is the client's fault, not the worker's). `cancelled` is neutral: it only hands
 *   back a half-open probe slot. CAVEAT: a client that aborts before the response headers also ends
 *   the stream without response headers; the router cannot tell that from a connect failure, so it
 *   counts as `no_response`. It takes `failureThreshold` (5) of them in a row, with no success in
 *   between, to open the breaker.
 *
 * Selection stays synchronous and O(1) per worker: policies read the plain `worker.healthy` field
 * (WorkerPool.candidates()). This module rewrites that field whenever state changes: on a check
 * result, on an outcome, on `routed()` (a half-open probe slot taken), and on `refresh(now)` when
 * time alone changes it (open -> half_open after the cool-down, an expired probe). refresh() costs
 * one comparison unless such a deadline has passed, so it can run before every selection.
 * If refresh is late, the field is stale only in the safe direction (a worker stays out longer).
 *
 * State lives in a WeakMap keyed by the Worker object: a new registration generation is a new Worker
 * and starts fresh (healthy, breaker closed); a heartbeat keeps the Worker and so keeps its state; a
 * late result for a replaced Worker only touches that old object.
 *
 * No timers, metrics or logging: `onChange` lets the composition root log transitions.
 */
import type { Worker } from '../workers/worker.js';
import { CircuitBreaker, type BreakerState, type CircuitBreakerOptions } from './circuit-breaker.js';

export type HealthOutcome =
  'success' | 'server_error' | 'reset' | 'no_response' | 'connect_failed' | 'prefill_failed' | 'cancelled';

/**
 * `no_response` is deliberately NOT a failure. Envoy (checked with 1.40, test/e2e/health-wiring.test.ts)
 * passes its own local replies for upstream trouble - connect failure, reset before headers - through
 * ext_proc as 503 response headers, so those arrive as `server_error`. A stream that ends before any
 * response headers is a client that went away or an ext_proc message timeout: counting those against the
 * worker opened breakers on healthy workers under client churn (seen in the chaos soak, where a whole
 * role was locked out for 40 s).
 */
const FAILURES: ReadonlySet<HealthOutcome> = new Set([
  'server_error',
  'reset',
  'connect_failed',
  'prefill_failed',
]);

export function isFailureOutcome(outcome: HealthOutcome): boolean {
  return FAILURES.has(outcome);
}

/** The shape of extproc/dispatch.ts `RequestEnd` this module needs (structural, no import). */
export type SessionEnd =
  | { readonly kind: 'response'; readonly status: number }
  | { readonly kind: 'cancelled'; readonly afterHeaders: boolean; readonly status?: number }
  | { readonly kind: 'rejected' };

/**
 * The health outcome of a routed request from how its ext_proc session ended:
 *   response end, status >= 500                -> server_error
 *   response end, status < 500                 -> success
 *   ended after response headers, status >= 500 -> server_error
 *   ended after response headers otherwise     -> cancelled (client abort or mid-stream reset: neutral)
 *   ended before response headers              -> no_response (client abort, message timeout: neutral)
 *   router answered itself (rejected)          -> cancelled (says nothing about this worker)
 */
export function outcomeOfEnd(end: SessionEnd): HealthOutcome {
  switch (end.kind) {
    case 'response':
      return end.status >= 500 ? 'server_error' : 'success';
    case 'cancelled':
      if (!end.afterHeaders) return 'no_response';
      return end.status !== undefined && end.status >= 500 ? 'server_error' : 'cancelled';
    case 'rejected':
      return 'cancelled';
  }
}

export type ActiveHealth = 'healthy' | 'unhealthy';

export interface WorkerHealthView {
  readonly active: ActiveHealth;
  readonly breaker: BreakerState;
  /** What `worker.healthy` is set to. */
  readonly selectable: boolean;
}

export interface WorkerHealthDetails extends WorkerHealthView {
  readonly consecutiveCheckFailures: number;
  readonly consecutiveCheckSuccesses: number;
  readonly breakerFailures: number;
  readonly probesInFlight: number;
  /** Open breaker: milliseconds until half-open. */
  readonly retryInMs?: number;
}

export interface WorkerHealthOptions {
  /** Consecutive failed checks before unhealthy (config health-failure-threshold, default 3). */
  readonly checkFailureThreshold?: number;
  /** Consecutive passed checks before healthy again (config health-success-threshold, default 2). */
  readonly checkSuccessThreshold?: number;
  readonly breaker?: Partial<CircuitBreakerOptions>;
  /** A worker's view changed (for logs). Called synchronously, after `worker.healthy` is updated. */
  readonly onChange?: (worker: Worker, view: WorkerHealthView, previous: WorkerHealthView) => void;
}

interface State {
  active: ActiveHealth;
  checkFailures: number;
  checkSuccesses: number;
  readonly breaker: CircuitBreaker;
  view: WorkerHealthView;
}

const FRESH_VIEW: WorkerHealthView = Object.freeze({
  active: 'healthy',
  breaker: 'closed',
  selectable: true,
});

export class WorkerHealth {
  private readonly states = new WeakMap<Worker, State>();
  /** Workers whose breaker changes by itself at some deadline; `earliest` is the smallest one. */
  private readonly pending = new Set<Worker>();
  private earliest = Infinity;
  private readonly checkFailureThreshold: number;
  private readonly checkSuccessThreshold: number;

  constructor(private readonly opts: WorkerHealthOptions = {}) {
    this.checkFailureThreshold = positiveInt(opts.checkFailureThreshold ?? 3, 'checkFailureThreshold');
    this.checkSuccessThreshold = positiveInt(opts.checkSuccessThreshold ?? 2, 'checkSuccessThreshold');
    // Validate breaker options once, up front, rather than at the first worker.
    new CircuitBreaker(opts.breaker);
  }

  /** One active check result. */
  recordCheck(worker: Worker, ok: boolean, now: number): void {
    const s = this.state(worker);
    if (ok) {
      s.checkFailures = 0;
      s.checkSuccesses += 1;
      if (s.active === 'unhealthy' && s.checkSuccesses >= this.checkSuccessThreshold) s.active = 'healthy';
    } else {
      s.checkSuccesses = 0;
      s.checkFailures += 1;
      if (s.active === 'healthy' && s.checkFailures >= this.checkFailureThreshold) s.active = 'unhealthy';
    }
    this.sync(worker, s, now);
  }

  /** One passive outcome of a request routed to `worker`. Call exactly once per routed request. */
  recordOutcome(worker: Worker, outcome: HealthOutcome, now: number): void {
    const s = this.state(worker);
    if (outcome === 'success') s.breaker.recordSuccess(now);
    else if (isFailureOutcome(outcome)) s.breaker.recordFailure(now);
    else s.breaker.recordNeutral(now);
    this.sync(worker, s, now);
  }

  /**
   * The worker was just selected (same synchronous step as the selection): in half-open this takes a
   * probe slot, and the worker leaves selection once the slots are taken.
   */
  routed(worker: Worker, now: number): void {
    const s = this.states.get(worker);
    if (!s) return; // never seen: breaker closed, nothing to take
    s.breaker.tryAcquire(now);
    this.sync(worker, s, now);
  }

  /** Re-evaluates workers whose state changes with time alone. O(1) unless a deadline has passed. */
  refresh(now: number): void {
    if (now < this.earliest) return;
    this.earliest = Infinity;
    for (const worker of this.pending) {
      const s = this.states.get(worker);
      if (s) this.sync(worker, s, now);
      else this.pending.delete(worker);
    }
  }

  view(worker: Worker, now: number): WorkerHealthView {
    const s = this.states.get(worker);
    if (!s) return FRESH_VIEW;
    this.sync(worker, s, now);
    return s.view;
  }

  details(worker: Worker, now: number): WorkerHealthDetails {
    const view = this.view(worker, now);
    const s = this.states.get(worker);
    if (!s) {
      return {
        ...view,
        consecutiveCheckFailures: 0,
        consecutiveCheckSuccesses: 0,
        breakerFailures: 0,
        probesInFlight: 0,
      };
    }
    const b = s.breaker.snapshot(now);
    return {
      ...view,
      consecutiveCheckFailures: s.checkFailures,
      consecutiveCheckSuccesses: s.checkSuccesses,
      breakerFailures: b.consecutiveFailures,
      probesInFlight: b.probesInFlight,
      ...(b.retryInMs !== undefined ? { retryInMs: b.retryInMs } : {}),
    };
  }

  /** Drops a worker that left its pool (optional: the WeakMap and deadlines free it anyway). */
  forget(worker: Worker): void {
    this.pending.delete(worker);
    this.states.delete(worker);
  }

  private state(worker: Worker): State {
    let s = this.states.get(worker);
    if (!s) {
      s = {
        active: 'healthy',
        checkFailures: 0,
        checkSuccesses: 0,
        breaker: new CircuitBreaker(this.opts.breaker),
        view: FRESH_VIEW,
      };
      this.states.set(worker, s);
    }
    return s;
  }

  /** Recomputes the view, writes worker.healthy, tracks the next deadline, reports a change. */
  private sync(worker: Worker, s: State, now: number): void {
    const breaker = s.breaker.state(now);
    const selectable = s.active === 'healthy' && s.breaker.allows(now);
    worker.healthy = selectable;

    const next = s.breaker.nextChangeAt();
    if (next === undefined) this.pending.delete(worker);
    else {
      this.pending.add(worker);
      if (next < this.earliest) this.earliest = next;
    }

    const prev = s.view;
    if (prev.active === s.active && prev.breaker === breaker && prev.selectable === selectable) return;
    s.view = Object.freeze({ active: s.active, breaker, selectable });
    this.opts.onChange?.(worker, s.view, prev);
  }
}

function positiveInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be an integer >= 1, got ${n}`);
  return n;
}
