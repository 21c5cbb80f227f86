import { describe, expect, it } from 'vitest';
import {
  DEFAULT_TIMING_MODEL,
  interTokenMs,
  prefillChunkMs,
  prefillComputeMs,
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

  it.each([
    { budget: 0, ahead: 500, scale: 1, ms: 0 },
    { budget: 2048, ahead: 0, scale: 1, ms: 0 },
    { budget: 2048, ahead: 40, scale: 1, ms: 40 },
    { budget: 2048, ahead: 500, scale: 1, ms: 102.4 },
    { budget: 2048, ahead: 500, scale: 0.5, ms: 51.2 },
    { budget: 512, ahead: 500, scale: 1, ms: 25.6 },
  ])(
    'a decode step beside $ahead ms of booked prefill, budget $budget tokens, x$scale: +$ms ms',
    ({ budget, ahead, scale, ms }) => {
      const tb = resolveTimingModel({ prefillMsPerToken: 0.05, maxNumBatchedTokens: budget });
      expect(prefillChunkMs(tb, ahead, scale)).toBeCloseTo(ms, 9);
    },
  );

  it('the compute part of a prefill is its uncached tokens, without the fixed overhead', () => {
    expect(prefillComputeMs(t, 1000, 1)).toBeCloseTo(50, 9);
    expect(prefillTtftMs(t, 1000, 1) - prefillComputeMs(t, 1000, 1)).toBeCloseTo(t.overheadMs, 9);
    expect(prefillComputeMs(t, -5, 1)).toBe(0);
  });

  it('has the documented defaults', () => {
    expect(resolveTimingModel()).toEqual(DEFAULT_TIMING_MODEL);
    expect(DEFAULT_TIMING_MODEL.maxRunningSeqs).toBe(64);
  });

  it.each([
    { overheadMs: -1 },
    { baseItlMs: Number.NaN },
    { maxRunningSeqs: 0 },
    { maxRunningSeqs: 1.5 },
    { maxNumBatchedTokens: 2.5 },
    { maxNumBatchedTokens: -1 },
  ])('rejects %o', (o) => {
    expect(() => resolveTimingModel(o)).toThrow(RangeError);
  });
});
