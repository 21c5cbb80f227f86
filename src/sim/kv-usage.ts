/**
 * KV-cache blocks held by the simulator's active requests: what vLLM's `vllm:kv_cache_usage_perc`
 * measures (1 - free blocks / total blocks, where a cached block no request uses is free: evictable).
 *
 * Algorithm (mirrors vLLM's block pool reference counts, on the simulator's chained block hashes):
 * - An admitted request holds its prompt's full blocks, keyed by their chained hash, with a reference
 *   count per hash: requests sharing a prefix share its blocks (counted once), as vLLM's prefix
 *   caching shares physical blocks.
 * - It also holds private blocks for its tokens past the last full prompt block: the partial tail of the
 *   prompt plus every generated token, ceil((tailTokens + generated) / blockTokens). They grow as it
 *   decodes (read through `generated()` at query time, so decoding costs nothing here).
 * - `release` drops a request's references (finished, aborted, reset); when nothing runs, usage is 0,
 *   while the prefix cache (prefix-cache.ts) keeps its evictable blocks for later hits.
 * - usage = (distinct shared blocks + private blocks) / capacity, capped at 1 (the simulator does not
 *   preempt; a fleet driven past its capacity reads as full).
 * - As the prefix cache's BlockPool (SimulatorOptions.sharedBlockPool): held blocks are never evicted
 *   and private blocks take the cache's room; the engine then admits a request only when its blocks
 *   fit (its output included); only the output of requests admitted earlier, not reserved when a later
 *   one was admitted, can push usage past 1 (vLLM would preempt there).
 *
 * Pure data structure: no timers, no metrics, no logging.
 */

import type { BlockPool } from './prefix-cache.js';

export interface KvHold {
  readonly hashes: readonly number[];
  readonly tailTokens: number;
  /** Tokens generated so far (read when usage is computed). */
  readonly generated: () => number;
}

export class KvBlockUsage implements BlockPool {
  private readonly refs = new Map<number, number>();
  private readonly holds = new Set<KvHold>();

  constructor(
    readonly blockTokens: number,
    readonly capacityBlocks: number,
  ) {
    if (!Number.isInteger(blockTokens) || blockTokens < 1) throw new RangeError('blockTokens must be >= 1');
    if (!Number.isInteger(capacityBlocks) || capacityBlocks < 1) {
      throw new RangeError('capacityBlocks must be >= 1');
    }
  }

  /** Takes references on `hold`'s blocks until `release(hold)`. Holding the same object twice is a no-op. */
  hold(hold: KvHold): void {
    if (this.holds.has(hold)) return;
    this.holds.add(hold);
    for (const h of hold.hashes) this.refs.set(h, (this.refs.get(h) ?? 0) + 1);
  }

  /** Drops `hold`'s references; idempotent. */
  release(hold: KvHold): void {
    if (!this.holds.delete(hold)) return;
    for (const h of hold.hashes) {
      const n = this.refs.get(h)! - 1;
      if (n === 0) this.refs.delete(h);
      else this.refs.set(h, n);
    }
  }

  /** Requests holding blocks. */
  get active(): number {
    return this.holds.size;
  }

  /** True while a request holds the block. */
  isHeld(hash: number): boolean {
    return this.refs.has(hash);
  }

  /** Blocks past the requests' full prompt blocks: prompt tails and generated tokens. */
  privateBlocks(): number {
    let n = 0;
    for (const h of this.holds) n += Math.ceil((h.tailTokens + h.generated()) / this.blockTokens);
    return n;
  }

  /** Blocks in use: distinct shared prompt blocks plus every request's private blocks. */
  usedBlocks(): number {
    return this.refs.size + this.privateBlocks();
  }

  /** Fraction of capacity in use, in [0, 1]. */
  usage(): number {
    return Math.min(1, this.usedBlocks() / this.capacityBlocks);
  }
}
