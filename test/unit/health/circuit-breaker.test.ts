import { describe, expect, it } from 'vitest';
import {
  breakerStateCode,
  CircuitBreaker,
  DEFAULT_BREAKER_OPTIONS,
  type BreakerState,
  type CircuitBreakerOptions,
} from '../../../src/health/circuit-breaker.js';

type Op = 'fail' | 'ok' | 'neutral' | 'acquire';
interface Step {
  /** Fake clock (ms). */
  at: number;
  do?: Op;
  state: BreakerState;
  allows?: boolean;
}

const OPTS: CircuitBreakerOptions = { failureThreshold: 3, successThreshold: 2, cooldownMs: 1000 };
const fails = (from: number, n: number): Step[] =>
  Array.from({ length: n }, (_, i) => ({ at: from + i, do: 'fail' as const, state: 'closed' as const }));
/** Opens the breaker at t=2 (three failures at t=0,1,2). */
const OPENED: Step[] = [...fails(0, 2), { at: 2, do: 'fail', state: 'open', allows: false }];

const cases: Array<{ name: string; opts?: Partial<CircuitBreakerOptions>; steps: Step[] }> = [
  { name: 'a fresh breaker is closed and allows', steps: [{ at: 0, state: 'closed', allows: true }] },
  {
    name: 'failures below the threshold keep it closed',
    steps: [...fails(0, 2), { at: 5, state: 'closed', allows: true }],
  },
  { name: 'the threshold-th consecutive failure opens it', steps: OPENED },
  {
    name: 'a success resets the consecutive count',
    steps: [
      ...fails(0, 2),
      { at: 2, do: 'ok', state: 'closed' },
      ...fails(3, 2),
      { at: 5, state: 'closed', allows: true },
      { at: 6, do: 'fail', state: 'open', allows: false },
    ],
  },
  {
    name: 'a neutral outcome neither resets nor counts while closed',
    steps: [...fails(0, 2), { at: 2, do: 'neutral', state: 'closed' }, { at: 3, do: 'fail', state: 'open' }],
  },
  {
    name: 'open until the cool-down has elapsed, then half-open',
    steps: [
      ...OPENED,
      { at: 1001, state: 'open', allows: false },
      { at: 1002, state: 'half_open', allows: true },
    ],
  },
  {
    name: 'outcomes while open are ignored (no early close, no cool-down restart)',
    steps: [
      ...OPENED,
      { at: 500, do: 'ok', state: 'open', allows: false },
      { at: 600, do: 'ok', state: 'open' },
      { at: 900, do: 'fail', state: 'open' },
      { at: 1002, state: 'half_open', allows: true },
    ],
  },
  {
    name: 'half-open closes after successThreshold successes',
    steps: [
      ...OPENED,
      { at: 1002, do: 'acquire', state: 'half_open', allows: false },
      { at: 1003, do: 'ok', state: 'half_open', allows: true },
      { at: 1004, do: 'acquire', state: 'half_open', allows: false },
      { at: 1005, do: 'ok', state: 'closed', allows: true },
    ],
  },
  {
    name: 'a failure in half-open reopens and restarts the cool-down',
    steps: [
      ...OPENED,
      { at: 1002, do: 'ok', state: 'half_open' },
      { at: 1500, do: 'fail', state: 'open', allows: false },
      { at: 2499, state: 'open', allows: false },
      { at: 2500, state: 'half_open', allows: true },
    ],
  },
  {
    name: 'half-open successes start over after a reopen',
    steps: [
      ...OPENED,
      { at: 1002, do: 'ok', state: 'half_open' },
      { at: 1003, do: 'fail', state: 'open' },
      { at: 2003, do: 'ok', state: 'half_open' },
      { at: 2004, do: 'ok', state: 'closed' },
    ],
  },
  {
    name: 'one probe at a time: a taken slot blocks, a neutral outcome hands it back',
    steps: [
      ...OPENED,
      { at: 1002, do: 'acquire', state: 'half_open', allows: false },
      { at: 1003, do: 'acquire', state: 'half_open', allows: false },
      { at: 1004, do: 'neutral', state: 'half_open', allows: true },
    ],
  },
  {
    name: 'a probe whose outcome never arrives expires after probeTimeoutMs',
    opts: { probeTimeoutMs: 100 },
    steps: [
      ...OPENED,
      { at: 1002, do: 'acquire', state: 'half_open', allows: false },
      { at: 1101, state: 'half_open', allows: false },
      { at: 1102, state: 'half_open', allows: true },
    ],
  },
  {
    name: 'halfOpenMaxProbes bounds concurrent probes',
    opts: { halfOpenMaxProbes: 2 },
    steps: [
      ...OPENED,
      { at: 1002, do: 'acquire', state: 'half_open', allows: true },
      { at: 1003, do: 'acquire', state: 'half_open', allows: false },
      { at: 1004, do: 'ok', state: 'half_open', allows: true },
    ],
  },
  {
    name: 'acquire while closed takes nothing',
    steps: [
      { at: 0, do: 'acquire', state: 'closed', allows: true },
      { at: 1, do: 'acquire', state: 'closed', allows: true },
    ],
  },
  {
    name: 'cool-down 0: half-open immediately after opening',
    opts: { cooldownMs: 0 },
    steps: [...fails(0, 2), { at: 2, do: 'fail', state: 'half_open', allows: true }],
  },
  {
    name: 'failureThreshold 1 opens on the first failure',
    opts: { failureThreshold: 1 },
    steps: [{ at: 0, do: 'fail', state: 'open', allows: false }],
  },
];

function apply(b: CircuitBreaker, op: Op, now: number): void {
  if (op === 'fail') b.recordFailure(now);
  else if (op === 'ok') b.recordSuccess(now);
  else if (op === 'neutral') b.recordNeutral(now);
  else b.tryAcquire(now);
}

describe('CircuitBreaker transitions', () => {
  it.each(cases)('$name', ({ opts, steps }) => {
    const b = new CircuitBreaker({ ...OPTS, ...opts });
    for (const [i, step] of steps.entries()) {
      if (step.do) apply(b, step.do, step.at);
      expect(b.state(step.at), `step ${i} state`).toBe(step.state);
      if (step.allows !== undefined) expect(b.allows(step.at), `step ${i} allows`).toBe(step.allows);
    }
  });
});

describe('CircuitBreaker details', () => {
  it('uses the config-schema defaults (5 failures, 2 successes, 30 s)', () => {
    expect(DEFAULT_BREAKER_OPTIONS).toMatchObject({
      failureThreshold: 5,
      successThreshold: 2,
      cooldownMs: 30_000,
    });
    const b = new CircuitBreaker();
    for (let i = 0; i < 4; i++) b.recordFailure(i);
    expect(b.state(4)).toBe('closed');
    b.recordFailure(4);
    expect(b.state(4)).toBe('open');
    expect(b.state(30_003)).toBe('open');
    expect(b.state(30_004)).toBe('half_open');
  });

  it('tryAcquire reports whether the request may go', () => {
    const b = new CircuitBreaker({ ...OPTS, failureThreshold: 1 });
    expect(b.tryAcquire(0)).toBe(true);
    b.recordFailure(0);
    expect(b.tryAcquire(1)).toBe(false);
    expect(b.tryAcquire(1000)).toBe(true);
    expect(b.tryAcquire(1000)).toBe(false);
  });

  it('nextChangeAt names the deadline of time-driven transitions', () => {
    const b = new CircuitBreaker({ ...OPTS, failureThreshold: 1, probeTimeoutMs: 50 });
    expect(b.nextChangeAt()).toBeUndefined();
    b.recordFailure(10);
    expect(b.nextChangeAt()).toBe(1010);
    b.tryAcquire(1020);
    expect(b.nextChangeAt()).toBe(1070);
    b.recordSuccess(1030);
    expect(b.nextChangeAt()).toBeUndefined();
  });

  it('snapshot exposes counters and the time left while open', () => {
    const b = new CircuitBreaker(OPTS);
    b.recordFailure(0);
    expect(b.snapshot(0)).toEqual({
      state: 'closed',
      consecutiveFailures: 1,
      halfOpenSuccesses: 0,
      probesInFlight: 0,
    });
    b.recordFailure(1);
    b.recordFailure(2);
    expect(b.snapshot(302)).toMatchObject({ state: 'open', retryInMs: 700 });
  });

  it.each([
    { opts: { failureThreshold: 0 } },
    { opts: { successThreshold: 1.5 } },
    { opts: { cooldownMs: -1 } },
    { opts: { halfOpenMaxProbes: 0 } },
    { opts: { probeTimeoutMs: Number.NaN } },
  ])('rejects invalid options $opts', ({ opts }) => {
    expect(() => new CircuitBreaker(opts)).toThrow(RangeError);
  });

  it.each([
    ['closed', 0],
    ['open', 1],
    ['half_open', 2],
  ] as const)('breakerStateCode(%s) = %d', (state, code) => {
    expect(breakerStateCode(state)).toBe(code);
  });
});

describe('CircuitBreaker.probeNow (re-admission)', () => {
  it('turns an open breaker half-open at once and leaves other states alone', () => {
    const b = new CircuitBreaker({ failureThreshold: 1, successThreshold: 1, cooldownMs: 30_000 });
    b.probeNow(0);
    expect(b.state(0)).toBe('closed');
    b.recordFailure(10);
    expect(b.state(11)).toBe('open');
    b.probeNow(12);
    expect(b.state(12)).toBe('half_open');
    expect(b.tryAcquire(12)).toBe(true);
    expect(b.allows(13)).toBe(false); // one probe at a time
    b.recordFailure(14);
    expect(b.snapshot(14)).toMatchObject({ state: 'open', retryInMs: 30_000 });
    b.probeNow(15);
    b.tryAcquire(15);
    b.recordSuccess(16);
    expect(b.state(16)).toBe('closed');
  });
});
