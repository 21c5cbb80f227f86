import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { describeCost, type WorkerSignals } from '../../../src/routing/cost-model.js';
import { LoadBoard, type LoadView } from '../../../src/load/load-board.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { PrefillBacklog } from '../../../src/load/prefill-backlog.js';
import type { PrefixSource } from '../../../src/routing/prefix-source.js';
import type { Role } from '../../../src/workers/role.js';
import {
  DEFAULT_PREFIX_HOME_OPTIONS,
  homeKeyHash,
  rendezvousWeight,
} from '../../../src/routing/prefix-home.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorkers } from './fixtures.js';

const TINY = 'Hello! What is the capital of France? Answer in one word, please, thanks a lot.'; // 80 chars
const DOC = 'The quarterly report. '.repeat(9310).slice(0, 204_800); // 200 KB shared document
const MID = 'A shared instruction block. '.repeat(80).slice(0, 2000); // 2 KB: ~500 tokens, 25 ms of prefill

interface Case {
  name: string;
  /** Prompt held (as routed before) by worker 0. */
  held: string;
  /** The request's prompt. */
  prompt: string;
  /** Per worker: the load view the signals report (default idle, in-flight). */
  loads: LoadView[];
  role?: Role;
  want: number;
  branch: string;
}

const idle: LoadView = { source: 'in_flight', ahead: 0 };
/** `n` requests waiting on the worker, none of them queued by this router (e.g. another replica's). */
const queuedElsewhere = (n: number): LoadView => ({
  source: 'scraped',
  ahead: n,
  waiting: n,
  waitingElsewhere: n,
  kvUsage: 0.2,
  ageMs: 50,
});
const scraped = (ahead: number, extra: Partial<LoadView> = {}): LoadView => ({
  source: 'scraped',
  ahead,
  waiting: 0,
  kvUsage: 0.2,
  ageMs: 50,
  ...extra,
});

/** A busy vLLM whose KV cache reads near full (running sequences hold its blocks). */
const full = (ahead: number): LoadView => scraped(ahead, { kvUsage: 0.97 });

function policyFor(workers: readonly Worker[], loads: readonly LoadView[], role: Role = 'regular') {
  const timing = new TimingEstimates(); // priors: floor 10 ms, 0.05 ms/token, 20 ms per request ahead
  const signals: WorkerSignals = {
    load: (w) => loads[workers.indexOf(w)] ?? idle,
    timing: (w) => timing.of(w),
  };
  const policy = new CacheAwarePolicy({}, { role, signals });
  for (const w of workers) policy.addWorker(w);
  return policy;
}

/** In-flight loads, the timing priors and `backlog` read at time 0. */
function withBacklog(backlog: PrefillBacklog): WorkerSignals {
  const timing = new TimingEstimates();
  return {
    load: (w) => ({ source: 'in_flight', ahead: w.load }),
    timing: (w) => timing.of(w),
    backlog: (w) => backlog.of(w, 0),
  };
}

/**
 * 8 workers with this router's backlog and in-flight loads, each cache (`capacityTokens`) already full
 * of `contexts` older prompts that nothing will share, as in a running fleet.
 */
function fullCaches(costIdleQueue: number | undefined, capacityTokens: number, contexts: number) {
  const workers = makeWorkers(8);
  const backlog = new PrefillBacklog();
  const policy = new CacheAwarePolicy(costIdleQueue === undefined ? {} : { costIdleQueue }, {
    signals: withBacklog(backlog),
    capacityTokens: () => capacityTokens,
  });
  for (const w of workers) policy.addWorker(w);
  const chars = (capacityTokens * 4) / contexts;
  for (const [i, w] of workers.entries()) {
    for (let k = 0; k < contexts; k++) {
      const old = input(workers, {
        text: `old context ${i}.${k} `.repeat(Math.ceil(chars / 10)).slice(0, chars),
      });
      policy.routed({ worker: w, branch: 'seed' }, old, 0);
    }
  }
  return { workers, backlog, policy };
}

describe('cost model scoring (cache_aware default mode)', () => {
  const cases: Case[] = [
    {
      name: 'tiny shared prompt: one request ahead outweighs ~1 ms of prefill -> the idle worker',
      held: TINY,
      prompt: TINY,
      loads: [scraped(1), scraped(0)],
      want: 1,
      branch: 'imbalance',
    },
    {
      name: 'tiny shared prompt, both idle: the holder (a cache hit costs nothing)',
      held: TINY,
      prompt: TINY,
      loads: [idle, idle],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: '200 KB shared document on a busy fleet: worth a 50-request queue (1 s wait vs 2.5 s prefill)',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [queuedElsewhere(50), queuedElsewhere(40), queuedElsewhere(40)],
      want: 0,
      branch: 'cache_hit',
    },
    {
      // 500 tokens held save 25 ms of prefill: 3 sequences decoding on the holder cost only the decode
      // term (3 x 20 ms x 0.25 = 15 ms), while 6 requests queued there by another replica cost 120 ms of
      // wait (beyond the prefix home's margin too: 3 x 25 ms).
      name: 'a 2 KB shared prompt stays on its holder while 3 sequences decode there',
      held: MID,
      prompt: `${MID} Q?`,
      loads: [scraped(3), idle],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: '... but not behind 6 requests queued there by someone else',
      held: MID,
      prompt: `${MID} Q?`,
      loads: [queuedElsewhere(6), idle],
      want: 1,
      branch: 'imbalance',
    },
    {
      // The two idle workers tie; the spill goes to the prompt's rendezvous home among them
      // (prefix-home.ts), the same worker on every router replica.
      name: 'a hot prefix never piles up: a holder above 1.5x the mean (and the mean + 8) is skipped',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [scraped(16), scraped(2), scraped(2)],
      want: 2,
      branch: 'imbalance',
    },
    {
      name: '... while within the band it keeps the cache (mean + 8 on a lightly loaded fleet)',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [scraped(6), scraped(2), scraped(2)],
      want: 0,
      branch: 'cache_hit',
    },
    {
      // The holder's queue alone would be worth it (2 x 20 ms of wait against 2.5 s of prefill), but
      // a worker with nothing to do is prefill capacity going to waste (the idle queue rule).
      name: 'while a worker idles, a holder with 2 prefills queued is skipped (200 KB shared document)',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [queuedElsewhere(2), scraped(2), idle],
      want: 2,
      branch: 'imbalance',
    },
    {
      name: '... with 1 queued it keeps the document',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [queuedElsewhere(1), scraped(2), idle],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: '... and with 3 queued but no worker idle, too',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [queuedElsewhere(3), scraped(2), scraped(1)],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: '200 KB shared document: not worth a 200-request queue (4 s wait vs 2.5 s prefill)',
      held: DOC,
      prompt: `${DOC} Question 7?`,
      loads: [queuedElsewhere(200), scraped(0)],
      want: 1,
      branch: 'imbalance',
    },
    {
      name: 'nothing cached, idle vs queued: the idle worker',
      held: 'something else entirely',
      prompt: 'A fresh question',
      loads: [scraped(3), idle],
      want: 1,
      branch: 'low_match',
    },
    {
      name: 'under one KV block in common (a role marker): no hit anywhere, so no imbalance either',
      held: 'user\nHow do I peel a mango without a knife?',
      prompt: 'user\nWhat is the boiling point of water at altitude?',
      loads: [scraped(1), idle],
      want: 1,
      branch: 'low_match',
    },
    {
      name: 'overloaded holder (KV usage above 0.9) is skipped while the other is below',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [scraped(0, { kvUsage: 0.95 }), scraped(5)],
      want: 1,
      branch: 'imbalance',
    },
    {
      name: 'overloaded holder (9 waiting) is skipped while the other is below',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [scraped(9, { waiting: 9 }), scraped(7)],
      want: 1,
      branch: 'imbalance',
    },
    {
      name: 'half the fleet over the KV-usage threshold, holder among them: the filter still skips it',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [full(1), full(1), scraped(1), scraped(1)],
      want: 2,
      branch: 'imbalance',
    },
    {
      name: 'most of the fleet over the KV-usage threshold (saturated): all are scored, the holder keeps its cache',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [full(1), full(1), full(1), scraped(1)],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: 'every worker overloaded: all are scored, none refused',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [scraped(9, { waiting: 9 }), scraped(9, { waiting: 9 })],
      want: 0,
      branch: 'cache_hit',
    },
    {
      name: 'decode pool ignores the prefix (the KV cache arrives from prefill): predicted wait only',
      held: DOC,
      prompt: `${DOC} Q`,
      loads: [scraped(1), scraped(0)],
      role: 'decode',
      want: 1,
      branch: 'low_match',
    },
  ];

  it.each(cases)('$name', ({ held, prompt, loads, role, want, branch }) => {
    const workers = makeWorkers(Math.max(2, loads.length));
    const policy = policyFor(workers, loads, role);
    policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
    const d = policy.select(input(workers, { text: prompt }));
    expect(d.worker).toBe(workers[want]);
    expect(d.branch).toBe(branch);
    expect(d.cost).toBeDefined();
  });

  describe('mixed hardware: a worker at 3x the pace of the other', () => {
    /**
     * Worker 0 holds `held` (a conversation's history; its estimates the priors x `pace0`), worker 1
     * nothing: where a follow-up asking for `outputTokens` goes (a fresh policy per question).
     */
    function followUp(pace0: number, held: string, outputTokens: number | undefined): 0 | 1 {
      const workers = makeWorkers(2);
      const priors = new TimingEstimates().fleetOf('regular');
      const slow = {
        ...priors,
        pace: pace0,
        ttftFloorMs: priors.ttftFloorMs * pace0,
        prefillMsPerToken: priors.prefillMsPerToken * pace0,
        waitMsPerRequest: priors.waitMsPerRequest * pace0,
        interChunkMs: priors.interChunkMs * pace0,
      };
      const signals: WorkerSignals = {
        load: () => idle,
        timing: (w) => (w === workers[0] ? slow : priors),
      };
      const policy = new CacheAwarePolicy({}, { signals });
      for (const w of workers) policy.addWorker(w);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 0);
      const text = held + ' And one more question?';
      const chosen = policy.select(
        input(workers, { text, ...(outputTokens === undefined ? {} : { outputTokens }) }),
      );
      return chosen.worker === workers[0] ? 0 : 1;
    }

    it('a follow-up that only wants its first token soonest stays on the slow holder (its prefix saves more)', () => {
      expect(followUp(3, MID, undefined)).toBe(0);
    });

    it('a follow-up that will decode 128 tokens leaves the slow holder: its own decode there costs more than the recompute', () => {
      expect(followUp(3, MID, 128)).toBe(1);
      expect(followUp(3, MID, 0)).toBe(1); // no max_tokens: it decodes something (64 tokens counted)
    });

    it('a 200 KB document held by the slow worker keeps a short answer there, not a long one', () => {
      expect(followUp(3, DOC, 32)).toBe(0); // 2.5 s of recompute elsewhere outweighs 32 slower steps
      expect(followUp(3, DOC, 256)).toBe(1);
    });

    it('on alike workers the own decode is the same everywhere and changes nothing', () => {
      for (const out of [undefined, 0, 2, 128, 100_000]) expect(followUp(1, MID, out)).toBe(0);
    });
  });

  it('identical idle workers tie and split by (load, processed, index)', () => {
    const workers = makeWorkers(3);
    workers[0]!.processed = 5;
    workers[1]!.processed = 2;
    workers[2]!.processed = 2;
    const policy = policyFor(workers, []);
    expect(policy.select(input(workers, { text: 'q' })).worker).toBe(workers[1]);
    workers[1]!.load = 1; // in-flight counts are the load view by default
    const plain = new CacheAwarePolicy();
    expect(plain.select(input(workers, { text: 'q' })).worker).toBe(workers[2]);
  });

  it('a stale sample is ignored: the worker falls back to its in-flight count', () => {
    const workers = makeWorkers(2);
    const board = new LoadBoard(1000);
    // Worker 0 looked busy (40 queued by someone else), but 5 s ago; worker 1 has 2 of ours in flight.
    board.record(workers[0]!.url, {
      takenAtMs: 0,
      localAtSample: 0,
      figures: { waiting: 40, running: 0, malformedLines: 0 },
    });
    workers[1]!.load = 2;
    const timing = new TimingEstimates();
    const at = (now: number): WorkerSignals => ({
      load: (w) => board.view(w.url, w.load, now),
      timing: (w) => timing.of(w),
    });
    const fresh = new CacheAwarePolicy({}, { signals: at(500) });
    expect(fresh.select(input(workers, { text: 'q' })).worker).toBe(workers[1]);
    const stale = new CacheAwarePolicy({}, { signals: at(5000) });
    const d = stale.select(input(workers, { text: 'q' }));
    expect(d.worker).toBe(workers[0]);
    expect(d.cost?.chosen.loadSource).toBe('in_flight');
  });

  it('an exact prefix source wins over the radix tree for the workers it knows', () => {
    const workers = makeWorkers(2);
    const exact: PrefixSource = {
      name: 'kv_events',
      cachedTokens: () => [undefined, 400],
      promptTokens: () => 410,
    };
    const policy = new CacheAwarePolicy({}, { prefixSources: [exact] });
    for (const w of workers) policy.addWorker(w);
    // The radix tree thinks worker 0 holds everything; the exact source says worker 1 holds 400 tokens.
    policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: 'x'.repeat(100) }), 1);
    const d = policy.select(input(workers, { text: 'x'.repeat(100) }));
    expect(d.worker).toBe(workers[1]);
    expect(d.cost?.promptTokens).toBe(410);
    expect(d.cost?.chosen.uncachedTokens).toBe(10);
    expect(d.cost?.runnerUp?.uncachedTokens).toBe(385); // 410 - 25 radix tokens (100 chars / 4)
  });

  it('describes its inputs for the decision header: predicted wait, uncached tokens, runner-up', () => {
    const workers = makeWorkers(2);
    // Worker 0: 3 requests, 2 of them queued by someone else (scraped), 1 running; worker 1 decodes
    // one (so no worker idles and the idle-queue rule leaves worker 0 in the running).
    const policy = policyFor(workers, [scraped(3, { waiting: 2, waitingElsewhere: 2 }), scraped(1)]);
    const d = policy.select(input(workers, { text: 'y'.repeat(400) }));
    const text = describeCost(d.cost!);
    expect(text).toContain('predicted_ms=15.0'); // idle worker 1: 10 ms floor + 100 tokens x 0.05
    expect(text).toContain('wait_ms=0.0');
    expect(text).toContain('uncached=100/100');
    expect(text).toContain(`runner_up=${workers[0]!.url}`);
    expect(text).toContain('runner_up_ms=55.0'); // + 2 queued ahead x 20 ms; the running one is no queue
    expect(d.cost?.runnerUp?.ahead).toBe(2);
    expect(d.cost?.runnerUp?.running).toBe(1);
    expect(text).not.toContain('holder='); // nobody holds any of the prompt
  });

  it("says why the cache lost: the holder's own figures when another worker was chosen", () => {
    const workers = makeWorkers(2);
    const policy = policyFor(workers, [queuedElsewhere(6), idle]);
    policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: MID }), 1);
    const d = policy.select(input(workers, { text: `${MID} Q?` }));
    expect(d.worker).toBe(workers[1]);
    const text = describeCost(d.cost!);
    expect(text).toContain(`holder=${workers[0]!.url}`);
    expect(text).toContain('holder_wait_ms=120.0'); // 6 queued by someone else x 20 ms
    expect(text).toContain('holder_ahead=6');
    expect(text).toContain('holder_uncached=1');
    expect(d.cost?.holder?.worker).toBe(workers[0]);
    const kept = policyFor(workers, [scraped(3), idle]);
    kept.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: MID }), 1);
    const hit = kept.select(input(workers, { text: `${MID} Q?` }));
    expect(hit.worker).toBe(workers[0]);
    expect(hit.cost?.holder).toBeUndefined();
  });

  it('names the filter that skipped the holder (overload, imbalance, idle queue)', () => {
    const lost = (loads: LoadView[]) => {
      const workers = makeWorkers(loads.length);
      const policy = policyFor(workers, loads);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: MID }), 1);
      const d = policy.select(input(workers, { text: `${MID} Q?` }));
      expect(d.worker).not.toBe(workers[0]);
      expect(d.cost?.holder?.worker).toBe(workers[0]);
      return { filter: d.cost?.holderFilter, text: describeCost(d.cost!) };
    };
    // Its KV cache reads near full while the others' do not.
    const overload = lost([full(1), scraped(1), scraped(1), scraped(1)]);
    expect(overload.filter).toBe('overload');
    expect(overload.text).toContain('holder_filtered=overload');
    // 20 ahead against a mean of 10: above both 1.5x the mean and the mean + 8.
    expect(lost([scraped(20), scraped(0)]).text).toContain('holder_filtered=imbalance');
    // Two prefills queued (someone else's) while the other worker is idle.
    expect(lost([queuedElsewhere(2), idle]).text).toContain('holder_filtered=idle_queue');
    // Lost on score alone (6 queued elsewhere cost more than its cache saves): no filter named.
    const score = lost([queuedElsewhere(6), scraped(1)]);
    expect(score.filter).toBeUndefined();
    expect(score.text).not.toContain('holder_filtered');
  });

  it('says when the overload filter was ignored because most of the fleet is over it', () => {
    const workers = makeWorkers(4);
    const policy = policyFor(workers, [full(1), full(1), full(1), scraped(1)]);
    policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: DOC }), 1);
    const d = policy.select(input(workers, { text: `${DOC} Q` }));
    expect(d.cost?.saturated).toBe(3);
    expect(d.cost?.skippedOverloaded).toBe(0);
    expect(describeCost(d.cost!)).toContain('saturated=3');
    const outlier = policyFor(workers, [full(1), scraped(1), scraped(1), scraped(1)]);
    const o = outlier.select(input(workers, { text: 'a fresh question' }));
    expect(o.cost?.saturated).toBeUndefined();
    expect(o.cost?.skippedOverloaded).toBe(1);
    expect(describeCost(o.cost!)).not.toContain('saturated=');
  });

  it('queued prefills count in tokens: ten queued cache hits cost less than one queued long miss', () => {
    const workers = makeWorkers(2);
    const backlog = new PrefillBacklog();
    for (let i = 0; i < 10; i++) backlog.add(workers[0]!, 20, Infinity); // ten hits: 20 tokens each
    backlog.add(workers[1]!, 4000, Infinity); // one 4000-token miss
    const signals = withBacklog(backlog);
    workers[0]!.load = 10;
    workers[1]!.load = 1;
    const policy = new CacheAwarePolicy({ costBalanceAbs: 20 }, { signals });
    for (const w of workers) policy.addWorker(w);
    const d = policy.select(input(workers, { text: 'z'.repeat(400) }));
    expect(d.worker).toBe(workers[0]);
    expect(d.cost?.chosen.queuedTokens).toBe(200);
    expect(d.cost?.chosen.ahead).toBe(0); // the ten queued requests are counted in tokens, not again per request
    expect(d.cost?.runnerUp?.queuedTokens).toBe(4000);
  });

  it('a burst on one new prefix seeds every worker, then spreads evenly (idle queue rule)', () => {
    // 200 requests on one 8k-token document arrive before any first token: only this router's own
    // counts move. Every cache is full of older contexts, so a non-holder's score carries the
    // displacement of a whole prefill on top of the prefill itself.
    const burst = (costIdleQueue?: number) => {
      const { workers, backlog, policy } = fullCaches(costIdleQueue, 16_384, 4);
      const doc = 'The hot document. '.repeat(1820); // ~8,190 tokens
      const firstRequest: number[] = [];
      for (let r = 0; r < 200; r++) {
        const req = input(workers, { text: `${doc}Question ${r}?` });
        const d = policy.select(req);
        policy.routed(d, req, 1);
        backlog.add(d.worker, d.cost!.chosen.uncachedTokens, Infinity);
        const at = workers.indexOf(d.worker);
        if (d.worker.load === 0) firstRequest[at] = r;
        d.worker.load += 1;
        d.worker.processed += 1;
      }
      return { loads: workers.map((w) => w.load), seeded: firstRequest.filter((r) => r !== undefined) };
    };
    const idleRule = burst();
    // Every worker holds the document after 2 requests each, then the score evens them out.
    expect(idleRule.seeded.sort((x, y) => x - y)).toEqual([0, 2, 4, 6, 8, 10, 12, 14]);
    expect(Math.max(...idleRule.loads) - Math.min(...idleRule.loads)).toBeLessThanOrEqual(1);
    // The mean rule alone (the idle rule off) lets the first holders grow while other workers still
    // idle: here two of them never get a request.
    const meanOnly = burst(0);
    expect(Math.max(...meanOnly.loads)).toBeGreaterThan(1.3 * 25);
    expect(Math.min(...meanOnly.loads)).toBe(0);
    for (const loads of [idleRule.loads, meanOnly.loads]) expect(loads.reduce((x, y) => x + y)).toBe(200);
  });

  it('four long documents with four questions each, all at once: each document on two workers, two requests per worker', () => {
    // The long-prompt workload's shape: 16 requests on 4 documents of ~14k tokens arrive before any
    // first token, on 8 workers whose caches are full of older contexts. A document's second
    // question waits behind its first on the holder (the cheapest: a hit behind one prefill); its
    // third is better started now on an idle worker than queued third; its fourth then joins that one.
    const run = (order: 'grouped' | 'interleaved', costIdleQueue?: number) => {
      const { workers, backlog, policy } = fullCaches(costIdleQueue, 32_768, 2);
      const docs = [0, 1, 2, 3].map((d) => `document ${d}: ${`Section ${d} of the filing. `.repeat(2200)}`);
      const requests: Array<{ doc: number; q: number; text: string }> = [];
      for (let d = 0; d < 4; d++)
        for (let q = 0; q < 4; q++) requests.push({ doc: d, q, text: `${docs[d]}\nQuestion ${q}?` });
      if (order === 'interleaved') requests.sort((a, b) => a.q - b.q || a.doc - b.doc);
      const docsOn = workers.map(() => new Set<number>());
      for (const r of requests) {
        const req = input(workers, { text: r.text });
        const d = policy.select(req);
        policy.routed(d, req, 1);
        backlog.add(d.worker, d.cost!.chosen.uncachedTokens, Infinity);
        docsOn[workers.indexOf(d.worker)]!.add(r.doc);
        d.worker.load += 1;
        d.worker.processed += 1;
      }
      return { loads: workers.map((w) => w.load), docsPerWorker: docsOn.map((s) => s.size) };
    };
    for (const order of ['grouped', 'interleaved'] as const) {
      const shaped = run(order);
      expect(shaped.loads, order).toEqual([2, 2, 2, 2, 2, 2, 2, 2]);
      expect(shaped.docsPerWorker, order).toEqual([1, 1, 1, 1, 1, 1, 1, 1]); // no worker computes two
      // With 3 (the default until 2026-12-03) a document's first three questions queue on one worker.
      expect(Math.max(...run(order, 3).loads), order).toBe(3);
    }
  });

  it('displacement: recomputing a prompt on a full cache also costs the contexts it evicts', () => {
    const workers = makeWorkers(2);
    const held = 'h'.repeat(4000); // 1000 tokens: 50 ms of prefill
    const choose = (otherCached: number, costRecomputeWeight?: number) => {
      const backlog = new PrefillBacklog();
      backlog.add(workers[0]!, 1500, Infinity); // 75 ms queued on the holder, nothing on the other
      const policy = new CacheAwarePolicy(
        costRecomputeWeight === undefined ? {} : { costRecomputeWeight },
        { signals: withBacklog(backlog), capacityTokens: () => 1000 }, // 4000 chars per worker
      );
      for (const w of workers) policy.addWorker(w);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
      if (otherCached > 0) {
        policy.routed(
          { worker: workers[1]!, branch: 'seed' },
          input(workers, { text: 'o'.repeat(otherCached) }),
          2,
        );
      }
      return policy.select(input(workers, { text: `${held}?` }));
    };
    // The other worker's cache is empty: recomputing there evicts nothing and delays nobody.
    expect(choose(0).worker).toBe(workers[1]);
    // Its cache is full of another prompt: the 50 ms recompute would evict as much -> the holder.
    const full = choose(4000);
    expect(full.worker).toBe(workers[0]);
    expect(full.cost?.holder).toBeUndefined();
    expect(full.cost?.runnerUp?.worker).toBe(workers[1]);
    expect(full.cost?.runnerUp?.scoreMs).toBeCloseTo(10 + 50 + 50, 0);
    expect(full.cost?.runnerUp?.displaceMs).toBeCloseTo(50, 0);
    expect(describeCost(full.cost!)).toMatch(/displace_ms=0\.\d/); // the holder recomputes one token
    // Half full: half the weight (10 + 50 + 25 = 85 ms against the holder's ~85 ms: within a ms).
    expect(choose(2000).cost?.runnerUp?.scoreMs ?? choose(2000).cost?.chosen.scoreMs).toBeCloseTo(85, 0);
    // Weight 0: only the time the recompute takes, as before.
    expect(choose(4000, 0).worker).toBe(workers[1]);
  });

  it.each([
    // [what fills worker 1's cache, the request's model, worker chosen]
    { fill: 'nothing', model: 'm', chosen: 1 },
    { fill: 'the same model', model: 'm', chosen: 0 },
    // vLLM has one KV cache per engine, shared by its adapters (blocks keyed by adapter name): a
    // worker full of another adapter's prompts evicts them to recompute this one, as for its own.
    { fill: 'another adapter (lora-2)', model: 'm', chosen: 0 },
    { fill: 'the base model', model: 'lora-1', chosen: 0 },
  ])('displacement without events: a cache full of $fill counts as full for a $model request', (row) => {
    const workers = makeWorkers(2);
    const held = 'h'.repeat(4000); // 1000 tokens: 50 ms of prefill
    const backlog = new PrefillBacklog();
    backlog.add(workers[0]!, 1500, Infinity); // 75 ms queued on the holder, nothing on the other
    const policy = new CacheAwarePolicy({}, { signals: withBacklog(backlog), capacityTokens: () => 1000 });
    for (const w of workers) policy.addWorker(w);
    const seedOn = (w: Worker, text: string, model: string, at: number) =>
      policy.routed({ worker: w, branch: 'seed' }, input(workers, { text, model }), at);
    seedOn(workers[0]!, held, row.model, 1);
    const other = {
      'the same model': row.model,
      'another adapter (lora-2)': 'lora-2',
      'the base model': 'm',
    };
    const fillModel = other[row.fill as keyof typeof other];
    if (fillModel !== undefined) seedOn(workers[1]!, 'o'.repeat(4000), fillModel, 2);
    const d = policy.select({ ...input(workers, { text: `${held}?` }), model: row.model });
    expect(d.worker).toBe(workers[row.chosen]);
  });

  it("displacement without events: a worker full of other models' prompts is not where a new model's first prompt goes", () => {
    // No tree for the new adapter yet: worker 0's cache is full of the base model's prompts, worker 1's
    // is empty; both idle. Recomputing on worker 0 would evict as many tokens of its contexts.
    const workers = makeWorkers(2);
    const policy = new CacheAwarePolicy(
      {},
      { signals: withBacklog(new PrefillBacklog()), capacityTokens: () => 1000 },
    );
    for (const w of workers) policy.addWorker(w);
    policy.routed(
      { worker: workers[0]!, branch: 'seed' },
      input(workers, { text: 'o'.repeat(4000), model: 'm' }),
      1,
    );
    // Whatever its opening's home (prefix-home.ts) would be.
    for (const c of 'nopqrstu') {
      const d = policy.select({ ...input(workers, { text: c.repeat(2000) }), model: 'lora-new' });
      expect(d.worker, c).toBe(workers[1]);
    }
  });

  it("displacement: a cache the workers' KV events show full counts as full, though this router sent it nothing", () => {
    // Another replica filled worker 1's cache: this router's tree has nothing there, its events show
    // it full. Same setup as above: the holder has 75 ms of this router's prefills queued.
    const workers = makeWorkers(2);
    const held = 'h'.repeat(4000);
    const choose = (heldTokens?: (w: Worker) => number | undefined) => {
      const backlog = new PrefillBacklog();
      backlog.add(workers[0]!, 1500, Infinity);
      const events: PrefixSource = {
        name: 'kv_events',
        exact: true,
        cachedTokens: () => [1000, 0],
        promptTokens: () => 1001,
        ...(heldTokens ? { heldTokens } : {}),
      };
      const policy = new CacheAwarePolicy(
        {},
        { signals: withBacklog(backlog), capacityTokens: () => 1000, prefixSources: [events] },
      );
      for (const w of workers) policy.addWorker(w);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
      return policy.select(input(workers, { text: `${held}?` }));
    };
    // By this router's picture alone worker 1 has room: the prompt is recomputed there.
    expect(choose().worker).toBe(workers[1]);
    // By the events, worker 1 is full: recomputing there evicts as much -> the holder.
    const full = choose(() => 1000);
    expect(full.worker).toBe(workers[0]);
    expect(full.cost?.runnerUp?.displaceMs).toBeCloseTo(50, 0);
    // The events show room (a cleared cache): recomputed there.
    expect(choose((w) => (w === workers[0] ? 1000 : 0)).worker).toBe(workers[1]);
  });

  it('displacement without events: a worker half of whose load came from elsewhere has the rest of its cache filled by it', () => {
    // Another replica sends worker 1 as much as this router does: the 1,600 characters this router's
    // tree has there (0.4 of the cache) are about half of what the worker's LRU cache holds.
    const workers = makeWorkers(2);
    const held = 'h'.repeat(4000);
    const choose = (foreign: number, cacheFillOwnShare?: boolean) => {
      const backlog = new PrefillBacklog();
      backlog.add(workers[0]!, 1500, Infinity); // 75 ms queued on the holder
      const signals: WorkerSignals = {
        ...withBacklog(backlog),
        foreignShare: (w) => (w === workers[1] ? foreign : 0),
      };
      const policy = new CacheAwarePolicy(cacheFillOwnShare === undefined ? {} : { cacheFillOwnShare }, {
        signals,
        capacityTokens: () => 1000,
      });
      for (const w of workers) policy.addWorker(w);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
      policy.routed({ worker: workers[1]!, branch: 'seed' }, input(workers, { text: 'o'.repeat(1600) }), 2);
      return policy.select(input(workers, { text: `${held}?` }));
    };
    // Alone: 0.4 full, 10 + 50 + 20 ms beats the holder's 75 ms queue + ~10 ms -> recomputed there.
    expect(choose(0).worker).toBe(workers[1]);
    expect(choose(0).cost?.chosen.displaceMs).toBeCloseTo(20, 0);
    // Half its load from elsewhere: 0.8 full (40 ms displaced) -> the holder.
    const shared = choose(0.5);
    expect(shared.worker).toBe(workers[0]);
    expect(shared.cost?.runnerUp?.displaceMs).toBeCloseTo(40, 0);
    // All of it from elsewhere: full, never more (this router's share is floored at 0.1).
    expect(choose(1).cost?.runnerUp?.displaceMs).toBeCloseTo(50, 0);
    // Off: this router's picture only.
    expect(choose(0.5, false).worker).toBe(workers[1]);
  });

  it('contention: once every worker has a queue, a cache hit is worth more than its own prefill time', () => {
    const workers = makeWorkers(2);
    const backlog = new PrefillBacklog();
    const signals = withBacklog(backlog);
    const policy = new CacheAwarePolicy({}, { signals });
    for (const w of workers) policy.addWorker(w);
    const held = 'h'.repeat(4000); // 1000 tokens: 50 ms of prefill
    policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
    // The holder has 1400 more tokens queued (70 ms) than the other: more than the 50 ms the hit saves.
    backlog.add(workers[0]!, 1500, Infinity);
    backlog.add(workers[1]!, 100, Infinity);
    workers[0]!.load = 1;
    workers[1]!.load = 1;
    const idleElsewhere = policy.select(input(workers, { text: `${held}?` }));
    expect(idleElsewhere.cost?.contention).toBe(1);
    // One queued prefill everywhere: the recomputed 50 ms also delay the one queued behind -> the holder.
    expect(idleElsewhere.worker).toBe(workers[0]);
    // With no queue on the other worker, recomputing there delays nobody: the faster first token wins.
    const other = new PrefillBacklog();
    other.add(workers[0]!, 1500, Infinity);
    const free = withBacklog(other);
    workers[1]!.load = 0;
    const p2 = new CacheAwarePolicy({}, { signals: free });
    for (const w of workers) p2.addWorker(w);
    p2.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: held }), 1);
    const d = p2.select(input(workers, { text: `${held}?` }));
    expect(d.cost?.contention).toBe(0);
    expect(d.worker).toBe(workers[1]);
  });
});

describe('cost model: requests of several sequences (parallel sampling n, batched prompts)', () => {
  it('a request of n sequences adds n to the batch: n = 1 follows the cache, n = 16 the lighter batch', () => {
    const choose = (sequences: number) => {
      const workers = makeWorkers(2);
      // Worker 0 holds the ~500-token prompt and decodes 8 sequences; worker 1 decodes 2.
      const policy = policyFor(workers, [scraped(8), scraped(2)]);
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: MID }), 1);
      const d = policy.select(input(workers, { text: `${MID} question`, sequences }));
      return workers.indexOf(d.worker);
    };
    expect(choose(1)).toBe(0);
    expect(choose(16)).toBe(1);
  });
});

describe('cost model: a batch is held per prompt (prefix home)', () => {
  // Eight prompts that share a 64-character opening, then go their own way for 400 characters.
  const OPENING = 'Answer the question below in one short sentence, and cite it:  ';
  const batch = (tag: string) =>
    Array.from({ length: 8 }, (_, i) => `${OPENING}${`${tag} item ${i} `.repeat(40).slice(0, 400)}`);

  it("a short opening the prompts share is no holder: a new batch goes to its own key's home", () => {
    // Summed over 8 prompts the 16-token opening reads as 128 tokens held, past the 64-token key.
    let checked = 0;
    for (let t = 0; t < 20 && checked < 3; t++) {
      const workers = makeWorkers(4);
      const policy = policyFor(workers, []);
      const seen = batch(`seen ${t}`);
      policy.routed(
        { worker: workers[0]!, branch: 'seed' },
        input(workers, { text: seen.join(''), prompts: seen }),
        1,
      );
      const fresh = batch(`fresh ${t}`);
      const text = fresh.join('');
      const home = heaviestOf(homeKeyHash(text, DEFAULT_PREFIX_HOME_OPTIONS.keyChars), workers);
      if (home === 0) continue; // the home is the opening's holder too: nothing to tell apart
      const d = policy.select(input(workers, { text, prompts: fresh, sequences: 8 }));
      expect(d.cost!.chosen.uncachedTokens).toBeGreaterThan(0);
      expect(workers.indexOf(d.worker)).toBe(home);
      checked += 1;
    }
    expect(checked).toBe(3);
  });
});

/** Index of the worker with the highest rendezvous weight for `keyHash` (its URL). */
function heaviestOf(keyHash: number, workers: readonly Worker[]): number {
  let best = 0;
  for (let i = 1; i < workers.length; i++) {
    if (rendezvousWeight(keyHash, workers[i]!.url) > rendezvousWeight(keyHash, workers[best]!.url)) best = i;
  }
  return best;
}

describe('cost model: a decode pool request its worker prefills itself (P/D, no prefill leg)', () => {
  it("is scored with its prefill and the decode workers' prefix caches; a decode leg is not", () => {
    const choose = (prefillHere: boolean) => {
      const workers = makeWorkers(2);
      // Decode worker 0 holds the ~500-token prompt and runs one sequence more than worker 1.
      const policy = policyFor(workers, [scraped(2), scraped(1)], 'decode');
      policy.routed({ worker: workers[0]!, branch: 'seed' }, input(workers, { text: MID }), 1);
      const d = policy.select(input(workers, { text: `${MID} question`, prefillHere }));
      return { index: workers.indexOf(d.worker), uncached: d.cost!.chosen.uncachedTokens };
    };
    expect(choose(true)).toEqual({ index: 0, uncached: expect.any(Number) });
    expect(choose(true).uncached).toBeLessThan(10);
    // A decode leg gets its KV cache by transfer: the lighter batch wins, nothing is priced as prefill.
    expect(choose(false)).toEqual({ index: 1, uncached: 0 });
  });
});

describe('cost model: LoRA affinity', () => {
  type State = 'active' | 'free_slot' | 'full' | undefined;
  function lora(states: readonly State[], loads: readonly LoadView[] = []) {
    const workers = makeWorkers(states.length);
    const timing = new TimingEstimates();
    const signals: WorkerSignals = {
      load: (w) => loads[workers.indexOf(w)] ?? idle,
      timing: (w) => timing.of(w),
      adapter: (w, model) => (model === 'sql' ? states[workers.indexOf(w)] : undefined),
    };
    const policy = new CacheAwarePolicy({}, { signals });
    for (const w of workers) policy.addWorker(w);
    return { workers, policy };
  }

  it.each<{ name: string; states: State[]; loads?: LoadView[]; want: number; lora?: string }>([
    {
      name: 'the worker running the adapter over idle ones with a free slot',
      states: ['free_slot', 'active', 'free_slot'],
      want: 1,
      lora: 'active',
    },
    {
      name: 'a free slot over a worker whose slots are all taken',
      states: ['full', 'free_slot'],
      want: 1,
      lora: 'free_slot',
    },
    {
      name: 'a worker without LoRA info over a full one, even when the full one is idle and it is not',
      states: ['full', undefined],
      loads: [idle, queuedElsewhere(3)],
      want: 1,
    },
    {
      name: 'a worker with no opinion (no fresh sample) may have to load the adapter too: the active one wins',
      states: [undefined, 'active'],
      want: 1,
      lora: 'active',
    },
    {
      name: 'the adapter is active on a worker with a queue: its load (50 ms) outweighs one request ahead (20 ms)',
      states: ['active', 'free_slot'],
      loads: [queuedElsewhere(1), idle],
      want: 0,
    },
    {
      name: '... but not a long one (4 requests ahead = 80 ms)',
      states: ['active', 'free_slot'],
      loads: [queuedElsewhere(4), idle],
      want: 1,
    },
    {
      name: 'a full worker stays out even when it is the only idle one',
      states: ['full', 'active'],
      loads: [idle, queuedElsewhere(6)],
      want: 1,
    },
  ])('$name', ({ states, loads, want, lora: state }) => {
    const { workers, policy } = lora(states, loads);
    const d = policy.select(input(workers, { model: 'sql', text: TINY }));
    expect(d.worker).toBe(workers[want]);
    if (state !== undefined) expect(describeCost(d.cost!)).toContain(`lora=${state}`);
  });

  it('every worker full: the request is still routed (never refused), by load', () => {
    const { workers, policy } = lora(['full', 'full'], [queuedElsewhere(3), idle]);
    const d = policy.select(input(workers, { model: 'sql', text: TINY }));
    expect(d.worker).toBe(workers[1]);
    expect(d.cost?.skippedLora).toBeUndefined();
  });

  it('the decision header counts the workers the LoRA filter skipped', () => {
    const { workers, policy } = lora(['full', 'full', 'free_slot']);
    const d = policy.select(input(workers, { model: 'sql', text: TINY }));
    expect(d.worker).toBe(workers[2]);
    expect(describeCost(d.cost!)).toContain('lora_full=2');
  });

  it('no adapter state anywhere (a base-model request: lora-affinity.ts): no LoRA filter, no load cost', () => {
    const { workers, policy } = lora(['free_slot', 'full'], [queuedElsewhere(1), idle]);
    const d = policy.select(input(workers, { model: 'llama', text: TINY }));
    expect(d.worker).toBe(workers[1]);
  });

  it('the other filters count only the workers the LoRA filter keeps', () => {
    // Two full workers and the one running the adapter read their KV cache over the overload threshold:
    // over all four that is a saturated fleet and the filter would be off (the adapter's worker, idle
    // and with nothing to load, would win); over the two the LoRA filter keeps, one of two is over it,
    // so the filter holds and the worker with a free slot gets the request.
    const { workers, policy } = lora(
      ['full', 'full', 'active', 'free_slot'],
      [full(0), full(0), full(0), idle],
    );
    const d = policy.select(input(workers, { model: 'sql', text: TINY }));
    expect(d.worker).toBe(workers[3]);
    expect(d.cost?.saturated).toBeUndefined();
    expect(d.cost?.skippedOverloaded).toBe(1);
    expect(d.cost?.skippedLora).toBe(2);
  });
});
