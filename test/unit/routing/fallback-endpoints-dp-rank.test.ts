/**
 * a request routed to rank r of a data-parallel server carries `X-data-parallel-rank: r` to
 * every endpoint of its destination list (Envoy's retries keep the request's headers). A fallback
 * endpoint is any other server, also one with fewer ranks (per-server `data_parallel_size` metadata)
 * or a server of one rank: vLLM refuses a rank it does not have (400 out of range), so the failover
 * meant to save the request fails it.
 */
import { describe, expect, it } from 'vitest';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { fakeClock } from '../workers/pool-harness.js';

function completion(): RouteRequest {
  const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi' }));
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    body: raw,
    inference: parseInferenceRequest('completions', undefined, raw),
  };
}

describe('fallback endpoints of a data-parallel rank', () => {
  it('names only servers that have the rank the request is pinned to', () => {
    const clock = fakeClock();
    const registry = new ServiceRegistry({ ttlMs: 5000, clock: clock.read });
    const pool = new WorkerPool('regular', createPolicy('round_robin', {}), registry, {});
    registry.register({
      role: 'regular',
      url: 'http://10.0.0.1:8000',
      endpoint: '10.0.0.1:8000',
      permanent: true,
      metadata: { data_parallel_size: 4 },
    });
    registry.register({
      role: 'regular',
      url: 'http://10.0.0.2:8000',
      endpoint: '10.0.0.2:8000',
      permanent: true,
      metadata: { data_parallel_size: 2 },
    });
    registry.register({
      role: 'regular',
      url: 'http://10.0.0.3:8000',
      endpoint: '10.0.0.3:8000',
      permanent: true,
    });
    pool.reconcile();
    const ranksAt = new Map<string, Set<number>>();
    for (const w of pool.workers) {
      const s = ranksAt.get(w.endpoint) ?? new Set<number>();
      s.add(w.dpRank ?? 0);
      ranksAt.set(w.endpoint, s);
    }
    const dispatcher = new PoolDispatcher({
      pool,
      observer: {},
      clock: clock.read,
      decisionHeader: false,
      fallbackEndpoints: 2,
    });
    const ds: Dispatch[] = [];
    let pinned: Dispatch | undefined;
    for (let i = 0; i < pool.workers.length && pinned === undefined; i++) {
      const d = dispatcher.dispatch(completion());
      ds.push(d);
      if (d.worker.dpRank === 3) pinned = d;
    }
    expect(pinned).toBeDefined();
    const headers = pinned!.setHeaders;
    expect(headers['x-data-parallel-rank']).toBe('3');
    const endpoints = headers['x-gateway-destination-endpoint']!.split(',');
    expect(endpoints[0]).toBe('10.0.0.1:8000');
    // Every endpoint a retry may take must have an engine of rank 3.
    for (const e of endpoints)
      expect({ e, hasRank3: ranksAt.get(e)?.has(3) ?? false }).toEqual({ e, hasRank3: true });
    for (const d of ds) d.finish({ kind: 'response', status: 200 });
  });
});
