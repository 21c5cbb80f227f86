import { describe, expect, it } from 'vitest';
import { RunQueue } from '../../../src/sim/run-queue.js';

describe('RunQueue', () => {
  it('admits up to maxRunning, then queues FIFO', () => {
    const q = new RunQueue<string>(2);
    expect([q.submit('a'), q.submit('b'), q.submit('c'), q.submit('d')]).toEqual([true, true, false, false]);
    expect([q.running, q.waiting]).toEqual([2, 2]);
    expect(q.take()).toBeUndefined(); // no free slot
    q.finish();
    expect(q.take()).toBe('c'); // c takes the freed slot
    expect(q.take()).toBeUndefined();
    expect([q.running, q.waiting]).toEqual([2, 1]);
    q.finish();
    expect(q.take()).toBe('d');
    q.finish();
    expect(q.take()).toBeUndefined();
    expect([q.running, q.waiting]).toEqual([1, 0]);
    q.finish();
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
    q.finish();
    expect(q.take()).toBe('c');
  });

  it('throws on finish without a running item', () => {
    expect(() => new RunQueue<string>(1).finish()).toThrow();
  });

  it('first come, first served on fit: a head that does not fit blocks the queue until it does', () => {
    // Items are block counts; the pool holds 10 and running items hold theirs.
    let used = 0;
    const q = new RunQueue<number>(8, (n) => used + n <= 10);
    const start = (n: number | undefined): number | undefined => {
      if (n !== undefined) used += n;
      return n;
    };
    expect(q.submit(6)).toBe(true);
    used += 6;
    expect(q.submit(5)).toBe(false); // 11 > 10
    expect(q.submit(1)).toBe(false); // would fit, but waits behind the head
    expect([q.running, q.waiting]).toEqual([1, 2]);
    expect(start(q.take())).toBeUndefined();
    q.finish();
    used -= 6;
    expect([start(q.take()), start(q.take()), start(q.take())]).toEqual([5, 1, undefined]);
    expect([q.running, q.waiting, used]).toEqual([2, 0, 6]);
  });

  it('starts a head that never fits once nothing runs', () => {
    const q = new RunQueue<number>(4, () => false);
    expect(q.submit(1)).toBe(true); // nothing runs: it starts
    expect(q.submit(2)).toBe(false);
    expect(q.take()).toBeUndefined();
    q.finish();
    expect(q.take()).toBe(2);
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

describe('RunQueue: ineligible items are passed over (LoRA without a slot), not waited for', () => {
  it('an item that may not be scheduled lets the ones behind it start, and starts once it may', () => {
    const blocked = new Set(['b']);
    const q = new RunQueue<string>(
      3,
      () => true,
      (x) => !blocked.has(x),
    );
    expect(q.submit('a')).toBe(true);
    expect(q.submit('b')).toBe(false); // ineligible: waits
    expect(q.submit('c')).toBe(true); // nothing eligible ahead of it: starts at once
    expect([q.running, q.waiting]).toEqual([2, 1]);
    expect(q.take()).toBeUndefined(); // b is still ineligible
    blocked.clear();
    expect(q.take()).toBe('b');
    expect([q.running, q.waiting]).toEqual([3, 0]);
  });

  it('eligible items keep their order, and a full engine still blocks them', () => {
    const q = new RunQueue<string>(
      1,
      () => true,
      (x) => x !== 'x',
    );
    q.submit('a');
    q.submit('x');
    q.submit('b');
    q.submit('c');
    expect(q.take()).toBeUndefined(); // no slot
    q.finish();
    expect(q.take()).toBe('b');
    q.finish();
    expect(q.take()).toBe('c');
    expect([...q.waitingItems()]).toEqual(['x']);
  });
});

describe('RunQueue: items of several sequences (parallel sampling)', () => {
  const seqs: Record<string, number> = { n4: 4, n2: 2, one: 1, n8: 8 };
  const queue = () => new RunQueue<string>(4, undefined, undefined, undefined, (x) => seqs[x] ?? 1);

  it('counts every sequence as a running or waiting slot', () => {
    const q = queue();
    expect(q.submit('n2')).toBe(true);
    expect(q.submit('one')).toBe(true);
    expect(q.submit('n2')).toBe(false); // 3 of 4 slots taken: two more do not fit
    expect([q.running, q.waiting]).toEqual([3, 2]);
    q.finish('one');
    expect(q.take()).toBe('n2');
    expect([q.running, q.waiting]).toEqual([4, 0]);
    q.finish('n2');
    q.finish('n2');
    expect(q.running).toBe(0);
  });

  it('starts an item larger than the limit alone, once nothing runs', () => {
    const q = queue();
    expect(q.submit('one')).toBe(true);
    expect(q.submit('n8')).toBe(false);
    q.finish('one');
    expect(q.take()).toBe('n8');
    expect([q.running, q.waiting]).toEqual([8, 0]);
    expect(() => q.finish('n8')).not.toThrow();
    expect(() => q.finish('one')).toThrow();
  });
});

describe('RunQueue: priority scheduling (vLLM --scheduling-policy priority)', () => {
  const prio: Record<string, number> = { batch1: 1, batch2: 1, chat: -1, late: -1, zero: 0 };
  const queue = () => new RunQueue<string>(1, undefined, undefined, (x) => prio[x] ?? 0);

  it('hands out the lowest priority first, first come first served within one priority', () => {
    const q = queue();
    expect(q.submit('zero')).toBe(true); // nothing waits: runs at once whatever its priority
    for (const x of ['batch1', 'chat', 'batch2', 'late']) expect(q.submit(x)).toBe(false);
    expect([...q.waitingItems()]).toEqual(['chat', 'late', 'batch1', 'batch2']);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      q.finish();
      order.push(q.take() as string);
    }
    expect(order).toEqual(['chat', 'late', 'batch1', 'batch2']);
    expect(q.waiting).toBe(0);
  });

  it('cancels from any priority; clear() returns them in start order', () => {
    const q = queue();
    q.submit('zero');
    ['batch1', 'chat', 'batch2'].forEach((x) => q.submit(x));
    expect(q.cancel('chat')).toBe(true);
    expect(q.cancel('chat')).toBe(false);
    expect(q.waiting).toBe(2);
    q.submit('late');
    expect(q.clear()).toEqual(['late', 'batch1', 'batch2']);
    expect(q.waiting).toBe(0);
    expect(q.running).toBe(0);
  });
});
