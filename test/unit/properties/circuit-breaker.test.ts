/**
 * Properties of the circuit breaker over arbitrary operation sequences on a fake clock.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { CircuitBreaker, type CircuitBreakerOptions } from '../../../src/health/circuit-breaker.js';

type Op = 'fail' | 'ok' | 'neutral' | 'acquire' | 'query';
interface Step {
  /** Time advance before the step (ms). */
  dt: number;
  op: Op;
}

const optionsArb: fc.Arbitrary<CircuitBreakerOptions> = fc.record({
  failureThreshold: fc.integer({ min: 1, max: 6 }),
  successThreshold: fc.integer({ min: 1, max: 4 }),
  cooldownMs: fc.integer({ min: 0, max: 500 }),
  halfOpenMaxProbes: fc.integer({ min: 1, max: 3 }),
  probeTimeoutMs: fc.integer({ min: 0, max: 500 }),
});
const stepsArb = fc.array(
  fc.record({
    dt: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 1000 })),
    op: fc.constantFrom<Op>('fail', 'fail', 'fail', 'ok', 'neutral', 'acquire', 'query'),
  }),
  { maxLength: 200 },
);

function apply(b: CircuitBreaker, op: Op, now: number): void {
  if (op === 'fail') b.recordFailure(now);
  else if (op === 'ok') b.recordSuccess(now);
  else if (op === 'neutral') b.recordNeutral(now);
  else if (op === 'acquire') b.tryAcquire(now);
  else b.state(now);
}

describe('CircuitBreaker properties', () => {
  it('never allows while open before the cool-down has elapsed since opening', () => {
    fc.assert(
      fc.property(optionsArb, stepsArb, (opts, steps: Step[]) => {
        const b = new CircuitBreaker(opts);
        let now = 0;
        let openedAt: number | undefined;
        for (const { dt, op } of steps) {
          now += dt;
          const before = b.state(now);
          apply(b, op, now);
          const after = b.state(now);
          if (after === 'open' && before !== 'open') openedAt = now;
          if (after !== 'open') openedAt = undefined;
          if (openedAt !== undefined && now < openedAt + opts.cooldownMs) {
            expect(after).toBe('open');
            expect(b.allows(now)).toBe(false);
            expect(b.tryAcquire(now)).toBe(false);
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it('any sequence leaves a valid, self-consistent state', () => {
    fc.assert(
      fc.property(optionsArb, stepsArb, (opts, steps: Step[]) => {
        const b = new CircuitBreaker(opts);
        let now = 0;
        for (const { dt, op } of steps) {
          now += dt;
          apply(b, op, now);
          const s = b.snapshot(now);
          expect(['closed', 'open', 'half_open']).toContain(s.state);
          expect(s.probesInFlight).toBeGreaterThanOrEqual(0);
          expect(s.probesInFlight).toBeLessThanOrEqual(opts.halfOpenMaxProbes!);
          expect(s.halfOpenSuccesses).toBeLessThan(opts.successThreshold);
          if (s.state !== 'half_open') expect(s.probesInFlight).toBe(0);
          if (s.state === 'closed') {
            expect(s.consecutiveFailures).toBeLessThan(opts.failureThreshold);
            expect(b.allows(now)).toBe(true);
          }
          if (s.state === 'open') {
            expect(b.allows(now)).toBe(false);
            expect(s.retryInMs).toBeGreaterThan(0);
            expect(s.retryInMs).toBeLessThanOrEqual(opts.cooldownMs);
          }
          if (s.state === 'half_open') expect(b.allows(now)).toBe(s.probesInFlight < opts.halfOpenMaxProbes!);
          const next = b.nextChangeAt();
          if (next !== undefined) expect(next).toBeGreaterThan(now);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('from any state, failureThreshold failures in a row while allowed leave it open', () => {
    fc.assert(
      fc.property(optionsArb, stepsArb, (opts, steps: Step[]) => {
        const b = new CircuitBreaker(opts);
        let now = 0;
        for (const { dt, op } of steps) apply(b, op, (now += dt));
        // Wait out any cool-down, then fail as many times as the threshold.
        now += opts.cooldownMs + opts.probeTimeoutMs!;
        for (let i = 0; i < opts.failureThreshold; i++) b.recordFailure(now);
        expect(b.state(now)).toBe(opts.cooldownMs === 0 ? 'half_open' : 'open');
      }),
      { numRuns: 200 },
    );
  });
});
