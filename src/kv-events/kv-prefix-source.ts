/**
 * The exact PrefixSource (routing/prefix-source.ts): cached prompt tokens per candidate from the
 * workers' own KV-cache events.
 *
 * Per request (memoised per SelectionInput, so cachedTokens() and promptTokens() tokenize once):
 * 1. tokenize the request as vLLM will (tokenize/request-tokens.ts); a request that cannot be tokenized
 *    (no tokenizer for the model, multimodal parts, a template error) -> undefined: the next source
 *    (the approximate radix tree) answers, and `fallback(input)` tells why. A batched completions
 *    prompt is one sequence per prompt, as vLLM runs it: each is looked up on its own and a
 *    candidate's cached tokens are their sum (and the prompt tokens the sum of their lengths). Only
 *    the first MAX_SCORED_PROMPTS are looked up; the rest count as uncached everywhere (a lookup is
 *    per prompt and candidate, so a batch of thousands on a large fleet would cost more than
 *    tokenizing it, which grows with the body's size as for one prompt);
 * 2. block keys of the prompt's full blocks (block-keys.ts), seeded with the model name when events
 *    named it as a LoRA adapter, else the base seed, with the request's `cache_salt` in block 0 (vLLM
 *    salts the first block's hash); at the configured block size, else at each block size the
 *    workers' events use or their scraped `vllm:cache_config_info` names (so the first requests,
 *    routed before any worker has published, already have keys to leave pending);
 * 3. per candidate: the longest run of consecutive blocks it holds from the first, with tier credit
 *    (kv-block-index.ts), as tokens. A candidate with no subscription -> undefined (fallback for that
 *    worker only); a subscribed worker that has stored nothing yet -> 0; a worker whose index is known
 *    to miss a chain it holds (`lowerBound`: kv-block-index.ts `incomplete`) is answered, but the
 *    approximate tree's answer counts when larger (prefix-source.ts resolvePrefix), and the request
 *    counts as a fallback (`incomplete_index`);
 * 4. or, when longer, the run of blocks this router routed to it within `pendingTtlMs` that its events
 *    have not confirmed yet (pending-blocks.ts: a worker publishes a prompt's blocks only after its
 *    queue wait and prefill, and without this a burst sharing a new prefix would each see "nobody
 *    holds it"). `routed()` records them; blocks the worker's events store are confirmed (no longer
 *    pending) as the events arrive (`confirmStored`, from the subscriber's `stored` hook), so a block
 *    stored and then evicted is seen gone at once (pending-blocks.ts).
 *
 * Synchronous (runs inside the selection step); the memo is a WeakMap on the input. The only state
 * it changes while selecting is the pending set's own confirmation and expiry.
 */
import { MAX_SCORED_PROMPTS } from '../request/prompt-text.js';
import type { SelectionInput } from '../routing/policy.js';
import type { PrefixSource } from '../routing/prefix-source.js';
import type { RequestTokenizer, TokenizeFallback } from '../tokenize/request-tokens.js';
import type { Worker } from '../workers/worker.js';
import { keySeed, promptKeys } from './block-keys.js';
import { safeKey, type KvEventSubscriptions } from './kv-event-subscriptions.js';
import { PendingBlocks } from './pending-blocks.js';

const MAX_KEYS = 4096;
/** Worker ids per URL: its roles times the registration generations still pending (bounded). */
const MAX_IDS_PER_KEY = 16;

export type ExactFallback = TokenizeFallback | 'no_publisher' | 'incomplete_index';

interface Memo {
  /** The request's token ids, one list per sequence looked up (a batched prompt has several). */
  seqs: readonly ArrayLike<number>[] | undefined;
  /** Prompt tokens of a batch's prompts past MAX_SCORED_PROMPTS (never looked up). */
  unlooked: number;
  reason: ExactFallback | undefined;
  /** Some candidate's index was known to miss blocks it holds (answered with the tree too). */
  incomplete: boolean;
  /** Per block size: each sequence's block keys. */
  keys: Map<number, number[][]>;
  /**
   * Per block size, per sequence, per candidate id: the blocks its events showed when it was asked
   * (pending window only).
   */
  shown: Map<number, Map<string, number>[]> | undefined;
}

export interface KvPrefixSourceOptions {
  subscriptions: KvEventSubscriptions;
  tokenizer: RequestTokenizer;
  /** Block size to hash at; 0 = the sizes the workers' events use. */
  blockSize?: number;
  /** How long a routed prompt's blocks count as held before the worker's events confirm them; 0 = off. */
  pendingTtlMs?: number;
  /** Clock for pending blocks (milliseconds). Default Date.now. */
  now?: () => number;
  /** A worker's block size from its scraped metrics, when known (used with blockSize 0). */
  scrapedBlockSize?: (worker: Worker) => number | undefined;
  /**
   * A request cache_aware routed was not answered exactly (`fallback`), reported from routed()
   * (kv_aware reports its own: it does not pass this source's routed()).
   */
  onFallback?: (reason: ExactFallback) => void;
}

export class KvPrefixSource implements PrefixSource {
  readonly name = 'kv_events';
  readonly exact = true;
  private readonly memo = new WeakMap<SelectionInput, Memo>();
  readonly pending = new PendingBlocks();
  /** Subscription key -> the worker ids routed to under it (pending blocks are per worker id). */
  private readonly idsByKey = new Map<string, Set<string>>();
  private readonly pendingTtlMs: number;
  private readonly now: () => number;

  constructor(private readonly opts: KvPrefixSourceOptions) {
    this.pendingTtlMs = opts.pendingTtlMs ?? 0;
    this.now = opts.now ?? Date.now;
  }

  cachedTokens(input: SelectionInput, workers: readonly Worker[]): (number | undefined)[] | undefined {
    const subs = this.opts.subscriptions;
    if (!workers.some((w) => subs.publishes(w.url))) {
      this.memoOf(input, false).reason ??= 'no_publisher';
      return undefined;
    }
    const memo = this.memoOf(input, true);
    if (memo.seqs === undefined) return undefined;
    if (!memo.incomplete && workers.some((w) => subs.incomplete(w))) memo.incomplete = true;
    const configured = this.opts.blockSize ?? 0;
    const sizes = configured > 0 ? [configured] : this.learnedBlockSizes(workers);
    if (sizes.length === 0) return subs.cachedTokens([], 1, workers); // nothing stored anywhere yet
    let out: (number | undefined)[] | undefined;
    for (const bs of sizes) {
      let keys = memo.keys.get(bs);
      if (keys === undefined) {
        const seed = keySeed(subs.index.isAdapter(input.model) ? input.model : undefined);
        const salt = input.body?.cache_salt;
        const saltKey = typeof salt === 'string' ? salt : undefined;
        keys = memo.seqs.map((ids) => promptKeys(ids, bs, seed, saltKey));
        memo.keys.set(bs, keys);
      }
      let answer: (number | undefined)[] | undefined;
      for (let s = 0; s < keys.length; s++) {
        const one = subs.cachedTokens(keys[s]!, bs, workers);
        if (this.pendingTtlMs > 0) this.addPending(memo, one, keys[s]!, bs, s, workers);
        if (answer === undefined) answer = one;
        else for (let i = 0; i < one.length; i++) answer[i] = sumOrUndefined(answer[i], one[i]);
      }
      if (answer === undefined) continue;
      if (out === undefined) out = answer;
      else for (let i = 0; i < answer.length; i++) if (out[i] === undefined) out[i] = answer[i];
    }
    return out;
  }

  /**
   * The worker's index is known to miss blocks it holds (kv-block-index.ts `incomplete`: e.g. a
   * system prompt stored before a partial replay's window, which vLLM never announces again): its
   * answer is a lower bound, and the approximate tree's, when larger, counts (prefix-source.ts).
   */
  lowerBound(worker: Worker): boolean {
    return this.opts.subscriptions.incomplete(worker);
  }

  /** Tokens the worker's KV cache holds by its events; undefined when it publishes none. */
  heldTokens(worker: Worker): number | undefined {
    return this.opts.subscriptions.heldTokens(worker);
  }

  /** Block sizes the workers' events use, plus those their scraped metrics name. */
  private learnedBlockSizes(workers: readonly Worker[]): number[] {
    const sizes = this.opts.subscriptions.index.blockSizes();
    const scraped = this.opts.scrapedBlockSize;
    if (scraped === undefined) return sizes;
    let out: number[] | undefined;
    for (const w of workers) {
      const bs = scraped(w);
      if (bs === undefined || !(bs > 0) || sizes.includes(bs) || out?.includes(bs)) continue;
      (out ??= [...sizes]).push(bs);
    }
    return out ?? sizes;
  }

  /**
   * The policy routed `input` to `worker`: its prompt's blocks are pending there; a request not
   * answered exactly is reported (`onFallback`).
   */
  routed(input: SelectionInput, worker: Worker, nowMs: number): void {
    const reason = this.fallback(input);
    if (reason !== undefined) this.opts.onFallback?.(reason);
    if (this.pendingTtlMs <= 0 || !this.opts.subscriptions.publishes(worker.url)) return;
    const memo = this.memo.get(input);
    if (memo === undefined) return;
    for (const [bs, keys] of memo.keys) {
      for (let s = 0; s < keys.length; s++) {
        // Only what the worker was not shown to hold is pending (pending-blocks.ts: confirm's cost).
        const from = memo.shown?.get(bs)?.[s]?.get(worker.id) ?? 0;
        this.pending.add(worker.id, keys[s]!, nowMs, this.pendingTtlMs, from);
      }
    }
    this.noteId(worker);
  }

  /**
   * The worker (its subscription key: kv-event-subscriptions.ts `safeKey`) stored these blocks: they
   * are no longer pending on it (the subscriber's `stored` hook; see pending-blocks.ts).
   */
  confirmStored(workerKey: string, keys: readonly number[], indexKey?: string): void {
    // A data-parallel rank scheduled on its own is noted under its rank's index key (noteId).
    for (const k of indexKey === undefined ? [workerKey] : [workerKey, indexKey]) {
      const ids = this.idsByKey.get(k);
      if (ids === undefined) continue;
      for (const id of ids) this.pending.confirmKeys(id, keys);
    }
  }

  /**
   * The worker left its pool (departed, or replaced by a new generation: a new id): the blocks routed
   * to it are pending nowhere any more.
   */
  forget(worker: Worker): void {
    this.pending.dropWorker(worker.id);
    const key = worker.dpRank === undefined ? safeKey(worker.url) : `${safeKey(worker.url)}#${worker.dpRank}`;
    const ids = this.idsByKey.get(key);
    if (ids !== undefined && ids.delete(worker.id) && ids.size === 0) this.idsByKey.delete(key);
  }

  /** Remembers which worker ids (roles, generations) a subscription key names, for confirmStored. */
  private noteId(worker: Worker): void {
    const key = worker.dpRank === undefined ? safeKey(worker.url) : `${safeKey(worker.url)}#${worker.dpRank}`;
    let ids = this.idsByKey.get(key);
    if (ids === undefined) {
      if (this.idsByKey.size >= MAX_KEYS) this.idsByKey.clear(); // bounded: keys churn only with the fleet
      ids = new Set();
      this.idsByKey.set(key, ids);
    }
    if (ids.has(worker.id)) return;
    if (ids.size >= MAX_IDS_PER_KEY) ids.clear();
    ids.add(worker.id);
  }

  /**
   * Per subscribed candidate: confirm what its events show of sequence `seq`, then extend it by the
   * pending run after it.
   */
  private addPending(
    memo: Memo,
    answer: (number | undefined)[],
    keys: readonly number[],
    blockSize: number,
    seq: number,
    workers: readonly Worker[],
  ): void {
    const now = this.now();
    let bySeq = memo.shown?.get(blockSize);
    if (bySeq === undefined) {
      bySeq = [];
      (memo.shown ??= new Map()).set(blockSize, bySeq);
    }
    let shownBy = bySeq[seq];
    if (shownBy === undefined) {
      shownBy = new Map();
      bySeq[seq] = shownBy;
    }
    for (let i = 0; i < workers.length; i++) {
      const held = answer[i];
      if (held === undefined) continue;
      const id = (workers[i] as Worker).id;
      const shown = Math.floor(held / blockSize);
      shownBy.set(id, shown);
      if (shown > 0) this.pending.confirm(id, keys, shown);
      const more = this.pending.run(id, keys, now, shown);
      if (more > 0) answer[i] = Math.max(held, (shown + more) * blockSize);
    }
  }

  promptTokens(input: SelectionInput): number | undefined {
    const memo = this.memoOf(input, true);
    if (memo.seqs === undefined) return undefined;
    let n = memo.unlooked;
    for (const ids of memo.seqs) n += ids.length;
    return n;
  }

  /**
   * Why this request was not answered exactly (undefined when it was, or was never asked);
   * `incomplete_index` when some candidate's index misses blocks it holds (scored on the tree too).
   */
  fallback(input: SelectionInput): ExactFallback | undefined {
    const memo = this.memo.get(input);
    if (memo === undefined) return undefined;
    return memo.reason ?? (memo.incomplete ? 'incomplete_index' : undefined);
  }

  private memoOf(input: SelectionInput, tokenize: boolean): Memo {
    let memo = this.memo.get(input);
    if (memo === undefined) {
      memo = {
        seqs: undefined,
        unlooked: 0,
        reason: undefined,
        incomplete: false,
        keys: new Map(),
        shown: undefined,
      };
      this.memo.set(input, memo);
      if (!tokenize) return memo;
    } else if (
      !tokenize ||
      memo.seqs !== undefined ||
      (memo.reason !== undefined && memo.reason !== 'no_publisher')
    ) {
      return memo;
    }
    const r = this.opts.tokenizer.tokenize(input.model, input.body);
    if (r.ok) {
      const all = r.batch ?? [r.ids];
      memo.seqs = all.length > MAX_SCORED_PROMPTS ? all.slice(0, MAX_SCORED_PROMPTS) : all;
      memo.unlooked = 0;
      for (let i = MAX_SCORED_PROMPTS; i < all.length; i++) memo.unlooked += all[i]!.length;
      memo.reason = undefined;
    } else memo.reason = r.reason;
    return memo;
  }
}

/** a + b, or undefined when either is (a candidate with no subscription has no exact answer). */
function sumOrUndefined(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined || b === undefined ? undefined : a + b;
}
