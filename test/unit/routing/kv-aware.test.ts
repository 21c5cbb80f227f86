import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { KvAwarePolicy } from '../../../src/routing/kv-aware.js';
import { KvPrefixSource } from '../../../src/kv-events/kv-prefix-source.js';
import { workerKey } from '../../../src/kv-events/kv-event-sources.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import type { WorkerSignals } from '../../../src/routing/cost-model.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorkers, route, storeBlocks, unstartedSubscriptions } from './fixtures.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const tokenizer = RequestTokenizer.load(new Map([['m', DIR]]));
const BS = 4;

/**
 * Real index, tokenizer and source; the publishers are never started (endpoints nobody binds: ZMQ
 * just retries), so the test applies decoded events to the index directly, as a subscriber would.
 */
/** `foreignShare`: the workers' share of load from elsewhere (0.5: a second replica sending as much). */
function fleet(n: number, publishing: number[], loads: number[] = [], foreignShare = 0) {
  const workers = makeWorkers(n, loads);
  const subs = unstartedSubscriptions(
    workers,
    publishing.map((i) => workers[i]!),
  );
  const source = new KvPrefixSource({ subscriptions: subs, tokenizer });
  const fallbacks: string[] = [];
  const policy = new KvAwarePolicy({
    exact: source,
    onFallback: (r) => fallbacks.push(r),
    foreignShare: () => foreignShare,
  });
  for (const w of workers) policy.addWorker(w);
  /** Worker i's engine stores the first `blocks` full blocks of `ids` (block 0 salted with `salt`). */
  const store = (i: number, ids: readonly number[], blocks: number, salt?: string): void => {
    storeBlocks(subs, workers, i, ids, blocks, BS, salt);
  };
  closers.push(() => subs.close());
  return { workers, subs, policy, store, fallbacks };
}
const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of closers) await c();
});

const prompt = 'You are a helpful assistant. Answer the question using the context below. '.repeat(4);
const ids = tokenizer.tokenize('m', { prompt }) as { ok: true; ids: number[] };

describe('kv_aware', () => {
  it('routes to the worker that holds the longest run of the prompt blocks (exact_hit)', () => {
    const { workers, policy, store } = fleet(3, [0, 1, 2]);
    const n = Math.floor(ids.ids.length / BS);
    store(0, ids.ids, 2);
    store(2, ids.ids, n);
    const d = policy.select(input(workers, { text: prompt, body: { prompt } }));
    expect(d).toMatchObject({ worker: workers[2], branch: 'exact_hit' });
    expect(d.matchRate).toBeCloseTo((n * BS) / ids.ids.length);
  });

  it('a worker that evicted the prefix loses it: the router follows the events, not its own history', () => {
    const { workers, policy, store, subs } = fleet(2, [0, 1]);
    store(0, ids.ids, 8);
    const sel = input(workers, { text: prompt, body: { prompt } });
    const first = route(policy, sel);
    expect(first.decision.worker).toBe(workers[0]);
    first.guard.release();
    subs.index.apply(`${workerKey(workers[0]!.url)}#0`, [{ type: 'cleared' }]);
    store(1, ids.ids, 8);
    expect(policy.select(input(workers, { text: prompt, body: { prompt } })).worker).toBe(workers[1]);
  });

  it("cache_salt: a salted request matches only blocks stored under its salt, as vLLM's hashes do", () => {
    const { workers, policy, store } = fleet(3, [0, 1, 2]);
    store(0, ids.ids, 8); // unsalted
    store(1, ids.ids, 8, 'tenant-a');
    store(2, ids.ids, 8, 'tenant-b');
    const salted = (salt: string) =>
      policy.select(input(workers, { text: prompt, body: { prompt, cache_salt: salt } })).worker;
    expect(salted('tenant-a')).toBe(workers[1]);
    expect(salted('tenant-b')).toBe(workers[2]);
    expect(policy.select(input(workers, { text: prompt, body: { prompt } })).worker).toBe(workers[0]);
  });

  it('nothing cached anywhere, a prompt shorter than the home key: least loaded (exact_miss)', () => {
    const { workers, policy } = fleet(3, [0, 1, 2], [2, 0, 1]);
    const short = 'Say hello to the new user, briefly.';
    expect(policy.select(input(workers, { text: short, body: { prompt: short } }))).toMatchObject({
      worker: workers[1],
      branch: 'exact_miss',
    });
  });

  it('a long prompt nobody holds: replicas whose loads differ agree on its home (exact_home)', () => {
    // Two replicas = two policies over the same workers (same URLs), each seeing other loads.
    const a = fleet(4, [0, 1, 2, 3], [0, 1, 2, 3], 0.5);
    const b = fleet(4, [0, 1, 2, 3], [3, 2, 1, 0], 0.5);
    const da = a.policy.select(input(a.workers, { text: prompt, body: { prompt } }));
    const db = b.policy.select(input(b.workers, { text: prompt, body: { prompt } }));
    expect(da.branch).toBe('exact_home');
    expect(db.branch).toBe('exact_home');
    expect(da.worker.url).toBe(db.worker.url);
    // Other prompts have other homes: the rule spreads prefixes, it does not pile them up.
    const homes = new Set<string>();
    for (let i = 0; i < 16; i++) {
      const text = `tenant ${i}: ${prompt}`;
      homes.add(a.policy.select(input(a.workers, { text, body: { prompt: text } })).worker.url);
    }
    expect(homes.size).toBeGreaterThan(1);
  });

  it('a home more than prefixHomeMargin requests above the least loaded is skipped; margin 0 is the reference rule', () => {
    const probe = fleet(3, [0, 1, 2]);
    const home = probe.policy.select(input(probe.workers, { text: prompt, body: { prompt } }));
    const h = probe.workers.indexOf(home.worker);
    // Only the least-loaded worker is within the margin (3): the home moves there.
    const loads = [0, 1, 2].map((i) => (i === (h + 1) % 3 ? 0 : 4));
    const busy = fleet(3, [0, 1, 2], loads, 0.5);
    expect(busy.policy.select(input(busy.workers, { text: prompt, body: { prompt } })).worker).toBe(
      busy.workers[(h + 1) % 3],
    );
    const workers = makeWorkers(3, [1, 0, 1]);
    const subs = unstartedSubscriptions(workers, workers);
    closers.push(() => subs.close());
    const off = new KvAwarePolicy({
      exact: new KvPrefixSource({ subscriptions: subs, tokenizer }),
      cacheAware: { prefixHomeMargin: 0 },
    });
    expect(off.select(input(workers, { text: prompt, body: { prompt } }))).toMatchObject({
      worker: workers[1],
      branch: 'exact_miss',
    });
  });

  it('a lone router keeps the whole margin: its concurrent requests for a new prefix stay together before any event', () => {
    // kv_aware marks no pending blocks: the home is what groups the requests that arrive before the
    // first one's blocks are published (long-prompt: every question of a document at once).
    const probe = fleet(3, [0, 1, 2]);
    const h = probe.workers.indexOf(
      probe.policy.select(input(probe.workers, { text: prompt, body: { prompt } })).worker,
    );
    const loads = [0, 1, 2].map((i) => (i === h ? 2 : 0)); // two earlier questions routed there
    for (const foreign of [0, 0.5]) {
      const f = fleet(3, [0, 1, 2], loads, foreign);
      expect(f.policy.select(input(f.workers, { text: prompt, body: { prompt } }))).toMatchObject({
        worker: f.workers[h],
        branch: 'exact_home',
      });
    }
  });

  it("without events the cache_aware fallback's prefix home also knows whether another router shares the workers", () => {
    const doc = 'Shared contract, clause by clause, for the fallback to place. '.repeat(26); // ~400 tokens
    const probe = makeWorkers(3);
    const h = probe.indexOf(new KvAwarePolicy().select(input(probe, { text: doc })).worker);
    // 4 requests in flight on the home: 20 ms of decode term against a 20 ms prefill. Within the shared
    // margin (3 prefills), beyond the alone one (half a prefill).
    const loads = [0, 1, 2].map((i) => (i === h ? 4 : 0));
    const pick = (foreign: number) => {
      const workers = makeWorkers(3, loads);
      return workers.indexOf(
        new KvAwarePolicy({ foreignShare: () => foreign }).select(input(workers, { text: doc })).worker,
      );
    };
    expect(pick(0)).not.toBe(h);
    expect(pick(0.5)).toBe(h);
  });

  it('a routed prompt is not counted as held before its events (the reference rule would pile onto it)', () => {
    const workers = makeWorkers(3);
    const subs = unstartedSubscriptions(workers, workers);
    closers.push(() => subs.close());
    const source = new KvPrefixSource({ subscriptions: subs, tokenizer, blockSize: BS, pendingTtlMs: 3000 });
    const policy = new KvAwarePolicy({ exact: source, cacheAware: { prefixHomeMargin: 0 } });
    const first = route(policy, input(workers, { text: prompt, body: { prompt } }));
    const next = route(policy, input(workers, { text: prompt, body: { prompt } }));
    // Nothing published yet: the second request goes to the least loaded, not to the first one's worker.
    expect(next.decision).toMatchObject({ branch: 'exact_miss' });
    expect(next.decision.worker).not.toBe(first.decision.worker);
    first.guard.release();
    next.guard.release();
    for (const w of workers) expect(w.load).toBe(0);
  });

  it('an overloaded holder yields (imbalance), with cache_aware thresholds', () => {
    const { workers, policy, store } = fleet(2, [0, 1], [200, 0]);
    store(0, ids.ids, 8);
    expect(policy.select(input(workers, { text: prompt, body: { prompt } })).branch).toBe('imbalance');
  });

  it('a request it cannot tokenize falls back to the approximate tree, counted in routed()', () => {
    const { workers, policy, fallbacks } = fleet(2, [0, 1]);
    const sel = input(workers, {
      model: 'unknown-model',
      text: prompt,
      body: { model: 'unknown-model', prompt },
    });
    const a = route(policy, sel);
    expect(a.decision.branch).toBe('low_match'); // cache_aware's own branch
    expect(fallbacks).toEqual(['no_tokenizer']);
    a.guard.release();
    // The tree learned the prefix, so the fallback still has affinity.
    const again = policy.select(
      input(workers, { model: 'unknown-model', text: prompt, body: { model: 'unknown-model', prompt } }),
    );
    expect(again).toMatchObject({ worker: a.decision.worker, branch: 'cache_hit' });
  });

  it('workers without events use the tree; no publisher among candidates is a fallback', () => {
    const { workers, policy, fallbacks } = fleet(2, []);
    const a = route(policy, input(workers, { text: prompt, body: { prompt } }));
    expect(a.decision.branch).toBe('low_match');
    expect(fallbacks).toEqual(['no_publisher']);
  });

  it('without an exact source it is cache_aware', () => {
    const workers = makeWorkers(2);
    const policy = new KvAwarePolicy();
    for (const w of workers) policy.addWorker(w);
    expect(policy.select(input(workers, { text: prompt })).branch).toBe('low_match');
  });
});

describe('kv_aware maintenance', () => {
  it('trims the fallback tree on the cache_aware eviction interval', () => {
    const policy = new KvAwarePolicy({ cacheAware: { evictionIntervalMs: 5000 } });
    expect(policy.maintenanceIntervalMs).toBe(5000);
  });
});

describe("kv_aware's cache_aware fallback (no exact answer)", () => {
  it('reads the scraped load the pool gives cache_aware: a worker busy with direct traffic is avoided', () => {
    const [busy, idle] = makeWorkers(2) as [Worker, Worker];
    const priors = new TimingEstimates();
    // As the composition root builds a pool's policy: its load signals (busy's queue only its scrape shows).
    const signals: WorkerSignals = {
      load: (w) =>
        w === busy
          ? { source: 'scraped', ahead: 12, waiting: 4, waitingElsewhere: 4, ageMs: 10 }
          : { source: 'scraped', ahead: 0, waiting: 0, waitingElsewhere: 0, ageMs: 10 },
      timing: (w) => priors.of(w),
    };
    // No KV events configured for these workers.
    const policy = createPolicy('kv_aware', { cacheAwareDeps: { role: 'regular', signals } });
    for (const w of [busy, idle]) policy.addWorker?.(w);
    for (let i = 0; i < 4; i++) {
      const { decision, guard } = route(policy, input([busy, idle], { text: `question ${i}` }));
      expect(decision.worker).toBe(idle);
      guard.release();
    }
    expect([busy.load, idle.load]).toEqual([0, 0]);
  });
});
