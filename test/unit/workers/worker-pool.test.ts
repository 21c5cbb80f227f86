/**
 * The seed's discovery regression list (design sections 1-4) against the real pieces: a
 * ServiceRegistry on a fake clock, persistent WorkerPools, real policies from createPolicy, and the
 * selector's choose/reserve. Time moves only through the fake clock.
 */
import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import type { Policy, PolicyName } from '../../../src/routing/policy.js';
import { choose, reserve } from '../../../src/routing/selector.js';
import type { LoadGuard } from '../../../src/workers/load-guard.js';
import type { Worker } from '../../../src/workers/worker.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import {
  TTL_MS,
  ctx,
  harness,
  mustRoute,
  register,
  reorderedSource,
  route,
  treeIds,
  urlOf,
  workerByUrl,
} from './pool-harness.js';
import { seededRandom as seeded } from '../../../src/util/seeded-random.js';

const ALL_POLICIES: readonly PolicyName[] = [
  'round_robin',
  'random',
  'power_of_two',
  'least_load',
  'consistent_hash',
  'cache_aware',
];

const PORTS = [8000, 8001, 8002, 8003];

function releaseAll(guards: LoadGuard[]): void {
  for (const g of guards.splice(0)) g.release();
}

describe('persistent identity across selections', () => {
  it.each(ALL_POLICIES)(
    '%s: the same Worker objects serve every selection; load and processed survive',
    (name) => {
      const h = harness();
      for (const p of PORTS) register(h.registry, 'regular', p);
      const pool = h.pool('regular', name, { rng: seeded(7) });
      pool.reconcile();
      const first = [...pool.workers];
      expect(first).toHaveLength(PORTS.length);

      const held: LoadGuard[] = [];
      const perWorker = new Map<Worker, number>();
      for (let i = 0; i < 24; i++) {
        if (i % 6 === 5) {
          // Heartbeats well inside the TTL: same generation, so the same Workers must stay.
          h.clock.advance(TTL_MS / 2);
          for (const p of PORTS) register(h.registry, 'regular', p);
        }
        const r = mustRoute(pool, ctx(`request number ${i} with some text`), h.clock.now);
        expect(first).toContain(r.decision.worker);
        expect(r.guard.worker).toBe(r.decision.worker);
        perWorker.set(r.guard.worker, (perWorker.get(r.guard.worker) ?? 0) + 1);
        held.push(r.guard);
        if (i % 2 === 1) held.shift()?.release();
      }

      pool.reconcile();
      expect(pool.workers).toHaveLength(first.length);
      pool.workers.forEach((w, i) => expect(w).toBe(first[i]));
      const stillHeld = new Map<Worker, number>();
      for (const g of held) stillHeld.set(g.worker, (stillHeld.get(g.worker) ?? 0) + 1);
      for (const w of first) {
        expect(w.load).toBe(stillHeld.get(w) ?? 0);
        expect(w.processed).toBe((perWorker.get(w) ?? 0) - (stillHeld.get(w) ?? 0));
      }
      releaseAll(held);
      for (const w of first) expect(w.load).toBe(0);
      expect(first.reduce((n, w) => n + w.processed, 0)).toBe(24);
      expect(h.events.map((e) => e.kind)).toEqual(PORTS.map(() => 'added'));
    },
  );

  it('keeps health state on the persistent Worker across reconciles and heartbeats', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'round_robin');
    pool.reconcile();
    const sick = workerByUrl(pool, urlOf(8000).url);
    sick.healthy = false;
    h.clock.advance(TTL_MS - 1);
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    for (let i = 0; i < 4; i++) {
      const r = mustRoute(pool, ctx(), h.clock.now);
      expect(r.decision.worker.url).toBe(urlOf(8001).url);
      r.guard.release();
    }
    expect(workerByUrl(pool, urlOf(8000).url)).toBe(sick);
    expect(sick.healthy).toBe(false);
  });
});

describe('role separation at identical URLs', () => {
  it.each(['least_load', 'cache_aware', 'round_robin'] as const)(
    '%s: a prefill and a decode pool over the same url hold different Workers with independent load',
    (name) => {
      const h = harness();
      register(h.registry, 'prefill', 8000, { zmqAddress: '10.0.0.1:18000' });
      register(h.registry, 'decode', 8000, { zmqAddress: '10.0.0.1:18000' });
      const prefill = h.pool('prefill', name);
      const decode = h.pool('decode', name);
      prefill.reconcile();
      decode.reconcile();
      const [p] = prefill.workers;
      const [d] = decode.workers;
      expect(p).toBeDefined();
      expect(d).toBeDefined();
      expect(p).not.toBe(d);
      expect(p?.url).toBe(d?.url);
      expect(p?.id).not.toBe(d?.id);
      expect([p?.role, d?.role]).toEqual(['prefill', 'decode']);

      const rp = mustRoute(prefill, ctx('a shared prompt for both phases'), h.clock.now);
      expect(rp.guard.worker).toBe(p);
      expect([p?.load, d?.load]).toEqual([1, 0]);
      const rd = mustRoute(decode, ctx('a shared prompt for both phases'), h.clock.now);
      expect(rd.guard.worker).toBe(d);
      expect([p?.load, d?.load]).toEqual([1, 1]);
      rp.guard.release();
      expect([p?.load, d?.load, p?.processed, d?.processed]).toEqual([0, 1, 1, 0]);
      rd.guard.release();
      expect([p?.load, d?.load, p?.processed, d?.processed]).toEqual([0, 0, 1, 1]);
      // Policy state is per pool: the prefill tree never names the decode Worker and vice versa.
      if (name === 'cache_aware') {
        expect(treeIds(prefill)).toEqual([p?.id]);
        expect(treeIds(decode)).toEqual([d?.id]);
      }
    },
  );

  it('expiry of one role leaves the other role at the same url untouched', () => {
    const h = harness();
    register(h.registry, 'prefill', 8000);
    register(h.registry, 'decode', 8000);
    const prefill = h.pool('prefill', 'least_load');
    const decode = h.pool('decode', 'least_load');
    prefill.reconcile();
    decode.reconcile();
    const p = prefill.workers[0];
    h.clock.advance(TTL_MS - 1);
    register(h.registry, 'prefill', 8000); // only prefill heartbeats
    h.clock.advance(2);
    prefill.reconcile();
    decode.reconcile();
    expect(prefill.workers).toEqual([p]);
    expect(prefill.workers[0]).toBe(p);
    expect(decode.size).toBe(0);
  });
});

describe('changed snapshot order keeps endpoint/worker pairing', () => {
  it.each(ALL_POLICIES)('%s: the chosen endpoint is always the endpoint of the guarded Worker', (name) => {
    const h = harness();
    // Endpoints deliberately unlike the urls, so a mix-up between positions would show.
    PORTS.forEach((p, i) => register(h.registry, 'regular', p, { endpoint: `10.9.9.${i + 1}:${9000 + i}` }));
    let call = 0;
    const source = reorderedSource(h.registry, (entries) => {
      // A different order on every call: rotate, and reverse every other time.
      const k = call++ % entries.length;
      const rotated = [...entries.slice(k), ...entries.slice(0, k)];
      return call % 2 === 0 ? rotated.reverse() : rotated;
    });
    const pool = h.pool('regular', name, { rng: seeded(3) }, source);
    pool.reconcile();
    const identities = new Map(pool.workers.map((w) => [w.url, w]));

    const held: LoadGuard[] = [];
    for (let i = 0; i < 40; i++) {
      const r = mustRoute(pool, ctx(`prompt ${i % 5} shared prefix text`), h.clock.now);
      const w = r.guard.worker;
      expect(r.decision.worker).toBe(w);
      expect(identities.get(w.url)).toBe(w);
      expect(w.endpoint).toBe(h.registry.get('regular', w.url)?.endpoint);
      held.push(r.guard);
      // Loads are those of the guards actually held on each Worker, whatever the order.
      for (const x of identities.values()) {
        expect(x.load).toBe(held.filter((g) => g.worker === x && !g.isReleased).length);
      }
      if (i % 3 === 2) held.find((g) => !g.isReleased)?.release();
    }
    releaseAll(held);
    expect([...identities.values()].map((w) => w.load)).toEqual(PORTS.map(() => 0));
    expect(h.events.every((e) => e.kind === 'added')).toBe(true);
  });
});

describe('outstanding load on one worker steers the next selection', () => {
  it('least_load: every held guard pushes the next request elsewhere; a release pulls it back', () => {
    const h = harness();
    for (const p of PORTS.slice(0, 3)) register(h.registry, 'regular', p);
    const pool = h.pool('regular', 'least_load');
    const guards = [0, 1, 2].map(() => mustRoute(pool, ctx(), h.clock.now).guard);
    expect(new Set(guards.map((g) => g.worker)).size).toBe(3);
    guards[1]?.release();
    const next = mustRoute(pool, ctx(), h.clock.now);
    expect(next.guard.worker).toBe(guards[1]?.worker);
    releaseAll([...guards, next.guard]);
  });

  it('power_of_two: a loaded worker loses every two-way comparison', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'power_of_two', { rng: seeded(11) });
    const busy = mustRoute(pool, ctx(), h.clock.now);
    for (let i = 0; i < 10; i++) {
      const r = mustRoute(pool, ctx(), h.clock.now);
      expect(r.guard.worker).not.toBe(busy.guard.worker);
      r.guard.release();
    }
    busy.guard.release();
  });

  it('cache_aware: different prompts spread by live load (low_match)', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'cache_aware');
    const a = mustRoute(pool, ctx('alpha: the first conversation'), h.clock.now);
    const b = mustRoute(pool, ctx('zulu: an unrelated conversation'), h.clock.now);
    expect(b.decision.branch).toBe('low_match');
    expect(b.guard.worker).not.toBe(a.guard.worker);
    releaseAll([a.guard, b.guard]);
  });

  it('cache_aware: affinity yields once the owner carries real outstanding load (the PR 299 bug)', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'cache_aware', {
      cacheAware: { mode: 'per_request', balanceAbsThreshold: 4, balanceRelThreshold: 1.5 },
    });
    const prompt = 'You are a helpful assistant. Summarise the following document for me please.';
    const held: LoadGuard[] = [];
    const first = mustRoute(pool, ctx(prompt), h.clock.now);
    held.push(first.guard);
    const owner = first.guard.worker;
    let escaped: ReturnType<typeof mustRoute> | undefined;
    for (let i = 0; i < 50 && escaped === undefined; i++) {
      h.clock.advance(1);
      const r = mustRoute(pool, ctx(prompt), h.clock.now);
      held.push(r.guard);
      if (r.decision.branch === 'cache_hit') expect(r.guard.worker).toBe(owner);
      else escaped = r;
    }
    expect(escaped?.decision.branch).toBe('imbalance');
    expect(escaped?.guard.worker).not.toBe(owner);
    // The escape was driven by the owner's persistent, live load (> mean + 4 with 2 workers).
    expect(owner.load).toBeGreaterThan(8);
    releaseAll(held);
    expect(pool.workers.map((w) => w.load)).toEqual([0, 0]);
    const after = mustRoute(pool, ctx(prompt), h.clock.now);
    expect(after.decision.branch).toBe('cache_hit');
    after.guard.release();
  });

  it.each(['least_load', 'cache_aware'] as const)(
    '%s: equal-load cold traffic does not keep preferring the first snapshot entry',
    (name) => {
      const h = harness();
      for (const p of PORTS) register(h.registry, 'regular', p);
      const pool = h.pool('regular', name);
      const picks = new Map<string, number>();
      for (let i = 0; i < 8; i++) {
        // Distinct first characters: no prefix overlap, so cache_aware stays on low_match.
        const r = mustRoute(pool, ctx(`${String.fromCharCode(65 + i)} cold request`), h.clock.now);
        picks.set(r.guard.worker.url, (picks.get(r.guard.worker.url) ?? 0) + 1);
        r.guard.release();
      }
      expect([...picks.values()]).toEqual([2, 2, 2, 2]);
    },
  );
});

describe('membership follows the registry', () => {
  it('an empty snapshot removes every Worker and its cache_aware state', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'cache_aware');
    const a = mustRoute(pool, ctx('alpha prompt with a body'), h.clock.now);
    const b = mustRoute(pool, ctx('zulu prompt with a body'), h.clock.now);
    const ids = pool.workers.map((w) => w.id).sort();
    expect(treeIds(pool)).toEqual(ids);
    expect((pool.policy as CacheAwarePolicy).treeTenants('m').sort()).toEqual(ids);

    h.clock.advance(TTL_MS); // no heartbeat: both expire (no cleanup pass needed)
    pool.reconcile();
    expect(pool.size).toBe(0);
    expect(pool.workers).toEqual([]);
    expect(treeIds(pool)).toEqual([]);
    expect((pool.policy as CacheAwarePolicy).treeTenants('m')).toEqual([]);
    expect(
      h.events
        .filter((e) => e.kind === 'departed')
        .map((e) => e.worker.id)
        .sort(),
    ).toEqual(ids);
    expect(route(pool, ctx('alpha prompt with a body'), h.clock.now)).toBeUndefined();

    // Late releases of the departed Workers touch only those objects.
    releaseAll([a.guard, b.guard]);
    expect([a.guard.worker.load, b.guard.worker.load]).toEqual([0, 0]);
    expect(treeIds(pool)).toEqual([]);
  });

  it('a deregistration removes the Worker and its policy membership at the next reconcile', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    register(h.registry, 'regular', 8001);
    const pool = h.pool('regular', 'cache_aware');
    pool.reconcile();
    const gone = workerByUrl(pool, urlOf(8000).url);
    expect(h.registry.deregister('regular', urlOf(8000).url)).toBe(true);
    pool.reconcile();
    expect(pool.workers.map((w) => w.url)).toEqual([urlOf(8001).url]);
    expect(treeIds(pool)).not.toContain(gone.id);
    expect(h.events.at(-1)).toEqual({ kind: 'departed', worker: gone });
  });

  it('reconciling the same snapshot twice changes nothing', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    const pool = h.pool('regular', 'round_robin');
    pool.reconcile();
    const before = [...pool.workers];
    pool.reconcile();
    pool.reconcile();
    expect(pool.workers).toEqual(before);
    expect(h.events).toHaveLength(1);
  });
});

describe('registration generations', () => {
  it('heartbeats keep the generation and the Worker', () => {
    const h = harness();
    const first = register(h.registry, 'decode', 8000, { zmqAddress: '10.0.0.1:18000' });
    const pool = h.pool('decode', 'cache_aware');
    pool.reconcile();
    const w = pool.workers[0];
    for (let i = 0; i < 10; i++) {
      h.clock.advance(TTL_MS - 1); // always inside the previous lifetime
      const r = h.registry.register({ ...urlOf(8000), role: 'decode', zmqAddress: '10.0.0.1:18000' });
      expect(r).toMatchObject({ event: 'heartbeat', entry: { generation: first.generation } });
      pool.reconcile();
      expect(pool.workers).toHaveLength(1);
      expect(pool.workers[0]).toBe(w);
    }
    expect(h.registry.cleanup()).toEqual([]);
    expect(h.events.map((e) => e.kind)).toEqual(['added']);
  });

  it('same-url re-registration after expiry and cleanup gets a fresh Worker and a new generation', () => {
    const h = harness();
    const old = register(h.registry, 'regular', 8000);
    const pool = h.pool('regular', 'least_load');
    const held = mustRoute(pool, ctx(), h.clock.now);
    mustRoute(pool, ctx(), h.clock.now).guard.release();
    const stale = held.guard.worker;
    stale.healthy = false;
    expect([stale.load, stale.processed]).toEqual([1, 1]);

    h.clock.advance(TTL_MS);
    expect(h.registry.cleanup().map((e) => e.generation)).toEqual([old.generation]);
    pool.reconcile();
    expect(pool.size).toBe(0);

    const result = h.registry.register({ role: 'regular', ...urlOf(8000) });
    expect(result).toMatchObject({ event: 'registered' });
    const fresh = 'entry' in result ? result.entry : undefined;
    expect(fresh?.generation).toBeGreaterThan(old.generation);
    pool.reconcile();
    const w = pool.workers[0] as Worker;
    expect(w).not.toBe(stale);
    expect(w.generation).toBe(fresh?.generation);
    expect([w.load, w.processed, w.healthy]).toEqual([0, 0, true]);
    held.guard.release();
    expect([w.load, w.processed]).toEqual([0, 0]);
    expect([stale.load, stale.processed]).toEqual([0, 2]);
  });

  it('expiry then same-url registration gets a new generation even before any cleanup', () => {
    const h = harness();
    const old = register(h.registry, 'prefill', 8000);
    h.clock.advance(TTL_MS); // expiresAtMs <= now: expired, still in the table
    const result = h.registry.register({ role: 'prefill', ...urlOf(8000) });
    expect(result).toMatchObject({ event: 'replaced' });
    const entry = 'entry' in result ? result.entry : undefined;
    expect(entry?.generation).toBeGreaterThan(old.generation);
    // Nothing expired is left for the cleanup pass: the new lifetime overwrote the old entry.
    expect(h.registry.cleanup()).toEqual([]);
    expect(h.registry.snapshot('prefill').map((e) => e.generation)).toEqual([entry?.generation]);
  });

  it.each(['cache_aware', 'round_robin', 'consistent_hash'] as const)(
    '%s: generation replacement without an intermediate empty snapshot swaps Worker and policy membership',
    (name) => {
      const h = harness();
      register(h.registry, 'regular', 8000);
      register(h.registry, 'regular', 8001);
      const pool = h.pool('regular', name);
      const guards = [0, 1, 2, 3].map((i) => mustRoute(pool, ctx(`prompt ${i} text`), h.clock.now).guard);
      const old = workerByUrl(pool, urlOf(8000).url);
      const keep = workerByUrl(pool, urlOf(8001).url);

      h.clock.advance(TTL_MS - 1);
      register(h.registry, 'regular', 8001); // heartbeat
      h.clock.advance(1); // 8000 expires exactly now
      register(h.registry, 'regular', 8000); // new lifetime; the pool never saw 8000 missing
      pool.reconcile();

      const successor = workerByUrl(pool, urlOf(8000).url);
      expect(successor).not.toBe(old);
      expect(successor.generation).toBeGreaterThan(old.generation);
      expect(workerByUrl(pool, urlOf(8001).url)).toBe(keep);
      expect(h.events.slice(2).map((e) => [e.kind, e.worker])).toEqual([
        ['replaced', old],
        ['added', successor],
      ]);
      if (name === 'cache_aware') {
        expect(treeIds(pool)).toEqual([keep.id, successor.id].sort());
        expect(treeIds(pool)).not.toContain(old.id);
      }
      releaseAll(guards);
      expect([successor.load, successor.processed, old.load, keep.load]).toEqual([0, 0, 0, 0]);
    },
  );

  it('an endpoint change on a heartbeat is a new lifetime: fresh Worker, the new endpoint is dialled', () => {
    const h = harness();
    register(h.registry, 'regular', 8000, { endpoint: '10.0.0.1:8000' });
    const pool = h.pool('regular', 'least_load');
    const held = mustRoute(pool, ctx(), h.clock.now);
    register(h.registry, 'regular', 8000, { endpoint: '10.0.0.2:8000' }); // DNS moved, still live
    const r = mustRoute(pool, ctx(), h.clock.now);
    expect(r.guard.worker).not.toBe(held.guard.worker);
    expect(r.guard.worker.endpoint).toBe('10.0.0.2:8000');
    expect(r.guard.worker.load).toBe(1);
    releaseAll([held.guard, r.guard]);
  });
});

describe('in-flight release on a replaced worker', () => {
  it.each(['least_load', 'cache_aware', 'power_of_two'] as const)(
    '%s: releasing the old generation guard does not touch its successor',
    (name) => {
      const h = harness();
      register(h.registry, 'decode', 8000);
      const pool = h.pool('decode', name, { rng: seeded(5) });
      const inflight = mustRoute(pool, ctx('a long streaming decode'), h.clock.now);
      const old = inflight.guard.worker;
      expect(old.load).toBe(1);

      h.clock.advance(TTL_MS);
      register(h.registry, 'decode', 8000);
      pool.reconcile();
      const successor = pool.workers[0] as Worker;
      expect(successor).not.toBe(old);
      expect([successor.load, successor.processed]).toEqual([0, 0]);

      inflight.guard.release();
      expect([old.load, old.processed]).toEqual([0, 1]);
      expect([successor.load, successor.processed]).toEqual([0, 0]);
      expect(inflight.guard.release()).toBe(false); // idempotent: a second end path is a no-op
      expect([old.load, successor.load]).toEqual([0, 0]);
      if (name === 'cache_aware') expect(treeIds(pool)).toEqual([successor.id]);

      const next = mustRoute(pool, ctx('a long streaming decode'), h.clock.now);
      expect(next.guard.worker).toBe(successor);
      next.guard.release();
      expect([successor.load, successor.processed, old.processed]).toEqual([0, 1, 1]);
    },
  );
});

/** A policy wrapper that counts every call into the policy. */
function counting(policy: Policy): { policy: Policy; calls: string[] } {
  const calls: string[] = [];
  const wrapped: Policy = {
    name: policy.name,
    select: (input) => (calls.push('select'), policy.select(input)),
    routed: (d, input, now) => (calls.push('routed'), policy.routed?.(d, input, now)),
    addWorker: (w) => (calls.push('addWorker'), policy.addWorker?.(w)),
    removeWorker: (w) => (calls.push('removeWorker'), policy.removeWorker?.(w)),
  };
  return { policy: wrapped, calls };
}

describe('what a pool hands its policy', () => {
  it("a request's max_tokens reaches regular and decode pools, not a prefill pool (its leg makes one token)", () => {
    const h = harness();
    for (const role of ['prefill', 'decode', 'regular'] as const) register(h.registry, role, 8000);
    const seen = new Map<string, number | undefined>();
    const spy = (): Policy => {
      const inner = new CacheAwarePolicy();
      return {
        name: inner.name,
        select: (input) => (seen.set(input.workers[0]!.role, input.outputTokens), inner.select(input)),
      };
    };
    for (const role of ['prefill', 'decode', 'regular'] as const) {
      const pool = new WorkerPool(role, spy(), h.registry);
      pool.reconcile();
      expect(choose(pool, { ...ctx('a prompt'), outputTokens: 128 })).toBeDefined();
    }
    expect(Object.fromEntries(seen)).toEqual({ prefill: undefined, decode: 128, regular: 128 });
  });
});

describe('a request that needs an empty pool', () => {
  it('creates no Worker, guard or policy state', () => {
    const h = harness();
    register(h.registry, 'prefill', 8000); // another role has members; decode has none
    const inner = new CacheAwarePolicy();
    const { policy, calls } = counting(inner);
    const decode = new WorkerPool('decode', policy, h.registry);
    decode.reconcile();
    const chosen = choose(decode, ctx('nobody will serve this prompt'));
    expect(chosen).toBeUndefined();
    expect(decode.size).toBe(0);
    expect(calls).toEqual([]);
    expect(inner.treeChars().size).toBe(0);
    expect(inner.models()).toEqual([]);
  });

  it('a pool whose members are all unhealthy chooses nothing and records nothing', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    const inner = new CacheAwarePolicy();
    const { policy, calls } = counting(inner);
    const pool = new WorkerPool('regular', policy, h.registry);
    pool.reconcile();
    const w = pool.workers[0] as Worker;
    w.healthy = false;
    expect(choose(pool, ctx('prompt'))).toBeUndefined();
    expect(calls).toEqual(['addWorker']);
    expect([w.load, w.processed]).toEqual([0, 0]);
    expect(inner.models()).toEqual([]);
  });
});

const url = (w: Worker): string => w.url;

describe('candidates', () => {
  it('hands out the same array until membership or health changes (no allocation per request)', () => {
    const h = harness();
    for (const port of PORTS) register(h.registry, 'regular', port);
    const pool = h.pool('regular', 'least_load');
    pool.reconcile();
    const all = pool.candidates();
    expect(all).toBe(pool.workers);
    const [a, b] = pool.workers as Worker[];
    (b as Worker).healthy = false;
    const some = pool.candidates();
    expect(some.map(url)).toEqual(pool.workers.filter((w) => w !== b).map(url));
    expect(pool.candidates()).toBe(some); // unhealthy worker: still one array, reused
    (a as Worker).healthy = false;
    const fewer = pool.candidates();
    expect(fewer).not.toBe(some);
    expect(fewer.map(url)).toEqual(pool.workers.filter((w) => w !== a && w !== b).map(url));
    expect(pool.candidates()).toBe(fewer);
    (a as Worker).healthy = true;
    (b as Worker).healthy = true;
    expect(pool.candidates()).toEqual(pool.workers);
    // A member that departs changes the candidates even when everyone is healthy.
    h.registry.deregister('regular', (pool.workers[3] as Worker).url);
    pool.reconcile();
    expect(pool.candidates().map(url)).toEqual(pool.workers.map(url));
    expect(pool.candidates()).toHaveLength(3);
  });
});

describe('selector', () => {
  it('reserve takes the guard on the chosen Worker, records the choice; the guard releases once', () => {
    const h = harness();
    register(h.registry, 'regular', 8000);
    const pool = h.pool('regular', 'cache_aware');
    pool.reconcile();
    const chosen = choose(pool, ctx('observe me'));
    expect(chosen).toBeDefined();
    if (chosen === undefined) return;
    const decided: string[] = [];
    const r = reserve(
      pool,
      chosen,
      { decided: (p, d) => decided.push(`${p.role}:${d.branch}`) },
      h.clock.now,
    );
    expect(r.guard.worker).toBe(chosen.decision.worker);
    expect(r.pool).toBe(pool);
    expect(decided).toEqual(['regular:low_match']);
    expect(treeIds(pool)).toEqual([chosen.decision.worker.id]);
    expect((pool.policy as CacheAwarePolicy).treeChars().get(chosen.decision.worker.id)).toBe(
      'observe me'.length,
    );
    expect(chosen.decision.worker.load).toBe(1);
    expect(r.guard.release()).toBe(true);
    expect(r.guard.release()).toBe(false);
    expect([chosen.decision.worker.load, chosen.decision.worker.processed]).toEqual([0, 1]);
  });
});

describe('paused engines (Worker.paused: POST /pause forwarded by the router)', () => {
  it('are left out while others are not paused, the same array each time; all paused: all stay', () => {
    const h = harness();
    for (const p of PORTS) register(h.registry, 'regular', p);
    const pool = h.pool('regular', 'round_robin');
    pool.reconcile();
    const all = pool.candidatesFor('m');
    expect(all).toBe(pool.candidates());
    const [a, b, c, d] = pool.workers as [Worker, Worker, Worker, Worker];

    a.paused = true;
    const rest = pool.candidatesFor('m');
    expect(rest).toEqual([b, c, d]);
    expect(pool.candidatesFor('m')).toBe(rest); // memoized while the answer holds
    b.paused = true;
    expect(pool.candidatesFor('m')).toEqual([c, d]);
    const picks = Array.from({ length: 6 }, () => {
      const r = mustRoute(pool, ctx(), 0);
      r.guard.release();
      return r.decision.worker.url;
    });
    expect(new Set(picks)).toEqual(new Set([c.url, d.url]));

    c.paused = true;
    d.paused = true;
    expect(pool.candidatesFor('m')).toBe(all); // a request waits on a paused engine, as sent directly
    for (const w of pool.workers) w.paused = false;
    expect(pool.candidatesFor('m')).toBe(all);
  });
});
