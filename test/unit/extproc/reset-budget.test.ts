import { describe, expect, it } from 'vitest';
import { ResetBudget } from '../../../src/extproc/reset-budget.js';

describe('ResetBudget (mirror of nghttp2 rapid-reset limit)', () => {
  it.each([
    // [resets per second, seconds, tokens used at the end, whether the bucket ever ran out]
    ['1,000 resets in one second: the burst, exactly', [1000], 1000, false],
    ['1,001 resets in one second: the limit', [1001], 1000, true],
    ['33 per second for a minute: never more than 33 used', Array.from({ length: 60 }, () => 33), 33, false],
    [
      '500, then one reset 10 s later: refilled by 330',
      [500, ...Array.from({ length: 9 }, () => 0), 1],
      171,
      false,
    ],
    [
      '100 per second: 67 net per second, empty in the 15th second',
      Array.from({ length: 16 }, () => 100),
      1000,
      true,
    ],
  ])('%s', (_name, perSecond, used, ranOut) => {
    const budget = new ResetBudget(0);
    let empty = false;
    perSecond.forEach((n, sec) => {
      for (let i = 0; i < n; i++) if (!budget.take(sec)) empty = true;
    });
    expect(empty).toBe(ranOut);
    expect(budget.used).toBe(used);
  });
});
