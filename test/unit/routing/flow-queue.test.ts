/** The flow-control queue (routing/flow-queue.ts): priority first, flows in turn, arrival order within a flow. */
import { describe, expect, it } from 'vitest';
import { FlowQueue, type QueuedRequest } from '../../../src/routing/flow-queue.js';

const req = (item: string, priority: number, flow = '', queuedAt = 0): QueuedRequest<string> => ({
  item,
  priority,
  flow,
  queuedAt,
});

function drainOrder(q: FlowQueue<string>): string[] {
  const out: string[] = [];
  for (let e = q.pop(); e !== undefined; e = q.pop()) out.push(e.item);
  return out;
}

describe('FlowQueue', () => {
  it('lets the highest priority go first, in arrival order within one flow', () => {
    const q = new FlowQueue<string>();
    for (const r of [req('b1', -1), req('i1', 0), req('b2', -1), req('c1', 10), req('i2', 0)]) q.push(r);
    expect(q.size).toBe(5);
    expect(drainOrder(q)).toEqual(['c1', 'i1', 'i2', 'b1', 'b2']);
    expect(q.size).toBe(0);
    expect(q.pop()).toBeUndefined();
  });

  it('takes turns between the flows of one priority, however many each sent', () => {
    const q = new FlowQueue<string>();
    for (let i = 1; i <= 4; i++) q.push(req(`a${i}`, 0, 'tenant-a'));
    q.push(req('b1', 0, 'tenant-b'));
    q.push(req('c1', 0, 'tenant-c'));
    q.push(req('b2', 0, 'tenant-b'));
    expect(drainOrder(q)).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3', 'a4']);
  });

  it('removes a request whose client went away, once', () => {
    const q = new FlowQueue<string>();
    const x = req('x', 0, 'f');
    q.push(req('a', 0, 'f'));
    q.push(x);
    q.push(req('lo', -1));
    expect(q.remove(x)).toBe(true);
    expect(q.remove(x)).toBe(false);
    expect(q.size).toBe(2);
    expect(drainOrder(q)).toEqual(['a', 'lo']);
    // A request already let go is not queued.
    const y = req('y', 3);
    q.push(y);
    q.pop();
    expect(q.remove(y)).toBe(false);
  });

  it('hands back the requests queued at or before a cutoff, keeping the others in order', () => {
    const q = new FlowQueue<string>();
    q.push(req('old-hi', 5, '', 10));
    q.push(req('old-lo', -1, 'f', 20));
    q.push(req('new-lo', -1, 'f', 40));
    q.push(req('new-hi', 5, 'g', 50));
    expect(
      q
        .expired(20)
        .map((e) => e.item)
        .sort(),
    ).toEqual(['old-hi', 'old-lo']);
    expect(q.size).toBe(2);
    expect(drainOrder(q)).toEqual(['new-hi', 'new-lo']);
  });

  it('drains everything (closing)', () => {
    const q = new FlowQueue<string>();
    q.push(req('a', 1));
    q.push(req('b', -2, 'x'));
    expect(
      q
        .drain()
        .map((e) => e.item)
        .sort(),
    ).toEqual(['a', 'b']);
    expect(q.size).toBe(0);
    expect(q.pop()).toBeUndefined();
  });

  it('takes the best request a predicate accepts, leaving the others in order', () => {
    const q = new FlowQueue<string>();
    for (const r of [
      req('hi-llama', 5),
      req('lo-qwen-1', -1, 'f'),
      req('lo-llama', -1, 'f'),
      req('lo-qwen-2', -1, 'g'),
    ])
      q.push(r);
    const qwen = (e: QueuedRequest<string>): boolean => e.item.includes('qwen');
    expect(q.take(qwen)?.item).toBe('lo-qwen-1');
    // Flow f had its turn: g's request comes before f's next accepted one.
    q.push(req('lo-qwen-3', -1, 'f'));
    expect(q.take(qwen)?.item).toBe('lo-qwen-2');
    expect(q.take(qwen)?.item).toBe('lo-qwen-3');
    expect(q.take(qwen)).toBeUndefined();
    expect(drainOrder(q)).toEqual(['hi-llama', 'lo-llama']);
  });

  it('gives up the newest request of the lowest band for a more important one, and none for an equal one', () => {
    const q = new FlowQueue<string>();
    q.push(req('lo-a1', -1, 'a', 10));
    q.push(req('lo-b1', -1, 'b', 20));
    q.push(req('lo-a2', -1, 'a', 30));
    q.push(req('mid', 0, '', 40));
    expect(q.displace(-1)).toBeUndefined();
    expect(q.displace(0)?.item).toBe('lo-a2');
    expect(q.size).toBe(3);
    expect(drainOrder(q)).toEqual(['mid', 'lo-a1', 'lo-b1']);
    expect(q.displace(5)).toBeUndefined();
  });

  it('counts the bytes it holds, and those below a priority, as requests come and go', () => {
    const q = new FlowQueue<string>();
    const sized = (item: string, priority: number, bytes: number, queuedAt = 0): QueuedRequest<string> => ({
      ...req(item, priority, '', queuedAt),
      bytes,
    });
    const gone = sized('gone', 0, 7);
    for (const r of [sized('lo', -1, 100, 5), sized('mid', 0, 20, 1), gone, sized('hi', 3, 1, 9)]) q.push(r);
    expect(q.bytes).toBe(128);
    expect(q.below(3)).toEqual({ count: 3, bytes: 127 });
    expect(q.below(0)).toEqual({ count: 1, bytes: 100 });
    q.remove(gone);
    expect(q.pop()?.item).toBe('hi');
    expect(q.bytes).toBe(120);
    expect(q.expired(1).map((e) => e.item)).toEqual(['mid']);
    expect(q.displace(0)?.item).toBe('lo');
    expect([q.size, q.bytes]).toEqual([0, 0]);
  });
});
