/**
 * bench/arm-runs.ts `quantile` says "nearest rank" (the rank ceil(q * n), 1-based), as stats.ts
 * `percentile` and the radix-tree / pool-select benches compute it. It indexes floor(q * n) instead:
 * one rank too high whenever q * n is a whole number (p50 of an even sample, p90 of 10k samples,
 * p99 of 100 or 300 samples: the admission bench's default 300 interactive requests).
 */
import { describe, expect, it } from 'vitest';
import { quantile } from '../../../bench/arm-runs.js';
import { percentile } from '../../../bench/stats.js';

const oneTo = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);

describe('arm-runs quantile is nearest rank', () => {
  it.each([
    { sorted: [1, 2], q: 0.5, want: 1 },
    { sorted: oneTo(10), q: 0.9, want: 9 },
    { sorted: oneTo(100), q: 0.99, want: 99 },
    { sorted: oneTo(300), q: 0.5, want: 150 },
    { sorted: oneTo(300), q: 0.9, want: 270 },
    { sorted: oneTo(300), q: 0.99, want: 297 },
  ])('quantile(1..$sorted.length, $q) = $want', ({ sorted, q, want }) => {
    expect(quantile(sorted, q)).toBe(want);
  });

  it('agrees with stats.percentile on the same sample', () => {
    for (const n of [1, 2, 7, 10, 100, 299, 300]) {
      for (const q of [0.5, 0.9, 0.99]) {
        expect(quantile(oneTo(n), q)).toBe(percentile(oneTo(n), q * 100));
      }
    }
  });
});
