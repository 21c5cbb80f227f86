/**
 * PendingBlocks documents "beyond [maxKeys] the oldest pending blocks are forgotten first",
 * but shrink() walks workers in the order they were FIRST seen and empties the first worker's map
 * (newest keys included) before touching any older key of another worker.
 */
import { describe, expect, it } from 'vitest';
import { PendingBlocks } from '../../../src/kv-events/pending-blocks.js';

describe('PendingBlocks shrink forgets the oldest first', () => {
  it("keeps a worker's just-routed blocks while older blocks of another worker are pending", () => {
    const ttl = 10_000;
    const p = new PendingBlocks(8); // shrinks to 6 once over 8
    p.add('A', [1], 0, ttl); // A first seen at t=0
    p.add('B', [10, 11, 12, 13], 100, ttl); // B's blocks, routed at t=100
    p.add('A', [20, 21, 22, 23], 5_000, ttl); // A's blocks, routed at t=5000: the newest
    expect(p.size).toBe(6);
    // The three oldest (A's key 1 at t=0, then two of B's at t=100) go; A's fresh run stays whole.
    expect(p.run('A', [20, 21, 22, 23], 5_001)).toBe(4);
    expect(p.run('B', [10, 11, 12, 13], 5_001)).toBeLessThan(4);
  });
});
