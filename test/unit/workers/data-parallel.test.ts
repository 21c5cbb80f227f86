/**
 * Data-parallel ranks as workers (workers/data-parallel.ts): how many ranks a server has, and the pool
 * scheduling each rank as a Worker of its own (`<url>@<rank>`) with the server's generation.
 */
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { dataParallelSizeOf, scheduledRanks } from '../../../src/workers/data-parallel.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import type { Worker } from '../../../src/workers/worker.js';
import { routeHeaders } from '../../../src/routing/route-headers.js';
import { fallbackWorkers, destinationList } from '../../../src/routing/fallback-endpoints.js';
import { fakeClock } from './pool-harness.js';

describe('dataParallelSizeOf / scheduledRanks', () => {
  it.each([
    [{ data_parallel_size: 4 }, 4],
    [{ data_parallel_size: '8' }, 8],
    [{ data_parallel_size: 1 }, 1],
    [{ data_parallel_size: 0 }, undefined],
    [{ data_parallel_size: 257 }, undefined],
    [{ data_parallel_size: 2.5 }, undefined],
    [{ data_parallel_size: 'four' }, undefined],
    [{}, undefined],
  ])('%j -> %s', (metadata, want) => {
    expect(dataParallelSizeOf(metadata)).toBe(want);
  });

  it('a server of more than one rank is split by rank; its metadata wins over the default', () => {
    expect(scheduledRanks({}, 4)).toBe(4);
    expect(scheduledRanks({ data_parallel_size: 2 }, 4)).toBe(2);
    expect(scheduledRanks({ data_parallel_size: 1 }, 4)).toBeUndefined();
    expect(scheduledRanks({}, 1)).toBeUndefined();
    expect(scheduledRanks({ data_parallel_size: 'x' }, 1)).toBeUndefined();
  });
});

function setup(dataParallelSize: number) {
  const clock = fakeClock();
  const registry = new ServiceRegistry({ ttlMs: 5000, clock: clock.read });
  const events: string[] = [];
  const pool = new WorkerPool('regular', createPolicy('cache_aware', {}), registry, {
    dataParallelSize,
    onAdded: (w) => events.push(`added ${w.key}`),
    onRemoved: (w, reason) => events.push(`${reason} ${w.key}`),
  });
  const add = (port: number, metadata?: Record<string, unknown>) =>
    registry.register({
      role: 'regular',
      url: `http://10.0.0.1:${port}`,
      endpoint: `10.0.0.1:${port}`,
      permanent: true,
      ...(metadata ? { metadata } : {}),
    });
  return { registry, pool, events, add };
}

const keys = (ws: readonly Worker[]) => ws.map((w) => w.key);

describe('WorkerPool with data-parallel servers', () => {
  it('schedules every rank of a server as its own Worker, in rank order, sharing its URL and endpoint', () => {
    const { pool, add } = setup(2);
    add(8000);
    add(8001, { data_parallel_size: 3 });
    pool.reconcile();
    expect(keys(pool.workers)).toEqual([
      'http://10.0.0.1:8000@0',
      'http://10.0.0.1:8000@1',
      'http://10.0.0.1:8001@0',
      'http://10.0.0.1:8001@1',
      'http://10.0.0.1:8001@2',
    ]);
    const [a, b] = pool.workers as [Worker, Worker];
    expect([a.url, b.url]).toEqual(['http://10.0.0.1:8000', 'http://10.0.0.1:8000']);
    expect([a.endpoint, b.endpoint]).toEqual(['10.0.0.1:8000', '10.0.0.1:8000']);
    expect([a.dpRank, b.dpRank]).toEqual([0, 1]);
    expect(a.id).not.toBe(b.id);
    // Each rank keeps its own load.
    a.load = 3;
    expect(b.load).toBe(0);
  });

  it('keeps the rank Workers across reconciles and replaces all of them on a new generation', () => {
    const { pool, add, registry, events } = setup(2);
    add(8000);
    pool.reconcile();
    const before = [...pool.workers];
    pool.reconcile();
    expect(pool.workers).toEqual(before);
    registry.deregister('regular', 'http://10.0.0.1:8000');
    add(8000);
    pool.reconcile();
    expect(pool.workers.every((w, i) => w !== before[i] && w.key === before[i]!.key)).toBe(true);
    expect(events).toEqual([
      'added http://10.0.0.1:8000@0',
      'added http://10.0.0.1:8000@1',
      'replaced http://10.0.0.1:8000@0',
      'added http://10.0.0.1:8000@0',
      'replaced http://10.0.0.1:8000@1',
      'added http://10.0.0.1:8000@1',
    ]);
  });

  it('a server that comes back with fewer ranks loses the ones it no longer has', () => {
    const { pool, add, registry, events } = setup(1);
    add(8000, { data_parallel_size: 3 });
    pool.reconcile();
    registry.register({
      role: 'regular',
      url: 'http://10.0.0.1:8000',
      endpoint: '10.0.0.1:8000',
      permanent: true,
      metadata: { data_parallel_size: 2 },
    });
    pool.reconcile();
    expect(keys(pool.workers)).toEqual(['http://10.0.0.1:8000@0', 'http://10.0.0.1:8000@1']);
    expect(events).toContain('departed http://10.0.0.1:8000@2');
  });

  it('a server of one rank stays one Worker keyed by its URL', () => {
    const { pool, add } = setup(1);
    add(8000);
    pool.reconcile();
    expect(keys(pool.workers)).toEqual(['http://10.0.0.1:8000']);
    expect(pool.workers[0]!.dpRank).toBeUndefined();
  });
});

describe('steering a request to a rank', () => {
  it('pins the rank with X-data-parallel-rank beside the destination', () => {
    const { pool, add } = setup(2);
    add(8000);
    add(8001, { data_parallel_size: 1 });
    pool.reconcile();
    const [r0, r1, plain] = pool.workers as [Worker, Worker, Worker];
    expect(routeHeaders(r1)).toEqual({
      'x-gateway-destination-endpoint': '10.0.0.1:8000',
      'x-data-parallel-rank': '1',
    });
    expect(routeHeaders(r0)).toMatchObject({ 'x-data-parallel-rank': '0' });
    expect(routeHeaders(plain)).toEqual({ 'x-gateway-destination-endpoint': '10.0.0.1:8001' });
  });

  it('never lists a fallback endpoint twice, nor the chosen one (ranks share their endpoint)', () => {
    const { pool, add } = setup(2);
    add(8000);
    add(8001);
    add(8002);
    pool.reconcile();
    const ws = pool.workers;
    const chosen = ws[0]!;
    const fallbacks = fallbackWorkers(ws, chosen, 3, ws[1]);
    expect(fallbacks.map((w) => w.endpoint)).toEqual(
      expect.arrayContaining(['10.0.0.1:8001', '10.0.0.1:8002']),
    );
    expect(fallbacks).toHaveLength(2);
    expect(destinationList(chosen, fallbacks).split(',')).toHaveLength(3);
  });
});
