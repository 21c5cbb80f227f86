import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TIMING_MODEL,
  interTokenMs,
  prefillTtftMs,
  resolveTimingModel,
  transferTtftMs,
} from '../../../src/sim/timing-model.js';

const t = resolveTimingModel({
  overheadMs: 5,
  prefillMsPerToken: 0.05,
  baseItlMs: 10,
  itlGrowthPerSeq: 0.02,
});

describe('timing model', () => {
  it.each([
    { uncached: 0, scale: 1, ms: 5 },
    { uncached: 1000, scale: 1, ms: 55 },
    { uncached: 2000, scale: 1, ms: 105 },
    { uncached: 2000, scale: 0.5, ms: 52.5 },
    { uncached: 2000, scale: 0, ms: 0 },
  ])('prefill TTFT with $uncached uncached tokens x$scale = $ms ms', ({ uncached, scale, ms }) => {
    expect(prefillTtftMs(t, uncached, scale)).toBeCloseTo(ms, 9);
  });

  it('TTFT grows with uncached tokens', () => {
    const ttfts = [0, 64, 512, 4096].map((n) => prefillTtftMs(t, n, 1));
    for (let i = 1; i < ttfts.length; i++) expect(ttfts[i]!).toBeGreaterThan(ttfts[i - 1]!);
  });

  it('a P/D transfer is cheaper than recomputing the prompt', () => {
    expect(transferTtftMs(t, 4096, 1)).toBeLessThan(prefillTtftMs(t, 4096, 1));
    expect(transferTtftMs(t, 4096, 0)).toBe(0);
  });

  it.each([
    { running: 1, ms: 10 },
    { running: 2, ms: 10.2 },
    { running: 51, ms: 20 },
    { running: 0, ms: 10 },
  ])('step time with $running running = $ms ms', ({ running, ms }) => {
    expect(interTokenMs(t, running, 1)).toBeCloseTo(ms, 9);
    expect(interTokenMs(t, running, 0)).toBe(0);
  });

  it('has the documented defaults', () => {
    expect(resolveTimingModel()).toEqual(DEFAULT_TIMING_MODEL);
    expect(DEFAULT_TIMING_MODEL.maxRunningSeqs).toBe(64);
  });

  it.each([{ overheadMs: -1 }, { baseItlMs: Number.NaN }, { maxRunningSeqs: 0 }, { maxRunningSeqs: 1.5 }])(
    'rejects %o',
    (o) => {
      expect(() => resolveTimingModel(o)).toThrow(RangeError);
    },
  );
});
