import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy, type CacheAwareOptions } from '../../../src/routing/cache-aware.js';
import type { WorkerSignals } from '../../../src/routing/cost-model.js';
import type { PrefixSource } from '../../../src/routing/prefix-source.js';
import {
  homeApplies,
  homeKeyHash,
  homeMargin,
  keyHolders,
  prefixHome,
  rendezvousWeight,
  DEFAULT_PREFIX_HOME_OPTIONS,
  type HomeCandidate,
} from '../../../src/routing/prefix-home.js';
import type { LoadView } from '../../../src/load/load-board.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorkers, seededRng } from './fixtures.js';

const LABELS = Array.from({ length: 8 }, (_, i) => `http://10.0.0.1:${8000 + i}`);

/** The label with the highest weight for `key` among `labels` (what every replica computes). */
function heaviest(key: number, labels: readonly string[]): string {
  return [...labels].sort((a, b) => rendezvousWeight(key, b) - rendezvousWeight(key, a))[0]!;
}

describe('prefixHome (rendezvous over the candidates within the margin)', () => {
  const key = homeKeyHash('group 7 system: the river and the bridge', 256);
  const home = LABELS.indexOf(heaviest(key, LABELS));
  const second = LABELS.indexOf(
    heaviest(
      key,
      LABELS.filter((_, i) => i !== home),
    ),
  );
  const all = (over: (i: number) => Partial<HomeCandidate> = () => ({})): HomeCandidate[] =>
    LABELS.map((label, i) => ({ label, eligible: true, scoreMs: 100, ...over(i) }));

  it.each([
    { name: 'every candidate tied: the heaviest label', cands: all(), best: 100, margin: 10, want: home },
    {
      name: 'the home costs less than the margin more: still the home',
      cands: all((i) => (i === home ? { scoreMs: 109 } : {})),
      best: 100,
      margin: 10,
      want: home,
    },
    {
      name: 'the home costs more than the margin: the next heaviest',
      cands: all((i) => (i === home ? { scoreMs: 111 } : {})),
      best: 100,
      margin: 10,
      want: second,
    },
    {
      name: 'the home is filtered (overload, imbalance band): the next heaviest',
      cands: all((i) => (i === home ? { eligible: false, scoreMs: 50 } : {})),
      best: 100,
      margin: 10,
      want: second,
    },
    {
      name: 'margin 0: only the candidates tied with the best',
      cands: all((i) => (i === second ? {} : { scoreMs: 101 })),
      best: 100,
      margin: 0,
      want: second,
    },
    {
      name: 'nothing eligible: no home (the caller keeps its choice)',
      cands: all(() => ({ eligible: false })),
      best: 100,
      margin: 10,
      want: undefined,
    },
  ])('$name', ({ cands, best, margin, want }) => {
    expect(prefixHome(key, cands, best, margin)).toBe(want);
  });

  it('weights depend on the label, not on the candidates order', () => {
    const reversed = [...LABELS].reverse();
    expect(heaviest(key, reversed)).toBe(LABELS[home]);
    const cands = reversed.map((label) => ({ label, eligible: true, scoreMs: 0 }));
    expect(reversed[prefixHome(key, cands, 0, 0)!]).toBe(LABELS[home]);
  });
});

describe('homeApplies', () => {
  const o = DEFAULT_PREFIX_HOME_OPTIONS; // margin 3, key 256 chars
  it.each([
    { name: 'the picked worker holds none of the prompt', chars: 8000, cached: 0, opts: o, want: true },
    {
      name: 'it holds a common opening shorter than the key',
      chars: 8000,
      cached: 10,
      opts: o,
      want: true,
    },
    { name: 'it holds the key: the cost model decides', chars: 8000, cached: 64, opts: o, want: false },
    { name: 'prompt shorter than the key', chars: 255, cached: 0, opts: o, want: false },
    {
      name: 'two holders (a widely shared opening): off',
      chars: 8000,
      cached: 0,
      holders: 2,
      opts: o,
      want: false,
    },
    { name: 'one holder, busy: a spill, on', chars: 8000, cached: 0, holders: 1, opts: o, want: true },
    { name: 'margin 0 turns it off', chars: 8000, cached: 0, opts: { ...o, margin: 0 }, want: false },
    {
      name: 'a batch of 8 holding a 16-token opening of each (128 summed): not its key',
      chars: 8000,
      cached: 128,
      prompts: 8,
      opts: o,
      want: true,
    },
    {
      name: 'a batch holding the key of each prompt',
      chars: 8000,
      cached: 512,
      prompts: 8,
      opts: o,
      want: false,
    },
    {
      name: 'a batch of prompts shorter than the key',
      chars: 1600,
      cached: 0,
      prompts: 8,
      opts: o,
      want: false,
    },
  ])('$name -> $want', ({ chars, cached, holders, prompts, opts, want }) => {
    expect(homeApplies(chars, cached, holders ?? 0, 4, opts, prompts)).toBe(want);
  });
});

describe('keyHolders', () => {
  const o = DEFAULT_PREFIX_HOME_OPTIONS; // key 256 chars: 64 tokens at 4 chars per token
  const cands = [{ cachedTokens: 0 }, { cachedTokens: 128 }, { cachedTokens: 600 }];
  it('one prompt: every candidate holding 64 tokens', () => {
    expect(keyHolders(cands, 4, o)).toBe(2);
  });
  it("a batch of 8: a key's worth of each prompt on average (512 tokens summed)", () => {
    expect(keyHolders(cands, 4, o, 8)).toBe(1);
  });
});

describe('homeMargin: the alone margin until load from elsewhere shows', () => {
  const o = DEFAULT_PREFIX_HOME_OPTIONS; // margin 3, alone 0.5
  it.each([
    { name: 'nobody else on the workers: the alone margin', foreign: 0, opts: o, want: 0.5 },
    { name: 'halfway to the full share', foreign: 0.1, opts: o, want: 1.75 },
    { name: 'a second replica sending as much (~0.5)', foreign: 0.5, opts: o, want: 3 },
    { name: 'a share out of range counts as its bound', foreign: 7, opts: o, want: 3 },
    { name: 'an unknown share counts as shared', foreign: Number.NaN, opts: o, want: 3 },
    { name: 'margin 0 stays off', foreign: 0, opts: { ...o, margin: 0 }, want: 0 },
    {
      name: 'KV events on every candidate: capped at the exact margin',
      foreign: 0.5,
      exact: true,
      opts: o,
      want: 1,
    },
    { name: 'KV events, alone: the alone margin', foreign: 0, exact: true, opts: o, want: 0.5 },
    {
      name: 'KV events, halfway',
      foreign: 0.1,
      exact: true,
      opts: o,
      want: 0.75,
    },
    {
      name: 'the alone margin never exceeds the margin',
      foreign: 0,
      opts: { ...o, margin: 0.25 },
      want: 0.25,
    },
  ])('$name -> $want', ({ foreign, exact, opts, want }) => {
    expect(homeMargin(opts, foreign, exact)).toBeCloseTo(want, 9);
  });
});

/** A sentence of seeded random words, `chars` long: a prompt nobody holds. */
function prompt(seed: number, chars: number): string {
  const rng = seededRng(seed);
  const words = ['river', 'bridge', 'cache', 'token', 'worker', 'lantern', 'meadow', 'harbor', 'prefix'];
  let s = `group ${seed} system:`;
  while (s.length < chars) s += ` ${words[Math.floor(rng() * words.length)]!}`;
  return s.slice(0, chars);
}

const idle: LoadView = { source: 'in_flight', ahead: 0 };

/** A replica: its own policy (own tree, own view of the loads: `loads[i]` requests ahead of worker i). */
function replica(
  workers: readonly Worker[],
  loads: readonly number[],
  options: Partial<CacheAwareOptions> = {},
  /** The loads are queues from elsewhere (scraped: another replica's requests waiting), not in flight. */
  queuedElsewhere = false,
  /** The workers' share of load from elsewhere (0.5: the other replica sends as much). */
  foreignShare = 0.5,
) {
  const timing = new TimingEstimates(); // priors: floor 10 ms, 0.05 ms/token, 20 ms per request ahead
  const signals: WorkerSignals = {
    load: (w) => {
      const ahead = loads[workers.indexOf(w)] ?? 0;
      if (ahead === 0) return idle;
      return queuedElsewhere
        ? { source: 'scraped', ahead, waiting: ahead, waitingElsewhere: ahead }
        : { source: 'in_flight', ahead };
    },
    timing: (w) => timing.of(w),
    foreignShare: () => foreignShare,
  };
  const policy = new CacheAwarePolicy(options, { signals });
  for (const w of workers) policy.addWorker(w);
  return policy;
}

// 2176 tokens (the benchmark's shared-prefix prompt): ~109 ms of prefill; the margin is 3x that by default.
const LONG = 8704;
// Two replicas' views of the same fleet: each counts mostly its own in-flight requests.
const LOADS_A = [0, 1, 0, 2, 1, 0, 1, 0];
const LOADS_B = [1, 0, 2, 0, 0, 1, 0, 1];

describe('prefix home in cache_aware (two replicas, no shared state)', () => {
  it('two replicas with different local loads seed the same new prefix on the same worker', () => {
    const workers = makeWorkers(8);
    const a = replica(workers, LOADS_A);
    const b = replica(workers, LOADS_B);
    for (let g = 0; g < 32; g++) {
      const text = `${prompt(g, LONG)}\nquestion ${g}`;
      const da = a.select(input(workers, { text }));
      const db = b.select(input(workers, { text: `${prompt(g, LONG)}\nanother question` }));
      expect(db.worker, `prefix ${g}`).toBe(da.worker);
      expect(da.cost?.home).toBe(true);
      expect(da.branch).toBe('low_match');
    }
  });

  it('traffic that never reuses an opening stops paying for the home: unique prompts take the best worker', () => {
    const workers = makeWorkers(8);
    const loads = [3, 1, 3, 3, 3, 3, 3, 3]; // worker 1 is the best for any prompt nobody holds
    const a = replica(workers, loads);
    const homes = (from: number) => {
      let best = 0;
      for (let g = from; g < from + 32; g++) {
        const text = prompt(g, LONG);
        const sel = input(workers, { text });
        const d = a.select(sel);
        if (d.worker === workers[1]) best += 1;
        a.routed?.(d, sel, 0);
      }
      return best;
    };
    // A fresh router assumes sharing: most new prefixes go to their homes, within the margin.
    expect(homes(0)).toBeLessThan(16);
    for (let g = 100; g < 400; g++) {
      const text = prompt(g, LONG);
      const sel = input(workers, { text });
      a.routed?.(a.select(sel), sel, 0);
    }
    expect(a.homeReuseRate()).toBeLessThan(0.05);
    // After hundreds of unique prompts, the margin has shrunk to (almost) nothing: the best worker.
    expect(homes(1_000)).toBe(32);
  });

  it('without the rule (margin 0) the same two replicas disagree: each takes its own least loaded', () => {
    const workers = makeWorkers(8);
    const a = replica(workers, LOADS_A, { prefixHomeMargin: 0 });
    const b = replica(workers, LOADS_B, { prefixHomeMargin: 0 });
    let disagree = 0;
    for (let g = 0; g < 32; g++) {
      const text = prompt(g, LONG);
      if (a.select(input(workers, { text })).worker !== b.select(input(workers, { text })).worker) disagree++;
    }
    expect(disagree).toBeGreaterThan(16);
  });

  it('different prefixes spread over the fleet', () => {
    const workers = makeWorkers(8);
    const policy = replica(workers, []);
    const perWorker = new Map<Worker, number>();
    for (let g = 0; g < 64; g++) {
      const w = policy.select(input(workers, { text: prompt(g, LONG) })).worker;
      perWorker.set(w, (perWorker.get(w) ?? 0) + 1);
    }
    expect(perWorker.size).toBe(8); // every worker is some prefix's home
    expect(Math.max(...perWorker.values())).toBeLessThanOrEqual(16); // 8 expected; no worker takes a quarter
  });

  it('an owned prefix still wins: the holder keeps it even when it is not the home', () => {
    const workers = makeWorkers(8);
    const a = replica(workers, LOADS_A);
    const text = prompt(3, LONG);
    const home = a.select(input(workers, { text })).worker;
    const holder = workers.find((w) => w !== home)!;
    a.routed({ worker: holder, branch: 'seed' }, input(workers, { text }), 1);
    const d = a.select(input(workers, { text: `${text}\nfollow-up` }));
    expect(d.worker).toBe(holder);
    expect(d.branch).toBe('cache_hit');
    expect(d.cost?.home).toBeUndefined();
  });

  it.each([
    { name: 'above the imbalance band (1.5x the mean and the mean + 8)', ahead: 12, waiting: 0 },
    { name: 'overloaded by its scraped queue (9 waiting)', ahead: 1, waiting: 9 },
  ])(
    'an overloaded home is skipped: $name; both replicas take the same next worker',
    ({ ahead, waiting }) => {
      const workers = makeWorkers(8);
      const text = prompt(11, LONG);
      const home = replica(workers, []).select(input(workers, { text })).worker;
      const at = workers.indexOf(home);
      const view = (base: readonly number[]): WorkerSignals => {
        const timing = new TimingEstimates();
        return {
          load: (w) => {
            const i = workers.indexOf(w);
            if (i === at) return { source: 'scraped', ahead, waiting, kvUsage: 0.2, ageMs: 10 };
            return { source: 'in_flight', ahead: base[i] ?? 0 };
          },
          timing: (w) => timing.of(w),
        };
      };
      const a = new CacheAwarePolicy({}, { signals: view(LOADS_A) });
      const b = new CacheAwarePolicy({}, { signals: view(LOADS_B) });
      const da = a.select(input(workers, { text }));
      const db = b.select(input(workers, { text }));
      expect(da.worker).not.toBe(home);
      expect(db.worker).toBe(da.worker);
      expect(da.cost?.home).toBe(true);
    },
  );

  it('a busy holder spills to the same worker on both replicas', () => {
    const workers = makeWorkers(8);
    const text = prompt(21, LONG);
    const holder = workers[4]!;
    // Both replicas routed the prefix to the holder before; it is now far above the imbalance band.
    const view = (base: readonly number[]): WorkerSignals => {
      const timing = new TimingEstimates();
      return {
        load: (w) => ({ source: 'in_flight', ahead: w === holder ? 14 : (base[workers.indexOf(w)] ?? 0) }),
        timing: (w) => timing.of(w),
      };
    };
    const a = new CacheAwarePolicy({}, { signals: view(LOADS_A) });
    const b = new CacheAwarePolicy({}, { signals: view(LOADS_B) });
    for (const p of [a, b]) {
      for (const w of workers) p.addWorker(w);
      p.routed({ worker: holder, branch: 'seed' }, input(workers, { text }), 1);
    }
    const da = a.select(input(workers, { text: `${text}\nnext` }));
    const db = b.select(input(workers, { text: `${text}\nnext` }));
    expect(da.worker).not.toBe(holder);
    expect(da.branch).toBe('imbalance');
    expect(db.worker).toBe(da.worker);
    expect(da.cost?.home).toBe(true);
    // Without the rule each replica spills to its own least loaded.
    const a0 = new CacheAwarePolicy({ prefixHomeMargin: 0 }, { signals: view(LOADS_A) });
    const b0 = new CacheAwarePolicy({ prefixHomeMargin: 0 }, { signals: view(LOADS_B) });
    for (const p of [a0, b0]) p.routed({ worker: holder, branch: 'seed' }, input(workers, { text }), 1);
    expect(a0.select(input(workers, { text })).worker).not.toBe(b0.select(input(workers, { text })).worker);
  });

  it('an opening that two workers hold (one preamble for every user) spills by the cost model alone', () => {
    const workers = makeWorkers(8);
    const preamble = prompt(31, LONG);
    const holders = [workers[2]!, workers[5]!];
    const policy = replica(
      workers,
      workers.map((w) => (holders.includes(w) ? 14 : 0)),
    );
    for (const h of holders)
      policy.routed({ worker: h, branch: 'seed' }, input(workers, { text: preamble }), 1);
    for (let u = 0; u < 8; u++) {
      const d = policy.select(input(workers, { text: `${preamble}\nuser ${u}: a question of their own` }));
      expect(holders).not.toContain(d.worker);
      expect(d.cost?.home).toBeUndefined();
    }
  });

  it('a far busier home is not worth it: beyond the margin the best worker wins', () => {
    const workers = makeWorkers(8);
    const text = prompt(5, LONG);
    const home = replica(workers, []).select(input(workers, { text })).worker;
    // 4 requests queued on the home by another replica, 1 on every other worker (60 ms more wait + the
    // decode term) against 3 x a 109 ms prefill: still home; with a margin of 0.25 (27 ms) another
    // worker wins. (With a worker idle, 3 queued would skip the home outright: cost-model.ts, idle queue.)
    const loads = workers.map((w) => (w === home ? 4 : 1));
    expect(replica(workers, loads, {}, true).select(input(workers, { text })).worker).toBe(home);
    const tight = replica(workers, loads, { prefixHomeMargin: 0.25 }, true).select(input(workers, { text }));
    expect(tight.worker).not.toBe(home);
  });

  it("a lone router does not queue a new document behind another one's prefill at its home; with a second replica it does", () => {
    // long-prompt's collision: two 2.9 s documents whose homes are the same worker, six workers idle.
    const workers = makeWorkers(8);
    const doc = prompt(11, 4 * 58_000); // ~58k tokens: 2.9 s of prefill at the prior 0.05 ms/token
    const home = replica(workers, []).select(input(workers, { text: doc })).worker;
    const timing = new TimingEstimates();
    const alone = (foreign: number): WorkerSignals => ({
      // The other document: routed here by this router a moment ago, its prefill not started.
      load: (w) => ({ source: 'in_flight', ahead: w === home ? 1 : 0 }),
      timing: (w) => timing.of(w),
      backlog: (w) => (w === home ? { requests: 1, tokens: 58_000 } : { requests: 0, tokens: 0 }),
      foreignShare: () => foreign,
    });
    const lone = new CacheAwarePolicy({}, { signals: alone(0) }).select(input(workers, { text: doc }));
    expect(lone.worker).not.toBe(home);
    expect(lone.cost?.homeMargin).toBe(0.5);
    const shared = new CacheAwarePolicy({}, { signals: alone(0.5) }).select(input(workers, { text: doc }));
    expect(shared.worker).toBe(home);
    expect(shared.cost?.homeMargin).toBe(3);
    // The old behaviour on demand: the full margin alone too.
    const pinned = new CacheAwarePolicy({ prefixHomeMarginAlone: 3 }, { signals: alone(0) });
    expect(pinned.select(input(workers, { text: doc })).worker).toBe(home);
  });

  it("with every worker's cache known from KV events, a replica agrees within the exact margin only", () => {
    // The same collision seen by a second replica: the full margin (3) queues the new document behind
    // the other one at its home. With KV events each replica sees where the other seeded a prefix
    // within milliseconds, so the margin is capped at 1 prefill and an idle worker takes it.
    const workers = makeWorkers(8);
    const doc = prompt(11, 4 * 58_000);
    const home = replica(workers, []).select(input(workers, { text: doc })).worker;
    const timing = new TimingEstimates();
    const signals: WorkerSignals = {
      load: (w) => ({ source: 'in_flight', ahead: w === home ? 1 : 0 }),
      timing: (w) => timing.of(w),
      backlog: (w) => (w === home ? { requests: 1, tokens: 58_000 } : { requests: 0, tokens: 0 }),
      foreignShare: () => 0.5,
    };
    const events = (covers: number): PrefixSource => ({
      name: 'kv_events',
      exact: true,
      cachedTokens: (_i, ws) => ws.map((_w, i) => (i < covers ? 0 : undefined)),
      promptTokens: () => 58_000,
    });
    const exact = new CacheAwarePolicy({}, { signals, prefixSources: [events(8)] });
    const d = exact.select(input(workers, { text: doc }));
    expect(d.cost?.homeMargin).toBe(1);
    expect(d.worker).not.toBe(home);
    // One worker without events: the picture is partly a guess, and the full margin applies.
    const partial = new CacheAwarePolicy({}, { signals, prefixSources: [events(7)] });
    const p = partial.select(input(workers, { text: doc }));
    expect(p.cost?.homeMargin).toBe(3);
    expect(p.worker).toBe(home);
    // --prefix-home-margin-exact 3 restores the full margin.
    const wide = new CacheAwarePolicy({ prefixHomeMarginExact: 3 }, { signals, prefixSources: [events(8)] });
    expect(wide.select(input(workers, { text: doc })).worker).toBe(home);
  });

  it('a prompt shorter than the key keeps the (load, processed, index) tie-break', () => {
    const workers = makeWorkers(3);
    workers[0]!.processed = 3;
    const d = replica(workers, []).select(input(workers, { text: 'short question, no home' }));
    expect(d.worker).toBe(workers[1]);
    expect(d.cost?.home).toBeUndefined();
  });
});
