/**
 * The latest scraped load sample per worker URL, and the blend of that sample with what this router
 * did since (pure: time passed in, no timers, metrics or logging).
 *
 * A sample is what one `/metrics` page said (metrics-parse.ts) plus three numbers the scraper takes
 * when it SENDS the scrape: the time (`takenAtMs`), this router's in-flight requests on that URL
 * (`localAtSample`) and how many of them had not had their first token yet (`queuedAtSample`: its
 * prefill backlog, load/prefill-backlog.ts). Taking them at send time means a request routed while
 * the scrape is on the wire is counted twice at worst (in the sample and in the local delta), never
 * zero times: bursts spread.
 *
 * Blend, for a worker whose router-side in-flight count is `localNow`:
 *   external = max(0, waiting + running - localAtSample)   (what reached the worker another way:
 *                                                            another router, a batch job, a client)
 *   ahead    = external + localNow
 *   waitingElsewhere = min(external, max(0, waiting - queuedAtSample))
 * so requests this router sent since the sample count on top of it, and those that finished since
 * stop counting, without waiting for the next scrape. A P/D prefill leg counts on its prefill worker
 * until the leg ends, a decode until its response ends: that is what `worker.load` already counts.
 * `waitingElsewhere` is the part of the worker's queue this router did not put there: the cost model
 * (routing/cost-model.ts) prices its own queued prefills by their tokens, these per request, and the
 * requests that are running (decoding) by the batch they slow, not as a queue.
 *
 * Foreign share: a moving average, over the samples in which the worker had any request (waiting +
 * running > 0), of `external / (waiting + running)`: how much of the worker's load reached it another
 * way. 0 for a worker only this router uses (and until a busy sample is seen), about 0.5 with a second
 * replica sending as much, near 1 for a worker kept busy by direct clients. The cost model reads its
 * mean over a pool to tell whether any other router or client shares the fleet (prefix-home.ts).
 * Weight FOREIGN_SHARE_ALPHA per sample: a few hundred milliseconds of 100 ms scrapes.
 *
 * Staleness: a sample older than `staleAfterMs` (config `load-stale-ms`, default 1000: ten missed
 * 100 ms scrapes) is ignored and the view falls back to the in-flight count alone (`ahead = localNow`,
 * source `in_flight`, `stale`), as does a URL never scraped (its /metrics is 404: it exports none) or
 * whose page had neither waiting nor running (not `stale`: no load figures were to be had).
 */
import type { LoadFigures } from './metrics-parse.js';

export interface LoadSample {
  /** Clock time the scrape was sent. */
  readonly takenAtMs: number;
  /** This router's in-flight requests on the URL when the scrape was sent. */
  readonly localAtSample: number;
  /** Of those, the ones whose first token had not arrived (its prefill backlog). Default 0. */
  readonly queuedAtSample?: number;
  readonly figures: LoadFigures;
}

export interface LoadView {
  /** 'scraped': a fresh sample blended with local counts; 'in_flight': local counts only. */
  readonly source: 'scraped' | 'in_flight';
  /** Requests queued or running ahead of a new one (blended). */
  readonly ahead: number;
  /** Scraped queue length (fresh samples only). */
  readonly waiting?: number;
  /** The scraped queue minus this router's own queued prefills at the sample (fresh samples only). */
  readonly waitingElsewhere?: number;
  /** Scraped KV-cache usage in [0, 1] (fresh samples only). */
  readonly kvUsage?: number;
  /** Age of the sample used (fresh samples only). */
  readonly ageMs?: number;
  /** 'in_flight' because the latest sample with load figures is too old (its scrapes fail or lag). */
  readonly stale?: true;
}

export const DEFAULT_STALE_AFTER_MS = 1000;

/** Weight of one busy sample in the foreign-share moving average (~5 samples: 0.5 s of 100 ms scrapes). */
export const FOREIGN_SHARE_ALPHA = 0.2;

export class LoadBoard {
  private readonly samples = new Map<string, LoadSample>();
  private readonly foreign = new Map<string, number>();

  constructor(readonly staleAfterMs: number = DEFAULT_STALE_AFTER_MS) {
    if (!Number.isFinite(staleAfterMs) || staleAfterMs <= 0) {
      throw new RangeError(`staleAfterMs must be > 0, got ${staleAfterMs}`);
    }
  }

  record(url: string, sample: LoadSample): void {
    const prev = this.samples.get(url);
    // Scrapes of one URL never overlap, but keep the newest if a late one lands anyway.
    if (prev !== undefined && prev.takenAtMs > sample.takenAtMs) return;
    this.samples.set(url, sample);
    const { waiting, running } = sample.figures;
    const total = (waiting ?? 0) + (running ?? 0);
    if (!(total > 0) || !Number.isFinite(total)) return;
    const seen = Math.max(0, total - sample.localAtSample) / total;
    const share = this.foreign.get(url) ?? 0;
    this.foreign.set(url, share + FOREIGN_SHARE_ALPHA * (seen - share));
  }

  /** The share of the worker's recent load that this router did not send, in [0, 1] (see the header). */
  foreignShare(url: string): number {
    return this.foreign.get(url) ?? 0;
  }

  /** The latest sample, fresh or not. */
  latest(url: string): LoadSample | undefined {
    return this.samples.get(url);
  }

  /** The latest sample if it is fresh at `nowMs` (not older than `staleAfterMs`). */
  fresh(url: string, nowMs: number): LoadSample | undefined {
    const s = this.samples.get(url);
    return s !== undefined && nowMs - s.takenAtMs <= this.staleAfterMs ? s : undefined;
  }

  /**
   * Forgets one key's sample and foreign share: a new process registered there (a new generation) must
   * not be read through the old one's last page (its queue, its KV capacity) until its own first scrape.
   */
  forget(url: string): void {
    this.samples.delete(url);
    this.foreign.delete(url);
  }

  /** Drops URLs no longer in any pool (keeps the map bounded by the fleet). */
  retain(urls: ReadonlySet<string>): void {
    for (const url of this.samples.keys()) if (!urls.has(url)) this.samples.delete(url);
    for (const url of this.foreign.keys()) if (!urls.has(url)) this.foreign.delete(url);
  }

  view(url: string, localNow: number, nowMs: number): LoadView {
    const s = this.samples.get(url);
    if (s === undefined) return { source: 'in_flight', ahead: localNow };
    const ageMs = Math.max(0, nowMs - s.takenAtMs);
    const { waiting, running, kvUsage } = s.figures;
    if (waiting === undefined && running === undefined) return { source: 'in_flight', ahead: localNow };
    if (ageMs > this.staleAfterMs) return { source: 'in_flight', ahead: localNow, stale: true };
    const external = Math.max(0, (waiting ?? 0) + (running ?? 0) - s.localAtSample);
    return {
      source: 'scraped',
      ahead: external + localNow,
      ...(waiting === undefined
        ? {}
        : { waiting, waitingElsewhere: Math.min(external, Math.max(0, waiting - (s.queuedAtSample ?? 0))) }),
      ...(kvUsage === undefined ? {} : { kvUsage }),
      ageMs,
    };
  }
}
