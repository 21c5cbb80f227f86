import { describe, expect, it } from 'vitest';
import { RunQueue } from '../../../src/sim/run-queue.js';

describe('RunQueue', () => {
  it('admits up to maxRunning, then queues FIFO', () => {
    const q = new RunQueue<string>(2);
    expect([q.submit('a'), q.submit('b'), q.submit('c'), q.submit('d')]).toEqual([true, true, false, false]);
    expect([q.running, q.waiting]).toEqual([2, 2]);
    expect(q.finish()).toBe('c'); // c takes the freed slot
    expect([q.running, q.waiting]).toEqual([2, 1]);
    expect(q.finish()).toBe('d');
    expect(q.finish()).toBeUndefined();
    expect([q.running, q.waiting]).toEqual([1, 0]);
    expect(q.finish()).toBeUndefined();
    expect(q.running).toBe(0);
  });

  it('cancels a waiting item so it never starts', () => {
    const q = new RunQueue<string>(1);
    q.submit('a');
    q.submit('b');
    q.submit('c');
    expect(q.cancel('b')).toBe(true);
    expect(q.cancel('b')).toBe(false);
    expect(q.cancel('a')).toBe(false); // running, not waiting
    expect(q.finish()).toBe('c');
  });

  it('throws on finish without a running item', () => {
    expect(() => new RunQueue<string>(1).finish()).toThrow();
  });

  it('clear() returns the waiting items and resets', () => {
    const q = new RunQueue<number>(1);
    [1, 2, 3].forEach((i) => q.submit(i));
    expect(q.clear()).toEqual([2, 3]);
    expect([q.running, q.waiting]).toEqual([0, 0]);
  });

  it.each([0, -1, 1.5])('rejects maxRunning %s', (n) => {
    expect(() => new RunQueue(n)).toThrow(RangeError);
  });
});
