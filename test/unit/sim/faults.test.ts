import { describe, expect, it } from 'vitest';
import { FaultQueue, type Fault } from '../../../src/sim/faults.js';

describe('FaultQueue', () => {
  it.each([
    { path: '/v1/completions', filter: undefined, hit: true },
    { path: '/v1/chat/completions', filter: undefined, hit: true },
    { path: '/health', filter: undefined, hit: false },
    { path: '/metrics', filter: undefined, hit: false },
    { path: '/health', filter: '/health', hit: true },
    { path: '/v1/chat/completions', filter: 'chat', hit: true },
    { path: '/v1/completions', filter: 'chat', hit: false },
  ])('$path with filter $filter -> $hit', ({ path, filter, hit }) => {
    const q = new FaultQueue();
    q.add({ status: 500 }, { path: filter });
    expect(q.take(path) !== undefined).toBe(hit);
  });

  it('applies a fault `count` times, oldest injection first', () => {
    const q = new FaultQueue();
    q.add({ status: 500 }, { count: 2 });
    q.add({ hang: true });
    expect(q.pending).toBe(3);
    expect(q.take('/v1/completions')).toEqual({ status: 500 });
    expect(q.take('/v1/completions')).toEqual({ status: 500 });
    expect(q.take('/v1/completions')).toEqual({ hang: true });
    expect(q.take('/v1/completions')).toBeUndefined();
  });

  it('clear() drops everything', () => {
    const q = new FaultQueue();
    q.add({ delayMs: 5 }, { count: 3 });
    q.clear();
    expect(q.take('/v1/completions')).toBeUndefined();
  });

  it.each<[Fault, { count?: number }]>([
    [{ status: 99 }, {}],
    [{ resetAfterChunks: -1 }, {}],
    [{ delayMs: -5 }, {}],
    [{ hang: false } as unknown as Fault, {}],
    [{ status: 500 }, { count: 0 }],
  ])('rejects %o %o', (fault, opts) => {
    expect(() => new FaultQueue().add(fault, opts)).toThrow();
  });
});
