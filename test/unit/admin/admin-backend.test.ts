import { describe, expect, it } from 'vitest';
import { createAdminBackend, type AdminBackendDeps } from '../../../src/admin/admin-backend.js';
import { AdminInputError } from '../../../src/admin/admin-server.js';
import { DrainFlag } from '../../../src/composition/lifecycle.js';
import { parseCidrList } from '../../../src/discovery/cidr.js';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { RouterMetrics } from '../../../src/observability/metrics.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { RolePools } from '../../../src/workers/role-pools.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';

function backend(overrides: Partial<AdminBackendDeps> = {}) {
  const registry = new ServiceRegistry({ clock: () => 0 });
  const pools = new RolePools((role) => new WorkerPool(role, createPolicy('round_robin'), registry));
  const metrics = new RouterMetrics({ workers: () => pools.members() });
  const drain = new DrainFlag();
  const resolved: string[] = [];
  const deps: AdminBackendDeps = {
    mode: 'regular',
    registry,
    pools,
    health: new WorkerHealth(),
    metrics,
    allow: parseCidrList([]),
    resolve: async (host, port) => {
      resolved.push(host);
      if (host.endsWith('.invalid')) throw new Error(`getaddrinfo ENOTFOUND ${host}`);
      return `10.0.0.9:${port}`;
    },
    clock: () => 0,
    drain,
    warmUp: { done: true, pending: () => [] },
    ...overrides,
  };
  return { api: createAdminBackend(deps), registry, metrics, drain, resolved };
}

async function rejection(p: Promise<unknown>): Promise<AdminInputError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AdminInputError);
  return err as AdminInputError;
}

const rejectedCount = async (metrics: RouterMetrics, reason: string): Promise<number> =>
  (await metrics.registry.getSingleMetric('vllm_router_discovery_rejected_total')?.get())?.values.find(
    (v) => v.labels.reason === reason,
  )?.value ?? 0;

describe('admin backend registration', () => {
  it('resolves a host name through the injected resolver and registers the ip:port', async () => {
    const { api, registry, resolved } = backend();
    const reply = await api.register({ role: 'regular', url: 'http://worker-a:8000' });
    expect(reply).toMatchObject({
      event: 'registered',
      url: 'http://worker-a:8000',
      endpoint: '10.0.0.9:8000',
    });
    expect(resolved).toEqual(['worker-a']);
    expect(registry.get('regular', 'http://worker-a:8000')?.endpoint).toBe('10.0.0.9:8000');
  });

  it('a name that does not resolve is 400 dns_failed, counted, nothing registered', async () => {
    const { api, registry, metrics } = backend();
    const e = await rejection(api.register({ role: 'regular', url: 'http://gone.invalid:8000' }));
    expect([e.status, e.code]).toEqual([400, 'dns_failed']);
    expect(registry.size('regular')).toBe(0);
    expect(await rejectedCount(metrics, 'dns_failed')).toBe(1);
  });

  it('an address outside the allow list is 403 worker_not_allowed, checked before any lookup', async () => {
    const { api, metrics, resolved } = backend({ allow: parseCidrList(['127.0.0.0/8']) });
    const e = await rejection(api.register({ role: 'regular', url: 'http://10.1.2.3:8000' }));
    expect([e.status, e.code]).toEqual([403, 'worker_not_allowed']);
    expect(resolved).toEqual([]);
    expect(await rejectedCount(metrics, 'not_allowed')).toBe(1);
  });

  it('an unparsable url is 400 invalid_registration', async () => {
    const { api } = backend();
    const e = await rejection(api.register({ role: 'regular', url: 'https://x:1' }));
    expect([e.status, e.code]).toEqual([400, 'invalid_registration']);
  });
});

describe('admin backend: a write while a registration resolves its host', () => {
  it('a DELETE answered while a heartbeat resolved stays deregistered: the worker does not come back', async () => {
    const answers: Array<() => void> = [];
    const { api, registry, metrics } = backend({
      resolve: (_host, port) => new Promise((done) => answers.push(() => done(`10.0.0.7:${port}`))),
    });
    const url = 'http://vllm-0.vllm:8000';
    // Registered once (its lookup answered), then a heartbeat still resolving when the DELETE comes.
    const first = api.register({ role: 'regular', url, permanent: true });
    answers[0]!();
    await first;
    const heartbeat = api.register({ role: 'regular', url, permanent: true });
    expect(answers).toHaveLength(2);
    expect(api.deregister('regular', url)).toBe(true);
    answers[1]!();
    const settled = heartbeat.then(
      () => undefined,
      (err: unknown) => err,
    );
    await settled;
    expect(registry.size('regular')).toBe(0);
    const e = await rejection(heartbeat);
    expect([e.status, e.code]).toEqual([409, 'registration_conflict']);
    expect(await rejectedCount(metrics, 'superseded')).toBe(1);
  });

  it('of two registrations of one worker, the later one is what stays, whichever lookup answers first', async () => {
    const answers: Array<() => void> = [];
    const { api, registry } = backend({
      resolve: (_host, port) => new Promise((done) => answers.push(() => done(`10.0.0.7:${port}`))),
    });
    const url = 'http://vllm-0.vllm:8000';
    const older = api.register({ role: 'regular', url, metadata: { tp_size: 1 } });
    const newer = api.register({ role: 'regular', url, metadata: { tp_size: 2 } });
    answers[1]!();
    await newer;
    answers[0]!();
    await older.catch(() => undefined);
    expect(registry.get('regular', url)?.metadata).toEqual({ tp_size: 2 });
    expect((await rejection(older)).code).toBe('registration_conflict');
  });
});

describe('admin backend readiness', () => {
  it('reads the registry and the one drain flag', async () => {
    const { api, drain } = backend();
    expect(api.readiness()).toEqual({
      ready: false,
      detail: { mode: 'regular', draining: false, workers: { regular: 0 } },
    });
    await api.register({ role: 'regular', url: 'http://127.0.0.1:8000' });
    expect(api.readiness().ready).toBe(true);
    drain.set();
    expect(api.readiness()).toEqual({
      ready: false,
      detail: { mode: 'regular', draining: true, workers: { regular: 1 } },
    });
  });

  it('pd mode needs both a prefill and a decode registration', async () => {
    const { api } = backend({ mode: 'pd' });
    await api.register({ role: 'prefill', url: 'http://127.0.0.1:8001' });
    expect(api.readiness().ready).toBe(false);
    await api.register({ role: 'decode', url: 'http://127.0.0.1:8002' });
    expect(api.readiness().ready).toBe(true);
  });
});
