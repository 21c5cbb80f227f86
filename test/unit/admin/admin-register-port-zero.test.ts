/**
 * POST /workers {url: "http://w:0"} is accepted (200, registered, selectable) with endpoint `ip:0`,
 * which Envoy can never dial: every request routed there fails until the breaker opens, and the health
 * checks keep probing port 0. parseWorkerUrl (config.ts) takes any port WHATWG URL accepts, 0 included;
 * the ZMQ path (registration-message.ts parseHostPort) rejects it as bad_address.
 */
import { describe, expect, it } from 'vitest';
import { createAdminBackend } from '../../../src/admin/admin-backend.js';
import { AdminInputError } from '../../../src/admin/admin-server.js';
import { DrainFlag } from '../../../src/composition/lifecycle.js';
import { parseCidrList } from '../../../src/discovery/cidr.js';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { RouterMetrics } from '../../../src/observability/metrics.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { RolePools } from '../../../src/workers/role-pools.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';

describe('admin registration of port 0', () => {
  it('is a 400 invalid_registration, nothing registered', async () => {
    const registry = new ServiceRegistry({ clock: () => 0 });
    const pools = new RolePools((role) => new WorkerPool(role, createPolicy('round_robin'), registry));
    const api = createAdminBackend({
      mode: 'regular',
      registry,
      pools,
      health: new WorkerHealth(),
      metrics: new RouterMetrics({ workers: () => pools.members() }),
      allow: parseCidrList([]),
      resolve: async (_host, port) => `10.0.0.9:${port}`,
      clock: () => 0,
      drain: new DrainFlag(),
      warmUp: { done: true, pending: () => [] },
    });
    const err = await api.register({ role: 'regular', url: 'http://w:0' }).then(
      (ok) => ok,
      (e: unknown) => e,
    );
    expect(registry.size('regular')).toBe(0);
    expect(err).toBeInstanceOf(AdminInputError);
    expect((err as AdminInputError).status).toBe(400);
  });
});
