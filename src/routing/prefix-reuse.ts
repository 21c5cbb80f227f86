/**
 * Prefix reuse: how often recent prompts started with an opening seen shortly before, so that the
 * prefix home (prefix-home.ts) is paid for only by traffic that shares prefixes.
 *
 * Why: the home sends a prompt nobody holds to a worker every router replica agrees on, even when its
 * predicted wait is up to `prefixHomeMargin` x the prompt's prefill worse than the best worker's. That
 * pays off when later requests reuse the prefix (one copy in the fleet instead of one per replica), and
 * is pure loss when nothing is ever reused: measured on the no-sharing workload (unique 8 KB prompts),
 * the default cache_aware was 0.89-0.94x round robin at margin 3 and 1.00x at margin 0.
 *
 * Rule: a sliding window of the last `window` keys (the home's key hash: the prompt's first
 * `prefixHomeKeyChars` characters) records, for each request, whether its key was already in the
 * window. rate = (reused + PRIOR) / (observed + PRIOR), with PRIOR pseudo-observations counted as
 * reused, so a fresh router (or one that has seen little traffic) assumes sharing and its first new
 * prefixes still agree with the other replicas. The policy scales the home's margin by the rate:
 * traffic whose openings repeat (system prompts, documents, tenants' contexts, conversations: rates
 * near 1) keeps the whole margin; unique prompts (rate near 0) follow the cost model alone.
 * Replicas see the same traffic mix, so they estimate similar rates and keep agreeing.
 *
 * Bounded: the window holds at most `window` keys (a ring and a Map of counts). Pure: no timers,
 * metrics or logging.
 */

/** Pseudo-observations counted as reused: the rate of a router that has seen nothing is 1. */
export const REUSE_PRIOR = 8;

export class PrefixReuse {
  private readonly ring: Uint32Array;
  private readonly reusedFlags: Uint8Array;
  private readonly counts = new Map<number, number>();
  private next = 0;
  private filled = 0;
  private reusedInWindow = 0;

  constructor(readonly window = 1024) {
    if (!Number.isInteger(window) || window < 1)
      throw new RangeError(`window must be an integer >= 1: ${window}`);
    this.ring = new Uint32Array(window);
    this.reusedFlags = new Uint8Array(window);
  }

  /** Records one request's key; returns whether the key was already in the window. */
  observe(keyHash: number): boolean {
    const key = keyHash >>> 0;
    const reused = this.counts.has(key);
    if (this.filled === this.window) {
      const old = this.ring[this.next] as number;
      const n = (this.counts.get(old) as number) - 1;
      if (n === 0) this.counts.delete(old);
      else this.counts.set(old, n);
      this.reusedInWindow -= this.reusedFlags[this.next] as number;
    } else {
      this.filled += 1;
    }
    this.ring[this.next] = key;
    this.reusedFlags[this.next] = reused ? 1 : 0;
    this.reusedInWindow += reused ? 1 : 0;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    this.next = (this.next + 1) % this.window;
    return reused;
  }

  /** Share of recent requests whose key had been seen within the window, in [0, 1] (1 before any). */
  rate(): number {
    return (this.reusedInWindow + REUSE_PRIOR) / (this.filled + REUSE_PRIOR);
  }

  /** Distinct keys in the window (for tests and stats). */
  get distinct(): number {
    return this.counts.size;
  }
}
