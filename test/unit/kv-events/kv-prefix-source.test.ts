import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { KvPrefixSource } from '../../../src/kv-events/kv-prefix-source.js';
import { MAX_SCORED_PROMPTS } from '../../../src/request/prompt-text.js';
import { workerKey } from '../../../src/kv-events/kv-event-sources.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorkers, route, storeBlocks, unstartedSubscriptions } from '../routing/fixtures.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const tokenizer = RequestTokenizer.load(new Map([['m', DIR]]));
const BS = 4;
const TTL = 1000;
// Long enough that a hit saves more prefill than one request ahead costs (the timing priors).
const prompt = 'You are a helpful assistant. Answer the question using the context below. '.repeat(200);
const ids = (tokenizer.tokenize('m', { prompt }) as { ok: true; ids: number[] }).ids;
const blocks = Math.floor(ids.length / BS);

const closers: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of closers) await c();
});

/**
 * Two publishing workers, the cost-model cache_aware policy with the exact source first. Publishers
 * are never started (ZMQ just retries); the test applies events to the index as a subscriber would.
 */
function fleet(pendingTtlMs: number, sizes: { blockSize?: number; scraped?: number } = { blockSize: BS }) {
  const workers = makeWorkers(2);
  const subs = unstartedSubscriptions(workers);
  closers.push(() => subs.close());
  const clock = { now: 0 };
  const source = new KvPrefixSource({
    subscriptions: subs,
    tokenizer,
    blockSize: sizes.blockSize ?? 0,
    pendingTtlMs,
    now: () => clock.now,
    ...(sizes.scraped !== undefined ? { scrapedBlockSize: () => sizes.scraped } : {}),
  });
  const policy = new CacheAwarePolicy({}, { prefixSources: [source] });
  for (const w of workers) policy.addWorker(w);
  const store = (i: number, n: number): void => storeBlocks(subs, workers, i, ids, n, BS);
  /** Stores as a running subscriber does: the `stored` hook confirms the blocks (exact-prefix.ts). */
  const storeLive = (i: number, n: number): void => {
    const keys: number[] = [];
    storeBlocks(subs, workers, i, ids, n, BS, undefined, keys);
    source.confirmStored(workerKey(workers[i]!.url), keys);
  };
  const evict = (i: number): void => {
    subs.index.apply(`${workerKey(workers[i]!.url)}#0`, [{ type: 'cleared' }]);
  };
  const cached = (): (number | undefined)[] | undefined =>
    source.cachedTokens(input(workers, { text: prompt, body: { prompt } }), workers);
  const send = () => route(policy, input(workers, { text: prompt, body: { prompt } }), clock.now);
  return { workers, source, clock, store, storeLive, evict, cached, send };
}

/** What cachedTokens answers when worker `home` holds the whole prompt (of two workers). */
const held = (home: number): number[] => [0, 1].map((i) => (i === home ? blocks * BS : 0));

/** Routes one request, completes it, and returns the index of the worker it went to. */
function routedTo(workers: readonly Worker[], send: () => ReturnType<typeof route>): number {
  const r = send();
  r.guard.release();
  return workers.indexOf(r.decision.worker);
}

describe('KvPrefixSource: what vLLM feeds its engine', () => {
  it('a request with truncate_prompt_tokens matches the blocks a worker stored from the truncated prompt', () => {
    const workers = makeWorkers(2);
    const subs = unstartedSubscriptions(workers);
    closers.push(() => subs.close());
    const source = new KvPrefixSource({ subscriptions: subs, tokenizer, blockSize: BS });
    const keep = 60;
    // vLLM keeps BOS and the prompt's last keep - 1 ids (a left-truncating generate tokenizer).
    const kept = [ids[0]!, ...ids.slice(ids.length - (keep - 1))];
    storeBlocks(subs, workers, 1, kept, keep / BS, BS);
    const req = input(workers, { text: prompt, body: { prompt, truncate_prompt_tokens: keep } });
    expect(source.cachedTokens(req, workers)).toEqual([0, keep]);
    expect(source.promptTokens(req)).toBe(keep);
    expect(source.fallback(req)).toBeUndefined();
  });
});

describe('KvPrefixSource: blocks routed but not yet shown by events', () => {
  it('a burst sharing a new prompt follows the first request before the worker publishes it', () => {
    const { workers, send, cached } = fleet(TTL);
    const first = send(); // nobody holds it: the prompt's home worker (prefix-home.ts)
    const home = workers.indexOf(first.decision.worker);
    expect(cached()).toEqual(held(home));
    const second = send(); // the first worker is busier, but holds the prompt (pending)
    expect(second.decision.worker).toBe(first.decision.worker);
    first.guard.release();
    second.guard.release();
  });

  it('without the pending window nobody is shown to hold it', () => {
    const { send, cached } = fleet(0);
    const first = send();
    expect(cached()).toEqual([0, 0]);
    const second = send();
    first.guard.release();
    second.guard.release();
  });

  it('blocks the events show are confirmed, so a later eviction is seen at once', () => {
    const { workers, send, store, evict, cached, source } = fleet(TTL);
    const home = routedTo(workers, send);
    store(home, blocks);
    expect(cached()).toEqual(held(home));
    expect(source.pending.size).toBe(0); // every pending block confirmed
    evict(home);
    expect(cached()).toEqual([0, 0]);
  });

  it('a prompt stored and evicted between two of its visits is seen gone at once', () => {
    const { workers, send, storeLive, evict, cached, source } = fleet(TTL);
    const home = routedTo(workers, send);
    storeLive(home, blocks); // no lookup in between: the stored events themselves confirm
    expect(source.pending.size).toBe(0);
    evict(home);
    expect(cached()).toEqual([0, 0]); // not "held" by its pending blocks for the rest of the TTL
  });

  it('what the events never show expires after the TTL', () => {
    const { workers, send, cached, clock } = fleet(TTL);
    const home = routedTo(workers, send);
    clock.now = TTL - 1;
    expect(cached()).toEqual(held(home));
    clock.now = TTL;
    expect(cached()).toEqual([0, 0]);
  });

  it('before any worker has published, the block size scraped from its metrics keys the pending blocks', () => {
    const learned = fleet(TTL, { scraped: BS });
    const home = routedTo(learned.workers, learned.send);
    expect(learned.cached()).toEqual(held(home));
    // Neither configured nor scraped nor seen in an event: no keys, nothing pending.
    const unknown = fleet(TTL, {});
    routedTo(unknown.workers, unknown.send);
    expect(unknown.cached()).toEqual([0, 0]);
  });

  it('only the blocks a worker was not shown to hold become pending there, and its events confirm them', () => {
    const { workers, send, store, cached, source } = fleet(TTL);
    store(0, blocks - 2); // worker 0 shows all but the prompt's last 2 blocks
    const r = send();
    r.guard.release();
    expect(r.decision.worker).toBe(workers[0]);
    expect(source.pending.size).toBe(2);
    expect(cached()).toEqual(held(0)); // what it shows + the pending rest
    store(0, blocks);
    expect(cached()).toEqual(held(0));
    expect(source.pending.size).toBe(0);
  });

  it('events that show part of the prompt are extended by the pending rest', () => {
    const { workers, send, store, cached } = fleet(TTL);
    const home = routedTo(workers, send);
    store(home, 2);
    expect(cached()).toEqual(held(home));
  });
});

describe('KvPrefixSource: a worker whose index misses a chain it holds', () => {
  it('keeps the prompts this router sent it (cache_aware cost mode), counted as an incomplete_index fallback', () => {
    // A router (re)started after more than the publisher's replay buffer never saw the BlockStored of a
    // prompt the worker still holds; every block extending it is dropped (`unknown_parent`), so its
    // events show the worker holding none of it however often it is sent there.
    const workers = makeWorkers(2);
    const subs = unstartedSubscriptions(workers);
    closers.push(() => subs.close());
    const fallbacks: string[] = [];
    const source = new KvPrefixSource({
      subscriptions: subs,
      tokenizer,
      blockSize: BS,
      onFallback: (reason) => void fallbacks.push(reason),
    });
    const policy = new CacheAwarePolicy(
      { prefixHomeMargin: 0, prefixHomeMarginAlone: 0 },
      { prefixSources: [source] },
    );
    for (const w of workers) policy.addWorker(w);
    const send = () => route(policy, input(workers, { text: prompt, body: { prompt } }));
    const first = send();
    const h = workers.indexOf(first.decision.worker);
    // The worker computed only what extends the part it held: a BlockStored under an unknown parent.
    const r = subs.index.apply(`${workerKey(workers[h]!.url)}#0`, [
      {
        type: 'stored',
        hashes: [7001],
        parent: 7000,
        tokens: ids.slice(blocks * BS - BS, blocks * BS),
        blockSize: BS,
        medium: 'GPU',
        loraName: undefined,
        extraKeys: undefined,
      },
    ]);
    expect(r.dropped).toEqual({ unknown_parent: 1 });
    // The first request still runs there: the other worker is idle, yet the prompt stays.
    const sel = input(workers, { text: prompt, body: { prompt } });
    const second = route(policy, sel);
    expect(workers.indexOf(second.decision.worker)).toBe(h);
    expect(second.decision.branch).toBe('cache_hit');
    expect(source.fallback(sel)).toBe('incomplete_index');
    expect(fallbacks).toEqual(['incomplete_index']); // the first request was answered exactly
    first.guard.release();
    second.guard.release();
    expect(workers.map((w) => w.load)).toEqual([0, 0]);
  });
});

describe('KvPrefixSource: a batched completions prompt is one sequence per prompt', () => {
  const other = 'Summarise the following report for an executive audience in three bullet points. '.repeat(
    150,
  );
  const otherIds = (tokenizer.tokenize('m', { prompt: other }) as { ok: true; ids: number[] }).ids;
  const otherBlocks = Math.floor(otherIds.length / BS);
  const batch = { prompt: [prompt, other] };

  /** Worker i's events store `n` leading blocks of `tokens` (engine hashes from `base`). */
  function storeOn(
    subs: ReturnType<typeof unstartedSubscriptions>,
    w: Worker,
    tokens: number[],
    n: number,
    base: number,
  ) {
    subs.index.apply(`${workerKey(w.url)}#0`, [
      {
        type: 'stored',
        hashes: Array.from({ length: n }, (_, b) => base + b),
        parent: undefined,
        tokens: tokens.slice(0, n * BS),
        blockSize: BS,
        medium: 'GPU',
        loraName: undefined,
        extraKeys: undefined,
      },
    ]);
  }

  it("scores each prompt's own prefix and sums them; the batch goes where both are held", () => {
    const workers = makeWorkers(2);
    const subs = unstartedSubscriptions(workers);
    closers.push(() => subs.close());
    const source = new KvPrefixSource({ subscriptions: subs, tokenizer, blockSize: BS });
    const policy = new CacheAwarePolicy({}, { prefixSources: [source] });
    for (const w of workers) policy.addWorker(w);
    storeOn(subs, workers[0]!, ids, blocks, 1000); // worker 0: the first prompt only
    storeOn(subs, workers[1]!, ids, blocks, 5000); // worker 1: both
    storeOn(subs, workers[1]!, otherIds, otherBlocks, 9000);
    const req = input(workers, { text: `${prompt}\n${other}`, body: batch });
    expect(source.cachedTokens(req, workers)).toEqual([blocks * BS, (blocks + otherBlocks) * BS]);
    expect(source.promptTokens(req)).toBe(ids.length + otherIds.length);
    expect(source.fallback(req)).toBeUndefined();
    const r = route(policy, input(workers, { text: `${prompt}\n${other}`, body: batch }), 0);
    expect(r.decision.worker).toBe(workers[1]);
    r.guard.release();
  });

  it("a batch routed to a worker leaves every prompt's blocks pending there", () => {
    const { workers, source, clock } = fleet(TTL);
    const policy = new CacheAwarePolicy({}, { prefixSources: [source] });
    for (const w of workers) policy.addWorker(w);
    const first = route(policy, input(workers, { text: `${prompt}\n${other}`, body: batch }), clock.now);
    const home = workers.indexOf(first.decision.worker);
    first.guard.release();
    const answer = source.cachedTokens(input(workers, { text: `${prompt}\n${other}`, body: batch }), workers);
    expect(answer).toEqual([0, 1].map((i) => (i === home ? (blocks + otherBlocks) * BS : 0)));
  });
});

describe('KvPrefixSource: a batch past MAX_SCORED_PROMPTS', () => {
  it('looks up the first prompts only; the rest count as uncached, their tokens still counted', () => {
    const workers = makeWorkers(2);
    const subs = unstartedSubscriptions(workers);
    closers.push(() => subs.close());
    const source = new KvPrefixSource({ subscriptions: subs, tokenizer, blockSize: BS });
    // The last one shares no block with the others (they share their first).
    const prompts = Array.from({ length: MAX_SCORED_PROMPTS }, (_, i) => `prompt ${i}: ${prompt}`);
    prompts.push('Summarise the following report for an executive audience. '.repeat(40));
    const seqs = prompts.map(
      (p) => (tokenizer.tokenize('m', { prompt: p }) as { ok: true; ids: number[] }).ids,
    );
    // Worker 1 holds only the prompt past the bound.
    const last = seqs[MAX_SCORED_PROMPTS]!;
    storeBlocks(subs, workers, 1, last, Math.floor(last.length / BS), BS);
    const req = input(workers, { text: prompts.join('\n'), body: { prompt: prompts } });
    expect(source.cachedTokens(req, workers)).toEqual([0, 0]);
    expect(source.promptTokens(req)).toBe(seqs.reduce((n, ids) => n + ids.length, 0));
  });
});
