/**
 * A live re-registration that changes a port the Worker derives from its metadata (metrics_port,
 * kv_events_port, bootstrap_port) is acknowledged (registry updated, event 'heartbeat') but the pool
 * keeps the old Worker, immutable in those fields: the change is never applied to scraping / KV events /
 * Mooncake bootstrap.
 */
import { describe, expect, it } from 'vitest';
import { createAdminBackend } from '../../../src/admin/admin-backend.js';
import { DrainFlag } from '../../../src/composition/lifecycle.js';
import { parseCidrList } from '../../../src/discovery/cidr.js';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { RouterMetrics } from '../../../src/observability/metrics.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { RolePools } from '../../../src/workers/role-pools.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';

function setup(mode: 'regular' | 'pd' = 'regular') {
  const registry = new ServiceRegistry({ clock: () => 0 });
  const pools = new RolePools((role) => new WorkerPool(role, createPolicy('round_robin'), registry));
  registry.onChange(() => pools.reconcile());
  const metrics = new RouterMetrics({ workers: () => pools.members() });
  const api = createAdminBackend({
    mode,
    registry,
    pools,
    health: new WorkerHealth(),
    metrics,
    allow: parseCidrList([]),
    resolve: async (_host, port) => `10.0.0.9:${port}`,
    clock: () => 0,
    drain: new DrainFlag(),
    warmUp: { done: true, pending: () => [] },
  });
  return { api, registry, pools };
}

describe('admin re-registration with a changed metrics_port', () => {
  it('the worker is scraped on the new port', async () => {
    const { api, registry, pools } = setup();
    await api.register({ role: 'regular', url: 'http://w:8000', metadata: { metrics_port: 9100 } });
    expect(pools.workers()[0]!.metricsPort).toBe(9100);
    const reply = await api.register({
      role: 'regular',
      url: 'http://w:8000',
      metadata: { metrics_port: 9200 },
    });
    expect(registry.get('regular', 'http://w:8000')?.metadata).toEqual({ metrics_port: 9200 });
    // What the scraper (scrapeBase), /workers and the pool see:
    const [w] = pools.workers();
    expect(w!.metadata).toEqual({ metrics_port: 9200 });
    expect(w!.metricsPort).toBe(9200);
    expect(reply.event).not.toBe('heartbeat');
  });

  it('the same for a Mooncake bootstrap_port given as metadata', async () => {
    const { api, pools } = setup('pd');
    await api.register({ role: 'prefill', url: 'http://p:8000', metadata: { bootstrap_port: 8998 } });
    await api.register({ role: 'prefill', url: 'http://p:8000', metadata: { bootstrap_port: 9000 } });
    expect(pools.workers()[0]!.bootstrapPort).toBe(9000);
  });
});
