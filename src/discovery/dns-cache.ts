/**
 * DnsCache: the answers of host-name lookups for discovery, with expiry (pure: no timers, no I/O;
 * time is passed in).
 *
 * Rules (thresholds are the defaults):
 * - a good answer is fresh for `ttlMs` (30 s); after that it is STALE: still served (the worker is
 *   heartbeating and its address rarely changes) while the caller refreshes it in the background;
 * - a failed lookup is remembered for `negativeTtlMs` (5 s), so a sender repeating an unresolvable
 *   name cannot trigger a lookup storm;
 * - a failed REFRESH of a name with a good answer keeps that answer (stale again after
 *   `negativeTtlMs`, when the next refresh may run);
 * - at most `maxNames` (1,024) names are kept; recording a name makes it the newest and the oldest
 *   is evicted beyond the bound.
 */

export interface DnsCacheOptions {
  readonly ttlMs?: number;
  readonly negativeTtlMs?: number;
  readonly maxNames?: number;
}

export const DEFAULT_DNS_CACHE_OPTIONS: Readonly<Required<DnsCacheOptions>> = Object.freeze({
  ttlMs: 30_000,
  negativeTtlMs: 5_000,
  maxNames: 1024,
});

/** What the cache knows about a name at `now`. */
export type DnsCacheState =
  | { readonly state: 'fresh'; readonly ip: string }
  /** A good answer past its TTL: serve it, and refresh. */
  | { readonly state: 'stale'; readonly ip: string }
  /** A recent failure: reject without a lookup. */
  | { readonly state: 'failed' }
  /** Nothing usable: look it up. */
  | { readonly state: 'miss' };

interface Answer {
  readonly ip: string | undefined;
  readonly expiresAtMs: number;
}

const MISS: DnsCacheState = Object.freeze({ state: 'miss' });
const FAILED: DnsCacheState = Object.freeze({ state: 'failed' });

export class DnsCache {
  private readonly opts: Readonly<Required<DnsCacheOptions>>;
  private readonly answers = new Map<string, Answer>();

  constructor(opts: DnsCacheOptions = {}) {
    this.opts = { ...DEFAULT_DNS_CACHE_OPTIONS, ...opts };
  }

  get size(): number {
    return this.answers.size;
  }

  get(name: string, now: number): DnsCacheState {
    const a = this.answers.get(name);
    if (a === undefined) return MISS;
    if (a.ip !== undefined) return { state: a.expiresAtMs > now ? 'fresh' : 'stale', ip: a.ip };
    return a.expiresAtMs > now ? FAILED : MISS;
  }

  /**
   * Records the outcome of a lookup (`ip` undefined = failed) and returns the address to use now
   * (the previous good one when a refresh failed), or undefined.
   */
  record(name: string, ip: string | undefined, now: number): string | undefined {
    const previous = this.answers.get(name);
    const answer: Answer =
      ip === undefined && previous?.ip !== undefined
        ? { ip: previous.ip, expiresAtMs: now + this.opts.negativeTtlMs }
        : { ip, expiresAtMs: now + (ip === undefined ? this.opts.negativeTtlMs : this.opts.ttlMs) };
    this.answers.delete(name);
    this.answers.set(name, answer);
    if (this.answers.size > this.opts.maxNames) {
      const oldest = this.answers.keys().next().value;
      if (oldest !== undefined) this.answers.delete(oldest);
    }
    return answer.ip;
  }
}
