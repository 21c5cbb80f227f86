/**
 * Shared setup for the persistent-pool tests: a real ServiceRegistry on a fake clock, role pools with
 * real policies from createPolicy, and the selector's choose/reserve exactly as the dispatchers run
 * them (reconcile -> choose -> reserve in one synchronous step).
 */
import {
  ServiceRegistry,
  type RegisterResult,
  type RegistryEntry,
} from '../../../src/discovery/service-registry.js';
import { createPolicy, type CreatePolicyOptions } from '../../../src/routing/create-policy.js';
import type { PolicyName } from '../../../src/routing/policy.js';
import { choose, reserve, type Reservation, type RoutingContext } from '../../../src/routing/selector.js';
import type { Role } from '../../../src/workers/role.js';
import type { Worker } from '../../../src/workers/worker.js';
import { WorkerPool, type MemberSource } from '../../../src/workers/worker-pool.js';
import { ModelCatalog } from '../../../src/workers/served-models.js';

export const TTL_MS = 5000;

export interface FakeClock {
  now: number;
  advance(ms: number): void;
  read(): number;
}

export function fakeClock(start = 1000): FakeClock {
  const clock: FakeClock = {
    now: start,
    advance(ms) {
      clock.now += ms;
    },
    read: () => clock.now,
  };
  return clock;
}

export interface PoolEvent {
  kind: 'added' | 'departed' | 'replaced';
  worker: Worker;
}

export interface Harness {
  clock: FakeClock;
  registry: ServiceRegistry;
  events: PoolEvent[];
  pool(role: Role, policy: PolicyName, opts?: CreatePolicyOptions, source?: MemberSource): WorkerPool;
}

export function harness(ttlMs = TTL_MS): Harness {
  const clock = fakeClock();
  const registry = new ServiceRegistry({ ttlMs, clock: clock.read });
  const events: PoolEvent[] = [];
  return {
    clock,
    registry,
    events,
    pool: (role, policy, opts = {}, source = registry) =>
      new WorkerPool(role, createPolicy(policy, opts), source, {
        onAdded: (worker) => events.push({ kind: 'added', worker }),
        onRemoved: (worker, reason) => events.push({ kind: reason, worker }),
      }),
  };
}

/** `http://10.0.0.<host>:<port>`, endpoint `10.0.0.<host>:<port>`. */
export function urlOf(port: number, host = 1): { url: string; endpoint: string } {
  return { url: `http://10.0.0.${host}:${port}`, endpoint: `10.0.0.${host}:${port}` };
}

export function register(
  registry: ServiceRegistry,
  role: Role,
  port: number,
  extra: { zmqAddress?: string; host?: number; endpoint?: string } = {},
): RegistryEntry {
  const { url, endpoint } = urlOf(port, extra.host);
  const result: RegisterResult = registry.register({
    role,
    url,
    endpoint: extra.endpoint ?? endpoint,
    ...(extra.zmqAddress !== undefined ? { zmqAddress: extra.zmqAddress } : {}),
  });
  if ('rejected' in result) throw new Error(`registration rejected: ${result.rejected}`);
  return result.entry;
}

export const ctx = (text = '', model = 'm'): RoutingContext => ({ model, text, headers: {} });

/** One routing step as the dispatchers do it: reconcile, choose, reserve. Undefined when nothing is selectable. */
export function route(pool: WorkerPool, c: RoutingContext, nowMs: number): Reservation | undefined {
  pool.reconcile();
  const chosen = choose(pool, c);
  if (chosen === undefined) return undefined;
  return reserve(pool, chosen, {}, nowMs);
}

export function mustRoute(pool: WorkerPool, c: RoutingContext, nowMs: number): Reservation {
  const r = route(pool, c, nowMs);
  if (r === undefined) throw new Error(`pool ${pool.role} had no candidate`);
  return r;
}

/** A registry view that serves the live snapshot in a caller-chosen order (a new array every call). */
export function reorderedSource(
  registry: ServiceRegistry,
  order: (entries: readonly RegistryEntry[]) => RegistryEntry[],
): MemberSource {
  return { snapshot: (role) => order(registry.snapshot(role)) };
}

export function workerByUrl(pool: WorkerPool, url: string): Worker {
  const w = pool.workers.find((x) => x.url === url);
  if (w === undefined) throw new Error(`no worker ${url} in the ${pool.role} pool`);
  return w;
}

/** cache_aware's read-only stats, when the pool's policy has them. */
export function treeIds(pool: WorkerPool): string[] {
  const policy = pool.policy as { treeChars?: () => Map<string, number> };
  return [...(policy.treeChars?.().keys() ?? [])].sort();
}

/**
 * A round-robin pool of `role` workers on `ports` whose served models come from `catalog`, each
 * labelled `label(port)` (as its scraped metrics would name its model).
 */
export function servingPool(
  h: Harness,
  ports: readonly number[],
  label: (port: number) => string | undefined,
  catalog = new ModelCatalog(),
  role: Role = 'regular',
): WorkerPool {
  for (const p of ports) register(h.registry, role, p);
  const pool = new WorkerPool(role, createPolicy('round_robin', {}), h.registry, {
    models: {
      get version() {
        return catalog.version;
      },
      of: (w) => catalog.of(w.url),
    },
  });
  pool.reconcile();
  for (const w of pool.workers) catalog.recordLabel(w.url, label(Number(new URL(w.url).port)));
  return pool;
}
