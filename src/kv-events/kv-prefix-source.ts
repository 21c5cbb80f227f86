/**
 * The exact PrefixSource (routing/prefix-source.ts): cached prompt tokens per candidate from the
 * workers' own KV-cache events.
 *
 * Per request (memoised per SelectionInput, so cachedTokens() and promptTokens() tokenize once):
 * 1. tokenize the request as vLLM will (tokenize/request-tokens.ts); a request that cannot be tokenized
 *    (no tokenizer for the model, multimodal parts, a template error, a batch) -> undefined: the next
 *    source (the approximate radix tree) answers, and `fallback(input)` tells why;
 * 2. block keys of the prompt's full blocks (block-keys.ts), seeded with the model name when events
 *    named it as a LoRA adapter, else the base seed, with the request's `cache_salt` in block 0 (vLLM
 *    salts the first block's hash); at the configured block size, else at each block size the
 *    workers' events use;
 * 3. per candidate: the longest run of consecutive blocks it holds from the first, with tier credit
 *    (kv-block-index.ts), as tokens. A candidate with no subscription -> undefined (fallback for that
 *    worker only); a subscribed worker that has stored nothing yet -> 0.
 *
 * Read-only and synchronous (runs inside the selection step); the memo is a WeakMap on the input.
 */
import type { SelectionInput } from '../routing/policy.js';
import type { PrefixSource } from '../routing/prefix-source.js';
import type { RequestTokenizer, TokenizeFallback } from '../tokenize/request-tokens.js';
import type { Worker } from '../workers/worker.js';
import { keySeed, promptKeys } from './block-keys.js';
import type { KvEventSubscriptions } from './kv-event-subscriptions.js';

export type ExactFallback = TokenizeFallback | 'no_publisher';

interface Memo {
  ids: readonly number[] | undefined;
  reason: ExactFallback | undefined;
  keys: Map<number, number[]>;
}

export interface KvPrefixSourceOptions {
  subscriptions: KvEventSubscriptions;
  tokenizer: RequestTokenizer;
  /** Block size to hash at; 0 = the sizes the workers' events use. */
  blockSize?: number;
}

export class KvPrefixSource implements PrefixSource {
  readonly name = 'kv_events';
  private readonly memo = new WeakMap<SelectionInput, Memo>();

  constructor(private readonly opts: KvPrefixSourceOptions) {}

  cachedTokens(input: SelectionInput, workers: readonly Worker[]): (number | undefined)[] | undefined {
    const subs = this.opts.subscriptions;
    if (!workers.some((w) => subs.publishes(w.url))) {
      this.memoOf(input, false).reason ??= 'no_publisher';
      return undefined;
    }
    const memo = this.memoOf(input, true);
    if (memo.ids === undefined) return undefined;
    const configured = this.opts.blockSize ?? 0;
    const sizes = configured > 0 ? [configured] : subs.index.blockSizes();
    if (sizes.length === 0) return subs.cachedTokens([], 1, workers); // nothing stored anywhere yet
    let out: (number | undefined)[] | undefined;
    for (const bs of sizes) {
      let keys = memo.keys.get(bs);
      if (keys === undefined) {
        const seed = keySeed(subs.index.isAdapter(input.model) ? input.model : undefined);
        const salt = input.body?.cache_salt;
        keys = promptKeys(memo.ids, bs, seed, typeof salt === 'string' ? salt : undefined);
        memo.keys.set(bs, keys);
      }
      const answer = subs.cachedTokens(keys, bs, workers);
      if (out === undefined) out = answer;
      else for (let i = 0; i < answer.length; i++) if (out[i] === undefined) out[i] = answer[i];
    }
    return out;
  }

  promptTokens(input: SelectionInput): number | undefined {
    return this.memoOf(input, true).ids?.length;
  }

  /** Why this request was not answered exactly (undefined when it was, or was never asked). */
  fallback(input: SelectionInput): ExactFallback | undefined {
    return this.memo.get(input)?.reason;
  }

  private memoOf(input: SelectionInput, tokenize: boolean): Memo {
    let memo = this.memo.get(input);
    if (memo === undefined) {
      memo = { ids: undefined, reason: undefined, keys: new Map() };
      this.memo.set(input, memo);
      if (!tokenize) return memo;
    } else if (
      !tokenize ||
      memo.ids !== undefined ||
      (memo.reason !== undefined && memo.reason !== 'no_publisher')
    ) {
      return memo;
    }
    const r = this.opts.tokenizer.tokenize(input.model, input.body);
    if (r.ok) {
      memo.ids = r.ids;
      memo.reason = undefined;
    } else memo.reason = r.reason;
    return memo;
  }
}
