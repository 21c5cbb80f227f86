import { describe, expect, it } from 'vitest';
import { PrefixReuse, REUSE_PRIOR } from '../../../src/routing/prefix-reuse.js';

describe('PrefixReuse (share of recent prompts whose opening was seen within the window)', () => {
  it.each([
    { name: 'nothing seen yet: assumes sharing', keys: [], window: 8, rate: 1 },
    {
      name: 'unique keys only',
      keys: [1, 2, 3, 4, 5, 6, 7, 8],
      window: 8,
      rate: REUSE_PRIOR / (8 + REUSE_PRIOR),
    },
    {
      name: 'one key repeated',
      keys: [7, 7, 7, 7, 7, 7, 7, 7],
      window: 8,
      rate: (7 + REUSE_PRIOR) / (8 + REUSE_PRIOR),
    },
    {
      name: 'half repeats',
      keys: [1, 1, 2, 2, 3, 3, 4, 4],
      window: 8,
      rate: (4 + REUSE_PRIOR) / (8 + REUSE_PRIOR),
    },
    // Window 2: key 1 has left the window when it comes back, so it counts as new.
    {
      name: 'a key older than the window is new again',
      keys: [1, 2, 3, 1],
      window: 2,
      rate: REUSE_PRIOR / (2 + REUSE_PRIOR),
    },
  ])('$name', ({ keys, window, rate }) => {
    const r = new PrefixReuse(window);
    for (const k of keys) r.observe(k);
    expect(r.rate()).toBeCloseTo(rate, 12);
  });

  it('observe() says whether the key was in the window; the window stays bounded', () => {
    const r = new PrefixReuse(4);
    expect([1, 2, 1, 3, 4, 5, 1, 1].map((k) => r.observe(k))).toEqual([
      false,
      false,
      true,
      false,
      false,
      false, // 5 evicts the first 1; a 1 is still in the window (the third observation)
      true,
      true,
    ]);
    expect(r.distinct).toBeLessThanOrEqual(4);
    for (let k = 100; k < 10_000; k++) r.observe(k);
    expect(r.distinct).toBe(4);
    expect(r.rate()).toBeCloseTo(REUSE_PRIOR / (4 + REUSE_PRIOR), 12);
  });

  it('the rate follows the traffic mix as it changes', () => {
    const r = new PrefixReuse(64);
    for (let i = 0; i < 256; i++) r.observe(i); // unique prompts
    expect(r.rate()).toBeLessThan(0.15);
    for (let i = 0; i < 256; i++) r.observe(1_000 + (i % 4)); // four shared system prompts
    expect(r.rate()).toBeGreaterThan(0.9);
  });

  it('rejects a window that is not a positive integer', () => {
    expect(() => new PrefixReuse(0)).toThrow(RangeError);
    expect(() => new PrefixReuse(1.5)).toThrow(RangeError);
  });
});
