/**
 * A per-worker circuit breaker: a pure state machine over passive request outcomes, time passed in.
 *
 *   closed    --failureThreshold consecutive failures-->  open
 *   open      --cooldownMs elapsed since opening------->  half_open      (lazily, on the next call)
 *   half_open --successThreshold successes------------>  closed
 *   half_open --any failure--------------------------->  open           (cool-down restarts)
 *   open      --probeNow() (an active check passed)------>  half_open      (re-admission, no wait)
 *
 * Thresholds (config `cb-failure-threshold` 5, `cb-success-threshold` 2, `cb-cooldown-ms` 30000):
 * - `failureThreshold`: consecutive failures (a success in between resets the count) that open it.
 *   Counting consecutive failures rather than a rate keeps one slow, mostly-fine worker in service.
 * - `successThreshold`: successes seen in half-open that close it again.
 * - `cooldownMs`: how long an open breaker refuses traffic before letting probes through.
 * - `halfOpenMaxProbes` (default 1): requests awaiting their outcome at once while half-open (the
 *   passive health records it at the response headers: health-dispatcher.ts), so a recovering
 *   worker sees a trickle, not the whole fleet's traffic.
 * - `probeTimeoutMs` (default `cooldownMs`): a probe whose outcome never arrives (a lost release)
 *   stops counting after this long, so one leak cannot pin a worker out of service forever.
 *
 * Outcomes while open are ignored: they belong to requests admitted before the breaker opened, and
 * letting them restart the cool-down would let stale traffic keep a worker out. In half-open, any
 * outcome counts as evidence (a success of a request admitted while closed is still a success) and
 * returns one probe slot; `recordNeutral` returns a slot without counting (a client cancellation).
 *
 * Re-admission: a worker killed and restarted answers its health check again long before a 30 s
 * cool-down ends. `probeNow(now)` (called by worker-health.ts when an active check passes while the
 * breaker is open) skips the rest of the cool-down: the breaker turns half-open, so the next request
 * is a probe; `successThreshold` successes close it, one failure opens it again with a fresh
 * cool-down. A worker whose /health passes while its requests fail thus gets one probe request per
 * health-check interval instead of one per cool-down.
 *
 * Callers that select a half-open worker call `tryAcquire(now)` in the same synchronous step, which
 * takes a probe slot; `allows(now)` is the side-effect-free question "may it be selected now?".
 * `nextChangeAt()` tells a caller when the breaker will change by itself (open -> half_open, or a
 * probe slot expiring), so it can re-evaluate selectability only then.
 *
 * Pure: no timers, metrics or logging.
 */

export type BreakerState = 'closed' | 'open' | 'half_open';

export interface CircuitBreakerOptions {
  readonly failureThreshold: number;
  readonly successThreshold: number;
  readonly cooldownMs: number;
  readonly halfOpenMaxProbes?: number;
  readonly probeTimeoutMs?: number;
}

/** Defaults of config-schema.ts (`cb-failure-threshold`, `cb-success-threshold`, `cb-cooldown-ms`). */
export const DEFAULT_BREAKER_OPTIONS: Readonly<Required<CircuitBreakerOptions>> = Object.freeze({
  failureThreshold: 5,
  successThreshold: 2,
  cooldownMs: 30_000,
  halfOpenMaxProbes: 1,
  probeTimeoutMs: 30_000,
});

/** Gauge encoding of `vllm_router_cb_state`: 0 closed, 1 open, 2 half-open. */
export function breakerStateCode(state: BreakerState): 0 | 1 | 2 {
  return state === 'closed' ? 0 : state === 'open' ? 1 : 2;
}

export class CircuitBreaker {
  private readonly failureThreshold: number;
  private readonly successThreshold: number;
  private readonly cooldownMs: number;
  private readonly maxProbes: number;
  private readonly probeTimeoutMs: number;

  private current: BreakerState = 'closed';
  private consecutiveFailures = 0;
  private halfOpenSuccesses = 0;
  private openedAt = 0;
  /** Start times of probes in flight (half-open only), oldest first. */
  private probes: number[] = [];

  constructor(opts: Partial<CircuitBreakerOptions> = {}) {
    this.failureThreshold = positiveInt(
      opts.failureThreshold ?? DEFAULT_BREAKER_OPTIONS.failureThreshold,
      'failureThreshold',
    );
    this.successThreshold = positiveInt(
      opts.successThreshold ?? DEFAULT_BREAKER_OPTIONS.successThreshold,
      'successThreshold',
    );
    this.cooldownMs = nonNegative(opts.cooldownMs ?? DEFAULT_BREAKER_OPTIONS.cooldownMs, 'cooldownMs');
    this.maxProbes = positiveInt(
      opts.halfOpenMaxProbes ?? DEFAULT_BREAKER_OPTIONS.halfOpenMaxProbes,
      'halfOpenMaxProbes',
    );
    this.probeTimeoutMs = nonNegative(opts.probeTimeoutMs ?? this.cooldownMs, 'probeTimeoutMs');
  }

  state(now: number): BreakerState {
    this.advance(now);
    return this.current;
  }

  /** May a request be sent now? Closed: yes; open: no; half-open: while probe slots are free. */
  allows(now: number): boolean {
    this.advance(now);
    if (this.current === 'closed') return true;
    if (this.current === 'open') return false;
    return this.probes.length < this.maxProbes;
  }

  /** allows(now), and in half-open also takes a probe slot. Call when the worker is selected. */
  tryAcquire(now: number): boolean {
    if (!this.allows(now)) return false;
    if (this.current === 'half_open') this.probes.push(now);
    return true;
  }

  recordSuccess(now: number): void {
    this.advance(now);
    switch (this.current) {
      case 'closed':
        this.consecutiveFailures = 0;
        return;
      case 'open':
        return;
      case 'half_open':
        this.probes.shift();
        if (++this.halfOpenSuccesses >= this.successThreshold) this.close();
        return;
    }
  }

  recordFailure(now: number): void {
    this.advance(now);
    switch (this.current) {
      case 'closed':
        if (++this.consecutiveFailures >= this.failureThreshold) this.open(now);
        return;
      case 'open':
        return;
      case 'half_open':
        this.open(now);
        return;
    }
  }

  /** Open -> half-open now (re-admission after a passed active check); otherwise nothing. */
  probeNow(now: number): void {
    this.advance(now);
    if (this.current !== 'open') return;
    this.current = 'half_open';
    this.halfOpenSuccesses = 0;
    this.probes = [];
  }

  /** An outcome that says nothing about the worker (e.g. client cancelled): frees a probe slot. */
  recordNeutral(now: number): void {
    this.advance(now);
    if (this.current === 'half_open') this.probes.shift();
  }

  /** When the breaker next changes by itself (undefined: not until an outcome arrives). */
  nextChangeAt(): number | undefined {
    if (this.current === 'open') return this.openedAt + this.cooldownMs;
    if (this.current === 'half_open' && this.probes.length > 0) return this.probes[0]! + this.probeTimeoutMs;
    return undefined;
  }

  /** Counters for /workers and tests. */
  snapshot(now: number): {
    state: BreakerState;
    consecutiveFailures: number;
    halfOpenSuccesses: number;
    probesInFlight: number;
    /** Milliseconds until an open breaker turns half-open. */
    retryInMs?: number;
  } {
    this.advance(now);
    return {
      state: this.current,
      consecutiveFailures: this.consecutiveFailures,
      halfOpenSuccesses: this.halfOpenSuccesses,
      probesInFlight: this.probes.length,
      ...(this.current === 'open' ? { retryInMs: Math.max(0, this.openedAt + this.cooldownMs - now) } : {}),
    };
  }

  private advance(now: number): void {
    if (this.current === 'open' && now >= this.openedAt + this.cooldownMs) {
      this.current = 'half_open';
      this.halfOpenSuccesses = 0;
      this.probes = [];
    }
    if (this.current === 'half_open') {
      while (this.probes.length > 0 && now >= this.probes[0]! + this.probeTimeoutMs) this.probes.shift();
    }
  }

  private open(now: number): void {
    this.current = 'open';
    this.openedAt = now;
    this.consecutiveFailures = 0;
    this.halfOpenSuccesses = 0;
    this.probes = [];
  }

  private close(): void {
    this.current = 'closed';
    this.consecutiveFailures = 0;
    this.halfOpenSuccesses = 0;
    this.probes = [];
  }
}

function positiveInt(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`${name} must be an integer >= 1, got ${n}`);
  return n;
}

function nonNegative(n: number, name: string): number {
  if (!Number.isFinite(n) || n < 0) throw new RangeError(`${name} must be a finite number >= 0, got ${n}`);
  return n;
}
