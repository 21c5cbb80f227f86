/**
 * The worker's own word on a routed prompt, checked against the approximate tree's picture.
 *
 * vLLM reports, in a response's usage, how many of the prompt's tokens it found in its prefix cache
 * (`usage.prompt_tokens_details.cached_tokens`, with `--enable-prompt-tokens-details`; SGLang the
 * same field). The cache_aware tree only records what THIS router sent each worker, so it keeps
 * believing a worker holds a prompt after traffic the router never saw (another router replica,
 * direct clients) has evicted it there. When a report shows that a prefix the tree believed held was
 * gone (fewer than half of the believed tokens cached), the worker's cache, least recently used
 * first, has also dropped everything older than it: every part of the worker's picture this router
 * last sent before that prefix's last use goes too (RadixTree.evictTenantUpTo). What the worker was
 * last sent after that use stays, and so does the prompt just routed (the worker holds it now).
 *
 * Over-correction is bounded and cheap: a context another replica kept warm may be forgotten here
 * while the worker still holds it; it is then routed as a new prompt, to its prefix home
 * (prefix-home.ts), where every replica seeds the same opening.
 *
 * The report's prompt tokens convert the tree's characters to tokens (believed = held characters /
 * routed characters x prompt tokens), so no characters-per-token estimate enters the check.
 */
import type { CacheFeedback } from './policy.js';
import type { RadixTree } from './radix-tree.js';

/** Counts kept by a policy for `/metrics` (plain numbers: read at scrape time). */
export interface CacheReportCounts {
  /** Reports on a prompt the tree believed the worker held (in part or whole). */
  checked: number;
  /** Of those, reports that showed the worker had lost it (the tree was corrected). */
  stale: number;
  /** Characters of the worker's picture the corrections dropped. */
  droppedChars: number;
}

export function newCacheReportCounts(): CacheReportCounts {
  return { checked: 0, stale: 0, droppedChars: 0 };
}

/** A report short of this share of the believed cached tokens means the worker lost the prefix. */
export const STALE_SHARE = 0.5;
/** ... and short by at least this many tokens (one vLLM block: counts below it are rounding). */
export const STALE_MIN_TOKENS = 16;

/** Whether a report of `cachedTokens` contradicts a belief of `believedTokens` (see STALE_SHARE). */
export function isStale(believedTokens: number, cachedTokens: number): boolean {
  return cachedTokens < believedTokens * STALE_SHARE && believedTokens - cachedTokens >= STALE_MIN_TOKENS;
}

/** One routed request's check: what the tree believed the worker held when it was routed there. */
export class TreeCacheReport implements CacheFeedback {
  private done = false;

  constructor(
    private readonly tree: RadixTree,
    private readonly tenant: string,
    /** Characters of the routing text the tenant held as a prefix before this request. */
    private readonly heldChars: number,
    /** The tick of that prefix's last insert (RadixTree.insert's HeldBefore). */
    private readonly heldTick: number,
    /** Characters of the routing text. */
    private readonly textChars: number,
    private readonly counts: CacheReportCounts,
  ) {}

  observe(promptTokens: number, cachedTokens: number): void {
    if (this.done || !(promptTokens > 0) || !(cachedTokens >= 0) || this.textChars <= 0) return;
    this.done = true;
    const believed = (this.heldChars / this.textChars) * promptTokens;
    this.counts.checked += 1;
    if (!isStale(believed, cachedTokens)) return;
    this.counts.stale += 1;
    this.counts.droppedChars += this.tree.evictTenantUpTo(this.tenant, this.heldTick);
  }
}
