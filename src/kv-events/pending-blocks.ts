/**
 * Blocks this router has just sent to a worker and that the worker's KV events have not confirmed yet.
 *
 * Why: a worker publishes `BlockStored` only once its engine has computed the prompt (after its queue
 * wait and prefill), so for that long the exact index says the worker holds nothing of a prompt the
 * router sent it a moment ago. A burst of requests sharing a new prefix would then each see "nobody
 * holds it" and seed it on several workers (the approximate tree never has this gap: it records the
 * prompt when it routes it). The exact prefix source therefore also counts, per worker, the leading
 * blocks of prompts it routed there within the last `ttlMs` (kv-prefix-source.ts).
 *
 * Confirmation: as soon as the worker's events store a block, its pending entry is dropped
 * (`confirmKeys`, from the subscriber's `stored` hook: kv-prefix-source.ts `confirmStored`), so a later
 * eviction of that block is seen at once; a lookup that sees the block also drops it (`confirm`).
 * Confirming only at lookups (as until 2026-12-03) missed a context stored and evicted between two of
 * its visits: its blocks stayed "held" by their pending entries for the rest of the TTL, which on a
 * small, busy cache is often. Measured on eviction-pressure with KV events (`BENCH_DUMP_DECISIONS`,
 * bench/routing-ab.ts): of the requests sent to a worker the router saw holding over half their
 * prompt, 125 of 552 missed there with one router and 144 of 484 with two; with the pending window cut
 * to 100 ms (what eager confirmation amounts to on the simulator, which stores a prompt's blocks on
 * arrival) 30 of 487 and 20 of 403, and the hit rate rose from 55.5% to 59.1% (one router) and from
 * 46.1% to 51.6% (two), 2 interleaved runs each. An entry the events never confirm (the request
 * failed) expires after `ttlMs`.
 *
 * Cost: the caller records only the blocks the worker was not yet shown to hold (kv-prefix-source.ts),
 * so a prompt's pending keys on a worker are the runs past what its events showed at each routing:
 * they end where the shown run now ends or beyond, and are contiguous from there back to where the
 * oldest unconfirmed one began. `confirm` therefore walks back from the last shown block and stops at
 * the first key not pending: O(1) for the usual lookup, where everything shown was confirmed before
 * (walking every shown block of every candidate on every request cost ~9% of the router's CPU in
 * exact mode, measured on multi-turn). A pending key left below a gap is harmless while its block
 * stays shown (runs start after the shown ones) and expires with its TTL.
 *
 * Pure: the caller passes the time; expired entries are removed lazily when read and when the total
 * passes `maxKeys` (oldest first), so memory is bounded without timers. The default bound, 262,144 keys
 * (~20 MB), holds 3 s of 600 requests/s of 2k-token prompts at 16 tokens per block; beyond it the
 * oldest pending blocks are forgotten first (they are the likeliest to be confirmed already).
 */
export class PendingBlocks {
  /** worker id -> block key -> expiry (ms); insertion order = oldest first within a worker. */
  private readonly byWorker = new Map<string, Map<number, number>>();
  private total = 0;

  constructor(private readonly maxKeys = 1 << 18) {
    if (!(maxKeys > 0)) throw new RangeError(`maxKeys must be > 0, got ${maxKeys}`);
  }

  get size(): number {
    return this.total;
  }

  /**
   * Records `keys` from index `from` (a prompt's chained block keys past those the worker was shown
   * to hold) as pending on `worker` for `ttlMs` from `nowMs`.
   */
  add(worker: string, keys: readonly number[], nowMs: number, ttlMs: number, from = 0): void {
    if (keys.length <= from) return;
    let map = this.byWorker.get(worker);
    if (map === undefined) {
      map = new Map();
      this.byWorker.set(worker, map);
    }
    for (let i = from; i < keys.length; i++) {
      const key = keys[i] as number;
      if (map.delete(key)) this.total -= 1;
      map.set(key, nowMs + ttlMs);
      this.total += 1;
    }
    if (this.total > this.maxKeys) this.shrink(nowMs);
  }

  /** Consecutive keys of `keys` from index `from` pending (unexpired) on `worker` at `nowMs`. */
  run(worker: string, keys: readonly number[], nowMs: number, from = 0): number {
    const map = this.byWorker.get(worker);
    if (map === undefined) return 0;
    let n = 0;
    for (let i = from; i < keys.length; i++) {
      const key = keys[i] as number;
      const expiry = map.get(key);
      if (expiry === undefined) break;
      if (expiry <= nowMs) {
        map.delete(key);
        this.total -= 1;
        break;
      }
      n += 1;
    }
    return n;
  }

  /**
   * The worker's events now show the first `blocks` of `keys`: they are no longer pending. Walks back
   * from the last shown block to the first key that is not pending (see the header).
   */
  confirm(worker: string, keys: readonly number[], blocks: number): void {
    const map = this.byWorker.get(worker);
    if (map === undefined) return;
    for (let i = Math.min(blocks, keys.length) - 1; i >= 0; i--) {
      if (!map.delete(keys[i] as number)) break;
      this.total -= 1;
    }
    if (map.size === 0) this.byWorker.delete(worker);
  }

  /** The worker's events stored these blocks: none of them is pending there any more. O(keys). */
  confirmKeys(worker: string, keys: readonly number[]): void {
    const map = this.byWorker.get(worker);
    if (map === undefined) return;
    for (const key of keys) if (map.delete(key)) this.total -= 1;
    if (map.size === 0) this.byWorker.delete(worker);
  }

  dropWorker(worker: string): void {
    const map = this.byWorker.get(worker);
    if (map === undefined) return;
    this.total -= map.size;
    this.byWorker.delete(worker);
  }

  /** Removes expired entries, then the oldest, until at most 3/4 of maxKeys remain. */
  private shrink(nowMs: number): void {
    const target = Math.floor((this.maxKeys * 3) / 4);
    for (const [worker, map] of this.byWorker) {
      for (const [key, expiry] of map) {
        if (expiry > nowMs) continue;
        map.delete(key);
        this.total -= 1;
      }
      if (map.size === 0) this.byWorker.delete(worker);
    }
    if (this.total <= target) return;
    // Oldest first across workers (by expiry: every entry's TTL is the caller's), not worker by worker.
    const all: Array<{ expiry: number; worker: string; key: number }> = [];
    for (const [worker, map] of this.byWorker)
      for (const [key, expiry] of map) all.push({ expiry, worker, key });
    all.sort((a, b) => a.expiry - b.expiry);
    for (const e of all) {
      if (this.total <= target) break;
      const map = this.byWorker.get(e.worker) as Map<number, number>;
      map.delete(e.key);
      this.total -= 1;
      if (map.size === 0) this.byWorker.delete(e.worker);
    }
  }
}
