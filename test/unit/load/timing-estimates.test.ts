import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TIMING_PRIORS,
  MIN_PREFILL_FRACTION,
  PACE_DEADBAND,
  TimingEstimates,
} from '../../../src/load/timing-estimates.js';
import { makeWorkers } from '../routing/fixtures.js';
import { Worker } from '../../../src/workers/worker.js';

/** A worker whose true TTFT is floor + p * U + q * A, observed over varied requests. */
function observe(est: TimingEstimates, truth: { floor: number; p: number; q: number }, n: number) {
  const [w] = makeWorkers(1);
  for (let i = 0; i < n; i++) {
    const prefillTokens = [16, 2048, 300, 5000, 64][i % 5]!;
    const ahead = [0, 3, 8, 1, 12][(i * 3) % 5]!;
    est.recordTtft(w!, truth.floor + truth.p * prefillTokens + truth.q * ahead, { prefillTokens, ahead }, i);
  }
  return w!;
}

describe('TimingEstimates', () => {
  it('starts from the priors', () => {
    const est = new TimingEstimates();
    const [w] = makeWorkers(1);
    expect(est.of(w!)).toEqual({
      ...DEFAULT_TIMING_PRIORS,
      pace: 1,
      ttftSamples: 0,
      chunkSamples: 0,
      wholeSamples: 0,
    });
    expect(est.predictTtftMs(w!, { prefillTokens: 1000, ahead: 2 })).toBeCloseTo(10 + 50 + 40);
  });

  it.each([
    { name: 'a faster GPU than the priors', truth: { floor: 4, p: 0.02, q: 30 } },
    { name: 'a slower GPU with long queues', truth: { floor: 25, p: 0.2, q: 60 } },
  ])('learns the TTFT model of $name', ({ truth }) => {
    const est = new TimingEstimates();
    const w = observe(est, truth, 300);
    const e = est.of(w);
    expect(e.ttftFloorMs).toBeCloseTo(truth.floor, 0);
    expect(e.prefillMsPerToken).toBeCloseTo(truth.p, 2);
    expect(e.waitMsPerRequest).toBeCloseTo(truth.q, 0);
    expect(e.ttftSamples).toBe(300);
  });

  it('keeps the priors in directions the data never excites (same prompt size, never a queue)', () => {
    const est = new TimingEstimates();
    const [w] = makeWorkers(1);
    for (let i = 0; i < 500; i++) est.recordTtft(w!, 15, { prefillTokens: 100, ahead: 0 }, i);
    const e = est.of(w!);
    expect(e.ttftFloorMs + e.prefillMsPerToken * 100).toBeCloseTo(15, 0); // fits what it saw
    expect(e.waitMsPerRequest).toBeCloseTo(DEFAULT_TIMING_PRIORS.waitMsPerRequest, 0); // untouched
  });

  it('confounded samples (misses fast on idle workers, hits slow behind queues) cannot make prefill free', () => {
    const est = new TimingEstimates();
    const [w] = makeWorkers(1);
    // What the router's own choices produce: the more uncached tokens, the emptier the worker it went to.
    for (let i = 0; i < 400; i++) {
      const miss = i % 4 === 0;
      est.recordTtft(w!, miss ? 120 : 400, { prefillTokens: miss ? 4800 : 300, ahead: miss ? 2 : 3 }, i);
    }
    const e = est.of(w!);
    expect(e.prefillMsPerToken).toBeGreaterThanOrEqual(
      MIN_PREFILL_FRACTION * DEFAULT_TIMING_PRIORS.prefillMsPerToken,
    );
    // Recomputing 4,500 more tokens still costs something in the cost model's eyes.
    const hit = est.predictTtftMs(w!, { prefillTokens: 300, ahead: 3 });
    const miss = est.predictTtftMs(w!, { prefillTokens: 4800, ahead: 3 });
    expect(miss - hit).toBeGreaterThanOrEqual(
      4500 * MIN_PREFILL_FRACTION * DEFAULT_TIMING_PRIORS.prefillMsPerToken,
    );
  });

  it('predicts what it fitted: samples that would push a coefficient below its bound cannot inflate the others', () => {
    // Two workers of one pool, 5x apart, on prompts of nearly one size: the slower one's last samples came
    // at 199-202 tokens, the faster one's at 209-210. Read naively, a longer prompt is faster: a negative
    // cost per token, made up by a large floor. The published cost per token is held at its bound, so
    // the large floor alone was published, and the fleet predicted 100-250 ms for the 14 ms it kept
    // seeing; the faster worker read 4x faster than its pool for good.
    const est = new TimingEstimates();
    const [slow, fast] = makeWorkers(2);
    let t = 0;
    for (let i = 0; i < 6; i++) {
      est.recordTtft(fast!, 15, { prefillTokens: 200, ahead: 0 }, t++);
      est.recordTtft(slow!, 76, { prefillTokens: 199 + (i % 4), ahead: 0 }, t++);
    }
    for (let i = 0; i < 200; i++) est.recordTtft(fast!, 14, { prefillTokens: 209 + (i % 2), ahead: 0 }, t++);
    const fleet = est.fleetOf('regular');
    expect(fleet.ttftFloorMs + fleet.prefillMsPerToken * 210).toBeCloseTo(14, 0);
    expect(fleet.prefillMsPerToken).toBeGreaterThanOrEqual(
      MIN_PREFILL_FRACTION * DEFAULT_TIMING_PRIORS.prefillMsPerToken,
    );
    // Served alone for 200 responses, the faster worker is its pool's pace again.
    expect(est.paceOf(fast!, t)).toBe(1);
  });

  it('learns that requests ahead cost nothing when they do not (queued prefills are a feature apart)', () => {
    const est = new TimingEstimates({ interChunkMs: 12 });
    const w = observe(est, { floor: 5, p: 0.05, q: 0 }, 300);
    expect(est.of(w).waitMsPerRequest).toBeGreaterThanOrEqual(0);
    expect(est.of(w).waitMsPerRequest).toBeCloseTo(0, 0);
  });

  it('inter-chunk time is an EWMA; bad observations are ignored; one stall cannot wreck the fit', () => {
    const est = new TimingEstimates({ interChunkMs: 20 });
    const [w] = makeWorkers(1);
    est.recordInterChunk(w!, 10);
    expect(est.of(w!).interChunkMs).toBeCloseTo(19);
    est.recordInterChunk(w!, Number.NaN);
    est.recordInterChunk(w!, -1);
    est.recordTtft(w!, Number.POSITIVE_INFINITY, { prefillTokens: 1, ahead: 0 }, 0);
    expect(est.of(w!).chunkSamples).toBe(1);
    expect(est.of(w!).ttftSamples).toBe(0);
    const before = est.predictTtftMs(w!, { prefillTokens: 100, ahead: 1 });
    est.recordTtft(w!, 1e9, { prefillTokens: 100, ahead: 1 }, 0);
    expect(est.predictTtftMs(w!, { prefillTokens: 100, ahead: 1 })).toBeLessThanOrEqual(2 * before + 200);
  });

  it('a worker without observations reads its role fleet estimate; other roles keep the priors', () => {
    const est = new TimingEstimates({ interChunkMs: 20 });
    const [a, b] = makeWorkers(2);
    for (let i = 0; i < 50; i++) est.recordInterChunk(a!, 5);
    est.recordTtft(a!, 300, { prefillTokens: 10, ahead: 0 }, 0);
    // b was never observed (e.g. avoided): it inherits what the fleet learned, not the optimistic priors.
    expect(est.of(b!).interChunkMs).toBeCloseTo(est.of(a!).interChunkMs);
    expect(est.of(b!).ttftFloorMs).toBeCloseTo(est.of(a!).ttftFloorMs);
    expect(est.of(b!).ttftSamples).toBe(0);
    const prefill = new Worker({ role: 'prefill', url: 'http://p:1', endpoint: 'p:1', generation: 1 });
    expect(est.of(prefill)).toEqual({
      ...DEFAULT_TIMING_PRIORS,
      pace: 1,
      ttftSamples: 0,
      chunkSamples: 0,
      wholeSamples: 0,
    });
    // Its own observations then move it on its own; forget() drops them again.
    est.recordInterChunk(b!, 100);
    expect(est.of(b!).interChunkMs).toBeGreaterThan(est.of(a!).interChunkMs + 5);
    est.forget(b!);
    expect(est.of(b!).chunkSamples).toBe(0);
  });

  describe('pace (what the cost model scores with)', () => {
    /** Requests of varied size and queue on every worker in turn; worker i's TTFT x speed[i] of the truth. */
    function fleet(
      speeds: readonly number[],
      rounds: number,
      jitter = 0,
      est = new TimingEstimates(),
      t0 = 0,
      workers = makeWorkers(speeds.length),
    ) {
      let k = 0;
      for (let r = 0; r < rounds; r++) {
        workers.forEach((w, i) => {
          const prefillTokens = [16, 2048, 300, 5000, 64][(r + i) % 5]!;
          const ahead = [0, 3, 8, 1, 12][(r * 3 + i) % 5]!;
          // A deterministic +-jitter that differs per sample (alike workers' noise).
          const noise = 1 + jitter * Math.sin(++k * 12.9898);
          est.recordTtft(
            w,
            (8 + 0.05 * prefillTokens + 20 * ahead) * speeds[i]! * noise,
            { prefillTokens, ahead },
            t0 + r,
          );
        });
      }
      return { est, workers, now: t0 + rounds };
    }

    it('a worker twice as slow as the others is scored slower in every term; the fast ones faster', () => {
      const { est, workers, now } = fleet([2, 1, 1, 1], 200);
      const fleetEst = est.fleetOf('regular');
      const slow = est.scoringOf(workers[0]!, now);
      const fast = workers.slice(1).map((w) => est.scoringOf(w, now));
      expect(slow.pace).toBeGreaterThan(1.3);
      // The fleet's estimate averages the slow worker in: the fast ones read at or below it.
      for (const f of fast) {
        expect(f.pace).toBeLessThanOrEqual(1);
        expect(slow.pace / f.pace).toBeGreaterThan(1.5);
      }
      expect(Math.min(...fast.map((f) => f.pace))).toBeLessThan(1);
      for (const e of [slow, ...fast]) {
        for (const k of ['ttftFloorMs', 'prefillMsPerToken', 'waitMsPerRequest', 'interChunkMs'] as const) {
          expect(e[k]).toBeCloseTo(fleetEst[k] * e.pace, 9);
        }
      }
      // /workers and /metrics read the pace on the worker's own estimates too.
      expect(est.of(workers[0]!).pace).toBe(slow.pace);
    });

    it('alike workers with noisy samples all read pace 1: the fleet estimate itself, not a copy', () => {
      const { est, workers, now } = fleet([1, 1, 1, 1, 1, 1, 1, 1], 100, 0.3);
      for (const w of workers) {
        expect(est.of(w).pace).toBe(1);
        expect(est.scoringOf(w, now)).toBe(est.fleetOf('regular'));
      }
    });

    it('a difference within the dead band reads 1; the pace starts at 1 and moves over tens of samples', () => {
      const within = Math.exp(PACE_DEADBAND) * 0.97;
      const { est, workers } = fleet([within, 1, 1, 1], 300);
      // Relative to a fleet that averages it in, the slightly slower worker stays within the band.
      expect(est.of(workers[0]!).pace).toBe(1);
      const fresh = fleet([4, 1, 1, 1], 1);
      expect(fresh.est.of(fresh.workers[0]!).pace).toBe(1); // one sample moves the EWMA by 5% of it only
      const later = fleet([4, 1, 1, 1], 60);
      // 4x against a fleet that averages 1.75x: 2.29x, 2.0 past the dead band, 95% of the way after 60.
      expect(later.est.of(later.workers[0]!).pace).toBeGreaterThan(1.8);
    });

    it('a worker never observed, or forgotten (a new generation), scores with the fleet estimate', () => {
      const { est, workers, now } = fleet([3, 1], 100);
      // 3x against a fleet that averages 2x: 1.5x, 1.3 past the dead band.
      expect(est.scoringOf(workers[0]!, now).pace).toBeGreaterThan(1.25);
      est.forget(workers[0]!);
      expect(est.scoringOf(workers[0]!, now)).toBe(est.fleetOf('regular'));
      const [, , unseen] = makeWorkers(3);
      expect(est.scoringOf(unseen!, now)).toBe(est.fleetOf('regular'));
    });

    it('the scored copy follows the fleet as it learns (no stale coefficients)', () => {
      const { est, workers, now } = fleet([3, 1], 100);
      const before = est.scoringOf(workers[0]!, now);
      expect(est.scoringOf(workers[0]!, now)).toBe(before); // cached while nothing moved
      est.recordInterChunk(workers[1]!, 500);
      const after = est.scoringOf(workers[0]!, now);
      expect(after).not.toBe(before);
      expect(after.interChunkMs).toBeCloseTo(est.fleetOf('regular').interChunkMs * after.pace, 9);
    });

    it('an unobserved worker forgets its slowness: after the silence, its pace halves in log per period', () => {
      const forget = 30_000;
      const { est, workers, now } = fleet(
        [3, 1, 1, 1],
        200,
        0,
        new TimingEstimates({}, { paceForgetMs: forget }),
      );
      const slow = workers[0]!;
      const measured = est.paceOf(slow, now);
      expect(measured).toBeGreaterThan(1.5);
      // Within the silence it allows, nothing is forgotten (a worker sampled that often is unbiased).
      expect(est.paceOf(slow, now + forget)).toBe(measured);
      expect(est.scoringOf(slow, now + forget).pace).toBe(measured);
      // One period later half of the log is gone; the scored copy and /workers' figure follow.
      const logAfter = (t: number): number => Math.log(est.paceOf(slow, now + t)) + PACE_DEADBAND;
      expect(logAfter(2 * forget)).toBeCloseTo((Math.log(measured) + PACE_DEADBAND) / 2, 2);
      expect(est.scoringOf(slow, now + 2 * forget).pace).toBe(est.paceOf(slow, now + 2 * forget));
      // Some periods on, it scores as the fleet again: the router tries it once more.
      expect(est.paceOf(slow, now + 5 * forget)).toBe(1);
      expect(est.scoringOf(slow, now + 5 * forget)).toBe(est.fleetOf('regular'));
      // A worker still slow is learned slow again from its next few dozen samples.
      fleet([3, 1, 1, 1], 60, 0, est, now + 5 * forget, workers);
      expect(est.paceOf(slow, now + 5 * forget + 60)).toBeGreaterThan(1.3);
    });

    it('a silence only counts from the last sample, and samples out of order do not move the clock back', () => {
      const est = new TimingEstimates({}, { paceForgetMs: 10_000 });
      const [slow, other] = makeWorkers(2);
      for (let i = 0; i < 100; i++) {
        est.recordTtft(other!, 10, { prefillTokens: 0, ahead: 0 }, i);
        est.recordTtft(slow!, 40, { prefillTokens: 0, ahead: 0 }, i);
      }
      expect(est.paceOf(slow!, 99)).toBeGreaterThan(1.2);
      est.recordTtft(slow!, 40, { prefillTokens: 0, ahead: 0 }, 15_000); // after a silence of 15 s
      est.recordTtft(slow!, 40, { prefillTokens: 0, ahead: 0 }, 14_000); // late: keeps the clock at 15 s
      expect(est.paceOf(slow!, 15_000)).toBeGreaterThan(1.1);
      expect(est.paceOf(slow!, 25_000)).toBe(est.paceOf(slow!, 15_000));
      expect(est.paceOf(slow!, 40_000)).toBeLessThan(est.paceOf(slow!, 15_000));
    });
  });

  describe('non-streamed responses (recordWhole: a duration with its decode steps)', () => {
    /** A worker whose responses last floor + p * U + q * A + step * M, none of them streamed. */
    function observeWhole(
      est: TimingEstimates,
      w: Worker,
      truth: { floor: number; p: number; q: number; step: number },
      n: number,
      steps: (i: number) => number,
    ): void {
      for (let i = 0; i < n; i++) {
        const prefillTokens = [16, 2048, 300, 5000, 64][i % 5]!;
        const ahead = [0, 3, 8, 1, 12][(i * 3) % 5]!;
        const m = steps(i);
        const ms = truth.floor + truth.p * prefillTokens + truth.q * ahead + truth.step * m;
        est.recordWhole(w, ms, { prefillTokens, ahead }, m, i);
      }
    }

    it('a fleet whose clients never stream still learns every coefficient', () => {
      const est = new TimingEstimates();
      const [w] = makeWorkers(1);
      // An older GPU than the priors: 4x the prefill cost, 2x the decode step.
      const truth = { floor: 12, p: 0.2, q: 35, step: 40 };
      observeWhole(est, w!, truth, 400, (i) => [31, 7, 120, 0, 63, 15][i % 6]!);
      const e = est.of(w!);
      expect(e.prefillMsPerToken).toBeCloseTo(truth.p, 2);
      expect(e.waitMsPerRequest).toBeCloseTo(truth.q, 0);
      expect(e.interChunkMs).toBeCloseTo(truth.step, 0);
      expect(e.ttftFloorMs).toBeCloseTo(truth.floor, 0);
      expect(e.wholeSamples).toBe(400);
      expect(e.ttftSamples).toBe(0);
      // Its time to first token, what routing prices, is the fitted one, not the whole duration.
      expect(est.predictTtftMs(w!, { prefillTokens: 1000, ahead: 2 })).toBeCloseTo(12 + 200 + 70, 0);
      // And its role's fleet learned it too, for the workers not yet seen.
      expect(est.fleetOf('regular').prefillMsPerToken).toBeCloseTo(truth.p, 2);
    });

    it('responses all of one length: the prefill and wait costs are still learned, the step takes the constant', () => {
      const est = new TimingEstimates();
      const [w] = makeWorkers(1);
      const truth = { floor: 12, p: 0.2, q: 35, step: 40 };
      observeWhole(est, w!, truth, 400, () => 31);
      const e = est.of(w!);
      expect(e.prefillMsPerToken).toBeCloseTo(truth.p, 2);
      expect(e.waitMsPerRequest).toBeCloseTo(truth.q, 0);
      // floor + 31 steps is all the data shows; nearly all of it goes to the step (its prior is the wider).
      expect(e.ttftFloorMs + 31 * e.interChunkMs).toBeCloseTo(truth.floor + 31 * truth.step, 0);
      expect(Math.abs(e.ttftFloorMs - DEFAULT_TIMING_PRIORS.ttftFloorMs)).toBeLessThan(1);
    });

    it('a first-token sample leaves the decode step alone; a measured gap moves it', () => {
      const est = new TimingEstimates();
      const w = observe(est, { floor: 4, p: 0.02, q: 30 }, 200);
      expect(est.of(w).interChunkMs).toBe(DEFAULT_TIMING_PRIORS.interChunkMs);
      est.recordInterChunk(w, 30);
      expect(est.of(w).interChunkMs).toBeCloseTo(21);
    });

    it("a worker slower than its fleet in whole responses reads a pace well above its alike peers'", () => {
      const est = new TimingEstimates();
      const [fast, alike, slow] = makeWorkers(3);
      const truth = { floor: 10, p: 0.05, q: 20, step: 20 };
      const slowTruth = { floor: 30, p: 0.15, q: 60, step: 60 };
      for (let round = 0; round < 20; round++) {
        observeWhole(est, fast!, truth, 5, (i) => 16 + ((i * 7) % 40));
        observeWhole(est, alike!, truth, 5, (i) => 16 + ((i * 7) % 40));
        observeWhole(est, slow!, slowTruth, 5, (i) => 16 + ((i * 7) % 40));
      }
      // Against the fleet's prediction, which the slow third's samples lift: the two fast ones read
      // alike, below 1, and the slow one well above them.
      expect(est.paceOf(alike!, 100)).toBeCloseTo(est.paceOf(fast!, 100), 1);
      expect(est.paceOf(fast!, 100)).toBeLessThan(1);
      expect(est.paceOf(slow!, 100)).toBeGreaterThan(2 * est.paceOf(fast!, 100));
    });

    it('ignores a duration or feature that is not a finite number', () => {
      const est = new TimingEstimates();
      const [w] = makeWorkers(1);
      est.recordWhole(w!, Number.NaN, { prefillTokens: 10, ahead: 0 }, 3, 0);
      est.recordWhole(w!, -1, { prefillTokens: 10, ahead: 0 }, 3, 0);
      est.recordWhole(w!, 100, { prefillTokens: 10, ahead: 0 }, Number.POSITIVE_INFINITY, 0);
      expect(est.of(w!).wholeSamples).toBe(0);
      expect(est.of(w!).interChunkMs).toBe(DEFAULT_TIMING_PRIORS.interChunkMs);
    });
  });

  it('rejects a pace forget time that is not positive', () => {
    expect(() => new TimingEstimates({}, { paceForgetMs: 0 })).toThrow(RangeError);
    expect(() => new TimingEstimates({}, { paceForgetMs: Number.NaN })).toThrow(RangeError);
  });

  it('rejects invalid priors', () => {
    expect(() => new TimingEstimates({ prefillMsPerToken: -1 })).toThrow(RangeError);
    expect(() => new TimingEstimates({ ttftFloorMs: Number.NaN })).toThrow(RangeError);
  });
});
