/**
 * Health state of every Worker, combining two signals into the one field selection reads:
 *
 *   worker.healthy = active === 'healthy' && !asleep && !cordoned && breaker.allows(now)
 *
 * - Active checks (health-checker.ts, `GET /health`): a worker turns unhealthy after
 *   `checkFailureThreshold` consecutive failed checks (config `health-failure-threshold`, 3) and
 *   healthy again after `checkSuccessThreshold` consecutive passed checks (`health-success-threshold`,
 *   2). One failed check never flips a worker, and one lucky check never brings it back.
 * - Passive outcomes of real requests feed a CircuitBreaker (circuit-breaker.ts; thresholds there).
 *   The outcome of a request is a projection of how it ended (request/request-end.ts, one table for
 *   every way a request can end). Failures: 5xx response headers (`server_error`; Envoy turns an
 *   upstream connect failure or a reset before headers into its own 503 local reply, which ext_proc
 *   sees as response headers) and a failed prefill leg (`prefill_failed`). Successes: any response
 *   below 500 (a 4xx is the client's fault, not the worker's), counted at its headers
 *   (health-dispatcher.ts), not at the end of its stream. Neutral: `cancelled` (only hands back a
 *   half-open probe slot) and `no_response`, a routed stream that ended without response headers: a
 *   client that went away before the first byte or an ext_proc message timeout, which says nothing
 *   about the worker (see FAILURES below for why it is not counted).
 *
 * Re-admission: a passed active check while the breaker is open turns it half-open at once
 * (CircuitBreaker.probeNow): a restarted worker is back in selection within one or two check intervals
 * (one when only the breaker kept it out, `checkSuccessThreshold` when the checks had failed too),
 * instead of after the cool-down; a failed probe request opens the breaker again.
 *
 * Sleep mode: vLLM's `POST /sleep` offloads or discards the weights and empties the KV cache while
 * the process keeps answering /health and /metrics (with an idle queue: it would look like the best
 * worker). A scraped page that says so (`recordSleep`, load/metrics-parse.ts `asleep`) takes the worker
 * out of selection until a page says it is awake again; it is a state the worker reports exactly, so
 * no threshold applies, and it is neither a failed check nor a breaker event. Both changes start the
 * breaker over: requests that reached the worker between its sleep and the page saying so failed
 * because of the sleep (vLLM's 503, or worse), and kept the woken worker out for a whole cool-down
 * (bench/sleep-mode.bench.ts: four sleeps in a row left no worker selectable). A sleep recorded when
 * sent that the worker refused (`sleepRefused`) gives back the breaker it had: it never slept.
 *
 * Pause: vLLM's `POST /pause` (RL weight updates) forwarded by this router, or read from the
 * worker's own `/is_paused` (`recordPause`; routing/fleet-control.ts, health/pause-poller.ts). A paused engine keeps the requests it gets until `POST /resume`, so it
 * stays healthy: `worker.paused` only makes its pool prefer the workers that are not paused
 * (WorkerPool.candidatesFor); while every candidate is paused, requests still go to them and wait
 * there, as they would sent directly. A new generation starts unpaused (a restarted engine is not).
 *
 * Cordon: an operator's "no new requests" (admin `POST /workers/cordon`, and `POST /workers/sleep`
 * while it drains the worker before putting it to sleep: admin/worker-sleep.ts). Requests already
 * there finish; only `cordon(worker, false)` ends it (a new generation starts uncordoned).
 *
 * Metric scrapes (load/metrics-scraper.ts) are a second active signal, counted on their own with the
 * same thresholds (`recordCheck(..., 'metrics')`): a failed scrape is one failed check of that source,
 * never also one of the /health checks, so one outage is not counted twice; the worker is active-healthy
 * while both sources are. A passed scrape only restores the scrape source (it says the process answers,
 * not that /health passes or that requests succeed).
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
import type { HealthOutcome } from '../request/request-end.js';

export type { HealthOutcome } from '../request/request-end.js';

/**
 * `no_response` is deliberately NOT a failure. Envoy (checked with 1.40, test/e2e/health-wiring.test.ts)
 * passes its own local replies for upstream trouble - connect failure, reset before headers - through
 * ext_proc as 503 response headers, so those arrive as `server_error`. A stream that ends before any
 * response headers is a client that went away or an ext_proc message timeout: counting those against the
 * worker opened breakers on healthy workers under client churn (seen in the chaos soak, where a whole
 * role was locked out for 40 s).
 */
const FAILURES: ReadonlySet<HealthOutcome> = new Set(['server_error', 'prefill_failed']);

export function isFailureOutcome(outcome: HealthOutcome): boolean {
  return FAILURES.has(outcome);
}

export type ActiveHealth = 'healthy' | 'unhealthy';

/** Which active signal a check result comes from: `GET /health`, or a `/metrics` scrape. */
export type CheckSource = 'health' | 'metrics';

export interface WorkerHealthView {
  readonly active: ActiveHealth;
  readonly breaker: BreakerState;
  /** vLLM's sleep mode, as the worker's last scraped page (or the admin sleep call) said. */
  readonly asleep: boolean;
  /** Held out of selection by the admin API. */
  readonly cordoned: boolean;
  /** vLLM's generation paused (forwarded `POST /pause`, or `/is_paused`): selectable, not preferred. */
  readonly paused: boolean;
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
  breaker: CircuitBreaker;
  view: WorkerHealthView;
  asleep: boolean;
  /** While asleep: the breaker the worker had before (sleepRefused gives it back). */
  awakeBreaker: CircuitBreaker | undefined;
  cordoned: boolean;
  paused: boolean;
  /** The metric-scrape source, counted like the checks but apart from them. */
  readonly scrape: { active: ActiveHealth; failures: number; successes: number };
}

const FRESH_VIEW: WorkerHealthView = Object.freeze({
  active: 'healthy',
  breaker: 'closed',
  asleep: false,
  cordoned: false,
  paused: false,
  selectable: true,
});

export class WorkerHealth {
  private readonly states = new WeakMap<Worker, State>();
  /** Workers whose breaker changes by itself at some deadline; `earliest` is the smallest one. */
  private readonly pending = new Set<Worker>();
  /**
   * Workers that left their pool (`forget`): a record that comes after (the outcome of a request
   * that ended after its worker left) creates no state, deadline or change for them.
   */
  private readonly forgotten = new WeakSet<Worker>();
  private earliest = Infinity;
  private readonly checkFailureThreshold: number;
  private readonly checkSuccessThreshold: number;

  constructor(private readonly opts: WorkerHealthOptions = {}) {
    this.checkFailureThreshold = positiveInt(opts.checkFailureThreshold ?? 3, 'checkFailureThreshold');
    this.checkSuccessThreshold = positiveInt(opts.checkSuccessThreshold ?? 2, 'checkSuccessThreshold');
    // Validate breaker options once, up front, rather than at the first worker.
    new CircuitBreaker(opts.breaker);
  }

  /** One active check result (`source` 'metrics': a metric scrape, counted apart from /health). */
  recordCheck(worker: Worker, ok: boolean, now: number, source: CheckSource = 'health'): void {
    const s = this.state(worker);
    if (source === 'metrics') {
      const c = s.scrape;
      if (ok) {
        c.failures = 0;
        c.successes += 1;
        if (c.active === 'unhealthy' && c.successes >= this.checkSuccessThreshold) c.active = 'healthy';
      } else {
        c.successes = 0;
        c.failures += 1;
        if (c.active === 'healthy' && c.failures >= this.checkFailureThreshold) c.active = 'unhealthy';
      }
      this.sync(worker, s, now);
      return;
    }
    if (ok) {
      s.checkFailures = 0;
      s.checkSuccesses += 1;
      if (s.active === 'unhealthy' && s.checkSuccesses >= this.checkSuccessThreshold) s.active = 'healthy';
      s.breaker.probeNow(now);
    } else {
      s.checkSuccesses = 0;
      s.checkFailures += 1;
      if (s.active === 'healthy' && s.checkFailures >= this.checkFailureThreshold) s.active = 'unhealthy';
    }
    this.sync(worker, s, now);
  }

  /** What the worker's latest scraped page says of sleep mode (a page without the gauge: awake). */
  recordSleep(worker: Worker, asleep: boolean, now: number): void {
    const s = asleep ? this.state(worker) : this.states.get(worker);
    if (s === undefined || s.asleep === asleep) return; // never seen and awake: nothing to change
    s.asleep = asleep;
    // The requests that failed around the change (a 503 from a sleeping engine, or one that reached
    // it before the page said so) are explained by the sleep: the breaker starts over, so a woken
    // worker is not kept out for a cool-down it did not earn. The one it had is kept for sleepRefused.
    s.awakeBreaker = asleep ? s.breaker : undefined;
    s.breaker = new CircuitBreaker(this.opts.breaker);
    this.sync(worker, s, now);
  }

  /**
   * A sleep recorded before the worker answered it (routing/fleet-control.ts) that the worker did not
   * take: it is awake as it was, with the breaker it had. Starting that over would let a worker whose
   * breaker was open back in, and the client requests that reach it fail until it opens again.
   */
  sleepRefused(worker: Worker, now: number): void {
    const s = this.states.get(worker);
    if (s === undefined || !s.asleep) return;
    s.asleep = false;
    s.breaker = s.awakeBreaker ?? new CircuitBreaker(this.opts.breaker);
    s.awakeBreaker = undefined;
    this.sync(worker, s, now);
  }

  /** vLLM's generation paused (`POST /pause`) or resumed on the worker (see the header). */
  recordPause(worker: Worker, paused: boolean, now: number): void {
    const s = paused ? this.state(worker) : this.states.get(worker);
    if (s === undefined || s.paused === paused) return;
    s.paused = paused;
    this.sync(worker, s, now);
  }

  /** Holds the worker out of selection (`on`) or lets it back (see the header). */
  cordon(worker: Worker, on: boolean, now: number): void {
    const s = on ? this.state(worker) : this.states.get(worker);
    if (s === undefined || s.cordoned === on) return;
    s.cordoned = on;
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
    this.forgotten.add(worker);
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
        asleep: false,
        awakeBreaker: undefined,
        cordoned: false,
        paused: false,
        scrape: { active: 'healthy', failures: 0, successes: 0 },
      };
      if (!this.forgotten.has(worker)) this.states.set(worker, s);
    }
    return s;
  }

  /** Recomputes the view, writes worker.healthy, tracks the next deadline, reports a change. */
  private sync(worker: Worker, s: State, now: number): void {
    if (this.forgotten.has(worker)) return;
    const breaker = s.breaker.state(now);
    const active: ActiveHealth =
      s.active === 'healthy' && s.scrape.active === 'healthy' ? 'healthy' : 'unhealthy';
    const { asleep, cordoned, paused } = s;
    const selectable = active === 'healthy' && !asleep && !cordoned && s.breaker.allows(now);
    worker.healthy = selectable;
    worker.asleep = asleep;
    worker.cordoned = cordoned;
    worker.paused = paused;

    const next = s.breaker.nextChangeAt();
    if (next === undefined) this.pending.delete(worker);
    else {
      this.pending.add(worker);
      if (next < this.earliest) this.earliest = next;
    }

    const prev = s.view;
    if (
      prev.active === active &&
      prev.breaker === breaker &&
      prev.asleep === asleep &&
      prev.cordoned === cordoned &&
      prev.paused === paused &&
      prev.selectable === selectable
    )
      return;
    s.view = Object.freeze({ active, breaker, asleep, cordoned, paused, selectable });
    this.opts.onChange?.(worker, s.view, prev);
  }
}

function positiveInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be an integer >= 1, got ${n}`);
  return n;
}
