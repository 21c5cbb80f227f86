import { describe, expect, it } from 'vitest';
import { KvBlockUsage, type KvHold } from '../../../src/sim/kv-usage.js';

const hold = (hashes: number[], tailTokens: number, generated = 0): KvHold => ({
  hashes,
  tailTokens,
  generated: () => generated,
});

describe('KvBlockUsage', () => {
  it.each([
    { name: 'nothing held', holds: [], used: 0 },
    { name: 'one request: 2 full blocks + a 3-token tail', holds: [hold([1, 2], 3)], used: 3 },
    { name: 'generated tokens fill private blocks', holds: [hold([1], 3, 14)], used: 3 },
    {
      name: 'a shared prefix is counted once',
      holds: [hold([1, 2, 3], 0, 1), hold([1, 2, 4], 0, 1)],
      used: 4 + 2,
    },
    { name: 'exactly full tail block', holds: [hold([], 16)], used: 1 },
  ])('$name -> $used blocks', ({ holds, used }) => {
    const u = new KvBlockUsage(16, 100);
    for (const h of holds) u.hold(h);
    expect(u.usedBlocks()).toBe(used);
    expect(u.usage()).toBeCloseTo(used / 100);
  });

  it('goes back to 0 when every request released, idempotently', () => {
    const u = new KvBlockUsage(16, 10);
    const a = hold([1, 2], 5);
    const b = hold([1, 7], 5);
    u.hold(a);
    u.hold(a);
    u.hold(b);
    expect(u.usedBlocks()).toBe(3 + 2);
    u.release(a);
    u.release(a);
    expect(u.usedBlocks()).toBe(2 + 1);
    u.release(b);
    expect([u.usedBlocks(), u.active, u.usage()]).toEqual([0, 0, 0]);
  });

  it('caps usage at 1 when requests hold more than the capacity', () => {
    const u = new KvBlockUsage(16, 2);
    u.hold(hold([1, 2, 3], 0));
    expect(u.usage()).toBe(1);
  });

  it('reads generated tokens at query time', () => {
    const u = new KvBlockUsage(4, 100);
    let n = 0;
    u.hold({ hashes: [], tailTokens: 0, generated: () => n });
    expect(u.usedBlocks()).toBe(0);
    n = 9;
    expect(u.usedBlocks()).toBe(3);
  });

  it.each([
    [0, 10],
    [16, 0],
    [1.5, 10],
  ])('rejects blockTokens %s / capacity %s', (b, c) => {
    expect(() => new KvBlockUsage(b, c)).toThrow(RangeError);
  });
});
