import { describe, expect, it } from 'vitest';
import {
  CacheAwarePolicy,
  DEFAULT_CACHE_AWARE_OPTIONS,
  resolveCacheAwareOptions,
  type CacheAwareOptions,
} from '../../../src/routing/cache-aware.js';
import type { Worker } from '../../../src/workers/worker.js';
import { counts, input, makeWorker, makeWorkers, route } from './fixtures.js';

const PROMPT = 'system: you are a helpful assistant. user: summarise the attached report, please.';

/** The reference router's rules (`per_request`) unless a test names another mode. */
function policyWith(workers: readonly Worker[], options: Partial<CacheAwareOptions> = {}): CacheAwarePolicy {
  const policy = new CacheAwarePolicy({ mode: 'per_request', ...options });
  for (const w of workers) policy.addWorker(w);
  return policy;
}

/** Makes `owner` hold `text` (routing it there directly, as a past decision did). */
function seed(policy: CacheAwarePolicy, owner: Worker, text: string, nowMs = 1, model = 'm'): void {
  policy.routed({ worker: owner, branch: 'seed' }, input([owner], { text, model }), nowMs);
}

/** 80 cold prompts: each starts with a different code unit, so none shares a prefix with another. */
const coldTexts = Array.from(
  { length: 80 },
  (_, i) => `${String.fromCharCode(0x4e00 + i)} question number ${i}`,
);

describe('cache_aware options', () => {
  it('defaults to the cost model, with the reference CLI values for the reference modes', () => {
    expect(new CacheAwarePolicy().options).toEqual({
      cacheThreshold: 0.3,
      balanceAbsThreshold: 64,
      balanceRelThreshold: 1.5,
      evictionIntervalMs: 120_000,
      maxTreeSize: 2 ** 26,
      mode: 'cost',
      maxModels: 256,
      cacheReports: true,
      cacheFillOwnShare: true,
      overloadWaiting: 8,
      overloadKvUsage: 0.9,
      charsPerToken: 4,
      costBalanceRel: 1.5,
      costBalanceAbs: 8,
      costIdleQueue: 2,
      costDecodeWeight: 0.25,
      costRecomputeWeight: 1,
      prefixHomeMargin: 3,
      prefixHomeMarginAlone: 0.5,
      prefixHomeMarginExact: 1,
      prefixHomeKeyChars: 256,
      loraLoadMs: 50,
    });
    expect(resolveCacheAwareOptions({ cacheThreshold: undefined })).toEqual(DEFAULT_CACHE_AWARE_OPTIONS);
  });

  it.each([
    { cacheThreshold: 1.5 },
    { cacheThreshold: Number.NaN },
    { loraLoadMs: -1 },
    { balanceAbsThreshold: -1 },
    { balanceRelThreshold: Infinity },
    { evictionIntervalMs: 0 },
    { maxTreeSize: -5 },
    { mode: 'fleet' as CacheAwareOptions['mode'] },
    { overloadWaiting: -1 },
    { overloadKvUsage: Number.NaN },
    { charsPerToken: 0 },
    { prefixHomeMargin: -0.5 },
    { prefixHomeMarginAlone: Number.NaN },
    { prefixHomeMarginExact: -1 },
    { prefixHomeKeyChars: 0 },
    { prefixHomeKeyChars: 12.5 },
  ])('rejects %j', (bad) => {
    expect(() => new CacheAwarePolicy(bad)).toThrow(RangeError);
  });
});

describe('cache_aware per_request', () => {
  it('follows the prefix owner (cache_hit) and reports the match rate', () => {
    const workers = makeWorkers(4);
    const policy = policyWith(workers);
    const first = route(policy, input(workers, { text: PROMPT }), 1);
    expect(first.decision).toEqual({ worker: workers[0], branch: 'low_match', matchRate: 0 });
    first.guard.release();
    // w0 has now processed 1 request, so a cold choice would avoid it; the cache owner wins.
    const again = policy.select(input(workers, { text: `${PROMPT} And the appendix.` }));
    expect(again.worker).toBe(workers[0]);
    expect(again.branch).toBe('cache_hit');
    expect(again.matchRate).toBeCloseTo(PROMPT.length / (PROMPT.length + 18));
  });

  it.each([
    {
      name: 'exactly at the threshold is low_match',
      cached: 'abc',
      text: 'abcdefghij',
      branch: 'low_match',
      rate: 0.3,
    },
    {
      name: 'above the threshold is cache_hit',
      cached: 'abcd',
      text: 'abcdefghij',
      branch: 'cache_hit',
      rate: 0.4,
    },
    { name: 'empty text', cached: 'abcd', text: '', branch: 'low_match', rate: 0 },
  ])('$name', ({ cached, text, branch, rate }) => {
    const workers = makeWorkers(3, [0, 0, 0]);
    workers[0]!.processed = 5; // a cold choice goes to w1
    const policy = policyWith(workers);
    seed(policy, workers[0]!, cached);
    const d = policy.select(input(workers, { text }));
    expect(d.branch).toBe(branch);
    expect(d.matchRate).toBeCloseTo(rate);
    expect(d.worker).toBe(branch === 'cache_hit' ? workers[0] : workers[1]);
  });

  it('takes the least loaded of several holders of the longest match', () => {
    const workers = makeWorkers(4, [5, 3, 0, 0]);
    const policy = policyWith(workers);
    seed(policy, workers[0]!, PROMPT, 1);
    seed(policy, workers[1]!, PROMPT, 2);
    const d = policy.select(input(workers, { text: PROMPT }));
    expect(d).toEqual({ worker: workers[1], branch: 'cache_hit', matchRate: 1 });
  });

  // Yield iff owner load > mean * 1.5 AND owner load > mean + 64 (mean over the candidates).
  it.each([
    { name: 'hot owner, idle fleet (8 workers)', loads: [100, 0, 0, 0, 0, 0, 0, 0], branch: 'imbalance' },
    { name: '2 workers, 200 vs 0: mean 100', loads: [200, 0], branch: 'imbalance' },
    { name: 'rel exceeded, abs not: 65 vs 0', loads: [65, 0], branch: 'cache_hit' },
    { name: 'abs exceeded, rel not: 280 vs mean 200', loads: [280, 160, 160], branch: 'cache_hit' },
    { name: 'everyone busy alike', loads: [70, 60, 60, 60], branch: 'cache_hit' },
  ])('an overloaded cache owner yields: $name -> $branch', ({ loads, branch }) => {
    const workers = makeWorkers(loads.length, loads);
    const policy = policyWith(workers);
    seed(policy, workers[0]!, PROMPT);
    const d = policy.select(input(workers, { text: PROMPT }));
    expect(d.branch).toBe(branch);
    expect(d.matchRate).toBe(1);
    expect(d.worker).toBe(branch === 'imbalance' ? workers[1] : workers[0]);
  });

  it.each([{ release: false }, { release: true }])(
    'spreads equal-load cold traffic fairly (80 over 8, release=$release)',
    ({ release }) => {
      const workers = makeWorkers(8);
      const policy = policyWith(workers);
      const ids = coldTexts.map((text, i) => {
        const { decision, guard } = route(policy, input(workers, { text }), i);
        expect(decision.branch).toBe('low_match');
        if (release) guard.release();
        return decision.worker.id;
      });
      expect([...counts(ids).values()]).toEqual(Array(8).fill(10));
    },
  );

  it('select() is pure: no tree writes until routed()', () => {
    const workers = makeWorkers(2);
    const policy = policyWith(workers);
    for (let i = 0; i < 3; i++) policy.select(input(workers, { text: PROMPT }));
    expect(policy.models()).toEqual([]);
    expect([...policy.treeChars().values()]).toEqual([0, 0]);
    route(policy, input(workers, { text: PROMPT }));
    expect(policy.treeChars().get(workers[0]!.id)).toBe(PROMPT.length);
  });

  it('keeps one tree per model', () => {
    const workers = makeWorkers(2);
    const policy = policyWith(workers);
    seed(policy, workers[1]!, PROMPT, 1, 'model-a');
    expect(policy.select(input(workers, { text: PROMPT, model: 'model-a' })).branch).toBe('cache_hit');
    expect(policy.select(input(workers, { text: PROMPT, model: 'model-b' })).branch).toBe('low_match');
    expect(policy.models()).toEqual(['model-a']);
  });
});

describe('cache_aware membership (seed regressions)', () => {
  it('initialises cache state for added workers, including ones added after the tree exists', () => {
    const workers = makeWorkers(3);
    const policy = policyWith(workers.slice(0, 2));
    expect(policy.treeChars()).toEqual(new Map(workers.slice(0, 2).map((w) => [w.id, 0])));
    route(policy, input(workers.slice(0, 2), { text: PROMPT }));
    expect(policy.treeTenants('m')).toEqual([workers[0]!.id, workers[1]!.id]);
    policy.addWorker(workers[2]!);
    expect(policy.treeTenants('m')).toContain(workers[2]!.id);
    expect(policy.treeChars().get(workers[2]!.id)).toBe(0);
    // The first request to the discovered worker is recorded, so affinity works right away.
    const d = route(policy, input([workers[2]!], { text: 'another prompt for the new worker' })).decision;
    expect(d.worker).toBe(workers[2]);
    expect(policy.select(input(workers, { text: 'another prompt for the new worker' }))).toMatchObject({
      worker: workers[2],
      branch: 'cache_hit',
    });
  });

  it('removes stale affinity on removeWorker', () => {
    const workers = makeWorkers(2);
    const policy = policyWith(workers);
    seed(policy, workers[0]!, PROMPT);
    policy.removeWorker(workers[0]!);
    expect(policy.treeChars().has(workers[0]!.id)).toBe(false);
    expect(policy.treeTenants('m')).toEqual([workers[1]!.id]);
    const d = policy.select(input(workers, { text: PROMPT }));
    expect(d).toEqual({ worker: workers[0], branch: 'low_match', matchRate: 0 });
  });

  it("forgets what a worker held when its cache is cleared (vLLM's sleep), and keeps it a member", () => {
    const workers = makeWorkers(2);
    const policy = policyWith(workers);
    seed(policy, workers[0]!, PROMPT);
    seed(policy, workers[1]!, PROMPT.slice(0, 40), 2);
    policy.cacheCleared(workers[0]!);
    expect(policy.treeChars()).toEqual(
      new Map([
        [workers[0]!.id, 0],
        [workers[1]!.id, 40],
      ]),
    );
    expect(policy.treeTenants('m').sort()).toEqual(workers.map((w) => w.id).sort());
    // The longest match is now the other worker's.
    const d = policy.select(input(workers, { text: PROMPT }));
    expect(d.worker).toBe(workers[1]);
    expect(d.matchRate).toBeCloseTo(40 / PROMPT.length);
    policy.cacheCleared(makeWorker(7)); // not a member: nothing happens
    expect(policy.treeTenants('m')).toHaveLength(2);
  });

  it('removes stale affinity of a generation-replaced worker (new Worker id at the same URL)', () => {
    const old = makeWorker(0, 1);
    const other = makeWorker(1, 1);
    const policy = policyWith([old, other]);
    seed(policy, old, PROMPT);
    const reborn = makeWorker(0, 2);
    expect(reborn.url).toBe(old.url);
    policy.removeWorker(old);
    policy.addWorker(reborn);
    other.processed = 1; // a cold choice goes to reborn: make sure it is not a cache_hit
    const d = policy.select(input([reborn, other], { text: PROMPT }));
    expect(d).toEqual({ worker: reborn, branch: 'low_match', matchRate: 0 });
    expect([...policy.treeChars().keys()].sort()).toEqual([other.id, reborn.id].sort());
    expect(policy.treeChars().get(reborn.id)).toBe(0);
  });

  it('ignores the cache of workers that are not candidates (unhealthy)', () => {
    const [owner, unhealthy, idle] = makeWorkers(3, [10, 0, 10]) as [Worker, Worker, Worker];
    unhealthy.healthy = false;
    const policy = policyWith([owner, unhealthy, idle]);
    seed(policy, owner, PROMPT.slice(0, 60), 1);
    seed(policy, unhealthy, PROMPT, 2); // a longer match, on a worker the pool filtered out
    const d = policy.select(input([owner, idle], { text: PROMPT }));
    expect(d.worker).toBe(owner);
    expect(d.branch).toBe('cache_hit');
    expect(d.matchRate).toBeCloseTo(60 / PROMPT.length);
  });

  it('unhealthy workers do not skew the imbalance test (per_request: mean over candidates)', () => {
    const [owner, peer, down1, down2] = makeWorkers(4, [200, 140, 0, 0]) as [Worker, Worker, Worker, Worker];
    down1.healthy = false;
    down2.healthy = false;
    const policy = policyWith([owner, peer, down1, down2]);
    seed(policy, owner, PROMPT);
    // Candidates only: mean 170, 200 <= 255 -> affinity holds.
    expect(policy.select(input([owner, peer], { text: PROMPT })).branch).toBe('cache_hit');
    // Counting the idle unhealthy workers would drag the mean to 85 and force a yield: the policy
    // computes the mean over exactly the candidates it is given, which the pool filters.
    expect(policy.select(input([owner, peer, down1, down2], { text: PROMPT })).branch).toBe('imbalance');
  });
});

describe('cache_aware global mode', () => {
  it('is gated by max - min > abs AND max > min * rel over the candidates', () => {
    const [a, b, unhealthy] = makeWorkers(3, [100, 90, 0]) as [Worker, Worker, Worker];
    const policy = policyWith([a, b, unhealthy], { mode: 'global' });
    seed(policy, a, PROMPT);
    // Candidates a (100) and b (90): balanced, so affinity holds.
    expect(policy.select(input([a, b], { text: PROMPT }))).toEqual({
      worker: a,
      branch: 'cache_hit',
      matchRate: 1,
    });
    // Had the unhealthy idle worker been counted (min 0), the fleet would look imbalanced (the
    // reference's #254): that is exactly what the candidate-only gate avoids.
    expect(policy.select(input([a, b, unhealthy], { text: PROMPT })).branch).toBe('imbalance');
  });

  it.each([
    { name: 'imbalanced fleet -> least loaded', loads: [100, 20, 0], want: 2, branch: 'imbalance' },
    { name: 'gap <= abs', loads: [200, 150, 140], want: 1, branch: 'cache_hit' },
    { name: 'gap > abs but max <= min * rel', loads: [300, 200, 200], want: 1, branch: 'cache_hit' },
  ])('$name', ({ loads, want, branch }) => {
    const workers = makeWorkers(loads.length, loads);
    const policy = policyWith(workers, { mode: 'global' });
    seed(policy, workers[0]!, PROMPT, 1);
    seed(policy, workers[1]!, PROMPT, 2); // w1 is the most recently used holder
    const d = policy.select(input(workers, { text: PROMPT }));
    expect(d).toEqual({ worker: workers[want], branch, matchRate: 1 });
  });

  it('routes cold traffic to the least loaded (low_match)', () => {
    const workers = makeWorkers(3, [1, 0, 1]);
    const policy = policyWith(workers, { mode: 'global' });
    expect(policy.select(input(workers, { text: PROMPT }))).toEqual({
      worker: workers[1],
      branch: 'low_match',
      matchRate: 0,
    });
  });
});

describe('cache_aware maintenance', () => {
  it("keeps each worker's picture within its scraped KV-cache capacity, least recently used first", () => {
    const workers = makeWorkers(2);
    // Worker 0 caches 100 tokens (400 chars at 4 chars per token); worker 1's capacity is unknown.
    const policy = new CacheAwarePolicy(
      { mode: 'per_request' },
      { capacityTokens: (w) => (w === workers[0] ? 100 : undefined) },
    );
    for (const w of workers) policy.addWorker(w);
    const doc = (c: string) => c.repeat(300);
    seed(policy, workers[0]!, doc('a'), 1);
    seed(policy, workers[0]!, doc('b'), 2); // 600 chars > 400: the older document goes
    seed(policy, workers[1]!, doc('a'), 3);
    seed(policy, workers[1]!, doc('b'), 4);
    expect(policy.treeChars().get(workers[0]!.id)).toBeLessThanOrEqual(400);
    expect(policy.treeChars().get(workers[1]!.id)).toBe(600);
    // Only worker 1 still holds 'a'; both hold 'b'.
    const a = policy.select(input(workers, { text: doc('a') }));
    expect(a).toMatchObject({ worker: workers[1], branch: 'cache_hit' });
  });

  it("keeps a worker's picture within its one KV cache over all its adapters and models, least recently used first", () => {
    // vLLM has one KV cache per engine: its adapters' prefixes (each adapter a model name, a tree
    // here) share its blocks and evict each other (vllm/v1/core/kv_cache_utils.py keys a block by
    // the adapter's name, in one block pool). Worker 0 caches 100 tokens (400 chars at 4 a token).
    const workers = makeWorkers(2);
    const policy = new CacheAwarePolicy(
      { mode: 'per_request' },
      { capacityTokens: (w) => (w === workers[0] ? 100 : undefined) },
    );
    for (const w of workers) policy.addWorker(w);
    const doc = (c: string) => c.repeat(300);
    seed(policy, workers[0]!, doc('a'), 1, 'lora-1');
    seed(policy, workers[0]!, doc('b'), 2, 'lora-2'); // 600 chars > 400: lora-1's document goes
    seed(policy, workers[0]!, doc('c'), 3, 'base'); // and then lora-2's
    expect(policy.treeChars().get(workers[0]!.id)).toBeLessThanOrEqual(400);
    const held = (text: string, model: string) =>
      policy.select({ ...input(workers, { text }), model }).branch === 'cache_hit';
    expect(held(doc('a'), 'lora-1')).toBe(false);
    expect(held(doc('b'), 'lora-2')).toBe(false);
    expect(held(doc('c'), 'base')).toBe(true);
  });

  it("sizes a worker's picture by the model's learned characters per token (load/chars-per-token.ts)", () => {
    const workers = makeWorkers(2);
    // Both workers cache 250 tokens. The configured ratio (4) reads that as 1,000 characters: two
    // 300-char documents fit. The ratio learned for `small-vocab` (1.8) reads it as 450: one fits.
    const ratios: Record<string, number> = { 'small-vocab': 1.8 };
    const policy = new CacheAwarePolicy(
      { mode: 'per_request' },
      { capacityTokens: () => 250, charsPerToken: (model) => ratios[model] ?? 4 },
    );
    for (const w of workers) policy.addWorker(w);
    const doc = (c: string) => c.repeat(300);
    for (const model of ['small-vocab', 'english']) {
      seed(policy, workers[0]!, doc('a'), 1, model);
      seed(policy, workers[0]!, doc('b'), 2, model);
    }
    const holds = (model: string) =>
      policy.select({ ...input(workers, { text: doc('a') }), model }).branch === 'cache_hit';
    expect(holds('english')).toBe(true);
    expect(holds('small-vocab')).toBe(false); // 'a' was evicted from the picture, as from the worker
  });

  it("the cost mode counts a prompt's tokens, and a holder's cached tokens, with the learned ratio", () => {
    const workers = makeWorkers(2);
    const policy = new CacheAwarePolicy({}, { charsPerToken: () => 2 });
    for (const w of workers) policy.addWorker(w);
    seed(policy, workers[0]!, 'x'.repeat(600));
    const d = policy.select(input(workers, { text: 'x'.repeat(1000) }));
    expect(d.cost?.promptTokens).toBe(500);
    expect(d.cost?.maxCachedTokens).toBe(300);
  });

  it('evicts every tenant down to maxTreeSize and drops empty trees', () => {
    const workers = makeWorkers(2);
    const policy = policyWith(workers, { maxTreeSize: 40 });
    for (let i = 0; i < 5; i++) seed(policy, workers[i % 2]!, `${i} prompt text that is thirty chars`, i);
    seed(policy, workers[0]!, 'short', 9, 'tiny-model');
    const evicted = policy.maintain(1000);
    expect(evicted).toBeGreaterThan(0);
    for (const chars of policy.treeChars().values()) expect(chars).toBeLessThanOrEqual(40 + 5);
    // The most recent prompt of each worker survives.
    expect(policy.select(input(workers, { text: '4 prompt text that is thirty chars' })).branch).toBe(
      'cache_hit',
    );

    const small = policyWith(workers, { maxTreeSize: 0 });
    seed(small, workers[0]!, PROMPT);
    small.maintain(0);
    expect(small.models()).toEqual([]);
    expect(small.treeChars().get(workers[0]!.id)).toBe(0);
  });
});

describe('cache_aware model trees are bounded', () => {
  it('drops the least recently routed model tree beyond maxModels', async () => {
    const { CacheAwarePolicy } = await import('../../../src/routing/cache-aware.js');
    const { Worker } = await import('../../../src/workers/worker.js');
    const w = new Worker({
      role: 'regular',
      url: 'http://127.0.0.1:1',
      endpoint: '127.0.0.1:1',
      generation: 1,
    });
    const policy = new CacheAwarePolicy({ maxModels: 2 });
    policy.addWorker(w);
    const route = (model: string) => {
      const input = { workers: [w], model, text: `prompt for ${model}`, headers: {} };
      policy.routed(policy.select(input), input, 0);
    };
    route('a');
    route('b');
    route('a'); // a is now the most recent
    route('c'); // evicts b
    expect(policy.models().sort()).toEqual(['a', 'c']);
  });

  it("holds each worker's picture to maxTreeSize over all its model trees (clients naming many models)", () => {
    // A client may name any model: each new name is a tree of its own (up to maxModels), and the
    // request is routed (and its prompt recorded) before the worker answers 404. --max-tree-size is
    // the characters kept per worker; a tree each must not multiply it by the models named.
    const workers = makeWorkers(2);
    const policy = policyWith(workers, { maxTreeSize: 1000 });
    const prompt = (i: number) => `${i} ${'x'.repeat(300)}`;
    for (let i = 0; i < 200; i++) seed(policy, workers[i % 2]!, prompt(i), i, `model-${i}`);
    policy.maintain(1000);
    for (const chars of policy.treeChars().values()) expect(chars).toBeLessThanOrEqual(1000);
    expect(policy.models().length).toBeLessThanOrEqual(2 * Math.ceil(1000 / prompt(199).length));
    // The models routed last keep their prompts.
    for (const i of [198, 199]) {
      const d = policy.select(input(workers, { text: prompt(i), model: `model-${i}` }));
      expect(d).toMatchObject({ branch: 'cache_hit', worker: workers[i % 2] });
    }
  });
});
