import { describe, expect, it } from 'vitest';
import { PendingBlocks } from '../../../src/kv-events/pending-blocks.js';

describe('PendingBlocks', () => {
  it.each<[string, (p: PendingBlocks) => number, number]>([
    ['nothing added', (p) => p.run('a', [1, 2, 3], 0), 0],
    ['the leading keys added', (p) => (p.add('a', [1, 2], 0, 100), p.run('a', [1, 2, 3], 50)), 2],
    ['another worker holds nothing', (p) => (p.add('a', [1, 2], 0, 100), p.run('b', [1, 2], 50)), 0],
    [
      'the run stops at the first missing key',
      (p) => (p.add('a', [1, 3], 0, 100), p.run('a', [1, 2, 3], 50)),
      1,
    ],
    ['from an offset', (p) => (p.add('a', [2, 3], 0, 100), p.run('a', [1, 2, 3], 50, 1)), 2],
    ['expired at its TTL', (p) => (p.add('a', [1, 2], 0, 100), p.run('a', [1, 2], 100)), 0],
    [
      're-adding extends the expiry',
      (p) => (p.add('a', [1], 0, 100), p.add('a', [1], 90, 100), p.run('a', [1], 150)),
      1,
    ],
    [
      'confirmed keys are no longer pending',
      (p) => (p.add('a', [1, 2, 3], 0, 100), p.confirm('a', [1, 2, 3], 2), p.run('a', [1, 2, 3], 10, 2)),
      1,
    ],
    ['added from an offset', (p) => (p.add('a', [1, 2, 3], 0, 100, 1), p.run('a', [1, 2, 3], 10)), 0],
    [
      'added from an offset, read from it',
      (p) => (p.add('a', [1, 2, 3], 0, 100, 1), p.run('a', [1, 2, 3], 10, 1)),
      2,
    ],
    [
      'confirm walks back from the last shown block to the first key not pending',
      (p) => (
        p.add('a', [1, 2, 3, 4], 0, 100, 2), // pending: 3, 4
        p.confirm('a', [1, 2, 3, 4], 3), // shows 1..3: 3 confirmed, stops at 2
        p.size
      ),
      1,
    ],
    [
      'keys the worker stored are no longer pending, whatever their position',
      (p) => (p.add('a', [1, 2, 3], 0, 100), p.confirmKeys('a', [2, 9]), p.run('a', [1, 2, 3], 10)),
      1,
    ],
    [
      'stored keys confirm only on their own worker',
      (p) => (p.add('a', [1, 2], 0, 100), p.confirmKeys('b', [1, 2]), p.run('a', [1, 2], 10)),
      2,
    ],
    [
      'a dropped worker holds nothing',
      (p) => (p.add('a', [1, 2], 0, 100), p.dropWorker('a'), p.run('a', [1, 2], 10)),
      0,
    ],
  ])('%s', (_name, act, want) => {
    expect(act(new PendingBlocks())).toBe(want);
  });

  it('stays within maxKeys: expired entries go first, then the oldest', () => {
    const p = new PendingBlocks(8);
    p.add('a', [1, 2, 3, 4], 0, 10); // expires at 10
    p.add('b', [5, 6, 7, 8], 20, 100);
    expect(p.size).toBe(8);
    p.add('b', [9], 20, 100); // over the bound at t=20: a's keys have expired
    expect(p.size).toBe(5);
    expect(p.run('b', [5, 6, 7, 8, 9], 30)).toBe(5);
    p.add('c', [10, 11, 12, 13], 30, 100); // 9 > 8, none expired: oldest (b's first) go, down to 6
    expect(p.size).toBe(6);
    expect(p.run('c', [10, 11, 12, 13], 40)).toBe(4);
    expect(p.run('b', [5], 40)).toBe(0);
  });

  it('counts removals made by confirm, expiry and drop', () => {
    const p = new PendingBlocks();
    p.add('a', [1, 2, 3], 0, 100);
    p.add('b', [4], 0, 100);
    p.confirm('a', [1], 1);
    expect(p.size).toBe(3);
    p.run('a', [2], 200); // expired on read
    expect(p.size).toBe(2);
    p.dropWorker('b');
    expect(p.size).toBe(1);
    p.add('a', [5, 6], 0, 100);
    p.confirmKeys('a', [3, 5, 7]);
    expect(p.size).toBe(1);
  });
});
