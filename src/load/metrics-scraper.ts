/**
 * Scrapes every pool member's Prometheus `/metrics` page and records the load it reports on a
 * LoadBoard (load-board.ts), so routing sees load the router did not cause (another replica, a batch
 * job, a direct client).
 *
 * Schedule: a tick every `intervalMs` (config `scrape-interval-ms`, default 100; the Gateway API
 * inference extension uses 50; 0 = off) queues every URL that is not already being scraped; at most
 * `concurrency` (default 16) scrapes run at once. Each URL has at most one scrape in flight, so a slow
 * or hung worker occupies one slot until its timeout (`scrape-timeout-ms`, default 1000) and is merely
 * skipped by later ticks: the other workers keep their 100 ms cadence. Workers sharing a URL (a prefill
 * and a decode role of one process, the data-parallel ranks of one server) share one scrape.
 *
 * Board entries are keyed by Worker.key: the URL, or `<url>@<rank>` for a rank scheduled on its own
 * (workers/data-parallel.ts), whose sample is its engine's series alone (the server's `rank`-th
 * `engine` label: vLLM labels engines by global rank, metrics-parse.ts; a page without that engine's
 * series gives the rank a sample without load figures: in-flight counts).
 *
 * A scrape sends `GET <url>/metrics` (on the worker's own metrics port when it has one: scrapeBase),
 * takes the clock, this router's in-flight count on the URL and its queued prefills there (`queuedOf`)
 * at SEND time (see load-board.ts for why), reads at most 4 MiB of body and parses it (metrics-parse.ts).
 * Outcomes:
 * - 2xx from a process started later than any seen at the URL before (its `process_start_time_seconds`,
 *   process-starts.ts): the worker restarted under the same registration. `onRestarted` is told (the
 *   composition root starts a new registration lifetime there: fresh Workers) and nothing else is
 *   recorded: the page's load belongs to Workers that do not exist yet; the next scrape records theirs.
 * - 2xx: the sample is recorded (even one without load figures: the board then falls back to in-flight
 *   counts), `health.recordCheck(worker, true, now, 'metrics')`, and `health.recordSleep` with what
 *   the page says of vLLM's sleep mode (an asleep worker leaves selection until a page says awake),
 *   unless the page has no sleep gauge (it says nothing of sleep: a worker put to sleep through the
 *   router stays asleep) or a sleep or wake_up call through the router is newer than the page
 *   (`sleepSuperseded`).
 * - 404 / 405: the worker exports no metrics. Not a health failure (no sample is recorded, and the
 *   last one, from before it stopped exporting them, is forgotten: routing uses in-flight counts for
 *   it); the process answered, so it counts as a passed check of the `metrics` source (one that failed
 *   while the worker was down comes back).
 * - any other status, a connect error, a reset, a timeout, an oversized body: a failed check of the
 *   `metrics` source (worker-health.ts counts it apart from /health checks, with the same thresholds).
 * - a timeout whose timer itself fired over 250 ms late: the router's event loop was blocked, so the
 *   scrape says nothing about the worker (util/loop-stall.ts); reported as `router_stalled`, no check.
 *
 * Connections: one undici keep-alive Agent (idle sockets closed after 4 s, below the 5 s idle timeout
 * of Node and uvicorn servers). close() is idempotent: stops the ticks, aborts scrapes in flight (their
 * results are dropped), waits for them, destroys the Agent. The tick timer is unref'd.
 */
import type { Worker } from '../workers/worker.js';
import { joinUrl, type PageHandle } from '../util/http-page.js';
import { groupBy } from '../util/keyed-reads.js';
import { PagePoller } from '../util/page-poller.js';
import type { LoadBoard } from './load-board.js';
import { ProcessStarts } from './process-starts.js';
import {
  DEFAULT_METRIC_NAMES,
  parseLoadFigures,
  type LoadFigures,
  type MetricNames,
} from './metrics-parse.js';

export interface ScrapeHealthTarget {
  recordCheck(worker: Worker, ok: boolean, now: number, source: 'metrics'): void;
  /** What the page says of vLLM's sleep mode (worker-health.ts); a page without the gauge: awake. */
  recordSleep?(worker: Worker, asleep: boolean, now: number): void;
}

export interface MetricsScraperOptions {
  /** Current pool members, read at every tick. */
  readonly workers: () => Iterable<Worker>;
  readonly board: LoadBoard;
  readonly health?: ScrapeHealthTarget;
  /**
   * Whether a newer record of `url`'s sleep state than a page read at `takenAtMs` exists (a sleep or
   * wake_up call through the router in flight or ended since: routing/fleet-control.ts
   * `supersedes`): that page's sleep state is then not recorded. Default: never.
   */
  readonly sleepSuperseded?: (url: string, takenAtMs: number) => boolean;
  /** Tick interval, ms; 0 disables the scraper. */
  readonly intervalMs: number;
  /** Whole-request timeout of one scrape, ms. */
  readonly timeoutMs: number;
  /** Scrapes in flight at once. Default 16. */
  readonly concurrency?: number;
  readonly names?: Readonly<MetricNames>;
  /** Default '/metrics'. */
  readonly path?: string;
  /** Same clock as the router's. Default performance.now. */
  readonly clock?: () => number;
  /** A scrape failed (debug logs): `reason` is `status 503`, `timeout`, `too_large` or an error code. */
  readonly onScrapeFailed?: (url: string, reason: string) => void;
  /** A scrape succeeded (metrics). */
  readonly onScraped?: (url: string, figures: LoadFigures) => void;
  /** This router's requests on the worker whose first token has not arrived (its prefill backlog). */
  readonly queuedOf?: (worker: Worker) => number;
  /**
   * The page at `url` came from a process started later than the one seen there before (a restart
   * its registration did not show); `workers`: the members the scrape was sent for. Without it, start
   * times are not read.
   */
  readonly onRestarted?: (url: string, workers: readonly Worker[]) => void;
}

/** Defaults of config-schema.ts (`scrape-interval-ms`, `scrape-timeout-ms`, `scrape-concurrency`). */
export const DEFAULT_SCRAPE_OPTIONS = Object.freeze({ intervalMs: 100, timeoutMs: 1000, concurrency: 16 });

const MAX_BODY_BYTES = 4 * 1024 * 1024;

type Result =
  | { kind: 'ok'; figures: LoadFigures }
  | { kind: 'absent' }
  | { kind: 'failed'; reason: string }
  | { kind: 'stalled' };

export class MetricsScraper extends PagePoller {
  private readonly path: string;
  private readonly names: Readonly<MetricNames>;
  private readonly clock: () => number;
  private scrapes = 0;
  /** URLs whose first scrape completed (any outcome): warm-up's "every worker seen". */
  private readonly attempted = new Set<string>();
  /** The latest process start time seen per URL (restarts: onRestarted). */
  private readonly starts = new ProcessStarts();

  constructor(private readonly opts: MetricsScraperOptions) {
    super({
      intervalMs: opts.intervalMs,
      timeoutMs: opts.timeoutMs,
      concurrency: opts.concurrency ?? DEFAULT_SCRAPE_OPTIONS.concurrency,
      maxBytes: MAX_BODY_BYTES,
      onReadError: (url, reason) => opts.onScrapeFailed?.(url, reason),
    });
    this.path = opts.path ?? '/metrics';
    this.names = opts.names ?? DEFAULT_METRIC_NAMES;
    this.clock = opts.clock ?? (() => performance.now());
  }

  /** Scrapes in flight right now. */
  get scrapesInFlight(): number {
    return this.reads.inFlight;
  }

  /** Scrapes completed (any outcome) since start. */
  get completedScrapes(): number {
    return this.scrapes;
  }

  /**
   * Every current worker has had a scrape complete, successfully or not (warm-up: the router's load
   * picture comes from the workers). True when scraping is off.
   */
  seenAll(): boolean {
    if (this.off) return true;
    for (const w of this.opts.workers()) if (!this.attempted.has(w.url)) return false;
    return true;
  }

  /** Queues one round now (also what each tick does). */
  tick(): void {
    if (this.closed) return;
    let byUrl: Map<string, Worker[]>;
    try {
      byUrl = groupBy(this.opts.workers(), (w) => w.url);
    } catch {
      return; // the pools could not be read this tick; the next one tries again
    }
    const keys = new Set<string>();
    for (const workers of byUrl.values()) for (const w of workers) keys.add(w.key);
    this.opts.board.retain(keys);
    // Bounded by the fleet: a worker that left is forgotten (pods churn through new addresses).
    for (const url of this.attempted) if (!byUrl.has(url)) this.attempted.delete(url);
    this.starts.retain(byUrl);
    for (const [url, workers] of byUrl) {
      this.reads.add(url, async (handle) => {
        try {
          await this.scrape(url, workers, handle);
        } finally {
          this.scrapes += 1;
          this.attempted.add(url);
        }
      });
    }
  }

  protected round(): void {
    this.tick();
  }

  private async scrape(url: string, workers: Worker[], handle: PageHandle): Promise<void> {
    const takenAtMs = this.clock();
    // Per board key (the URL, or one rank of it): this router's requests there at SEND time.
    const atSample = new Map<string, { rank: number | undefined; local: number; queued: number }>();
    for (const w of workers) {
      let at = atSample.get(w.key);
      if (at === undefined) atSample.set(w.key, (at = { rank: w.dpRank, local: 0, queued: 0 }));
      at.local += w.load;
      at.queued += this.opts.queuedOf?.(w) ?? 0;
    }
    const perEngine = workers.some((w) => w.dpRank !== undefined);
    const result = await this.fetch(scrapeBase(url, workers), handle, perEngine);
    if (this.closed) return;
    const now = this.clock();
    switch (result.kind) {
      case 'ok': {
        const page = result.figures;
        const restarted = this.opts.onRestarted;
        if (restarted !== undefined && this.starts.observe(url, page.processStartSeconds)) {
          restarted(url, workers);
          return;
        }
        for (const [key, at] of atSample) {
          const figures =
            at.rank === undefined ? page : (page.engines?.get(String(at.rank)) ?? withoutLoad(page));
          this.opts.board.record(key, {
            takenAtMs,
            localAtSample: at.local,
            queuedAtSample: at.queued,
            figures,
          });
        }
        // A page without the sleep gauge says nothing of sleep mode: it must not wake a worker put to
        // sleep through the router (fleet-control.ts, admin/worker-sleep.ts); nor may one read while a
        // sleep or wake_up sent through it took effect.
        const asleep = this.opts.sleepSuperseded?.(url, takenAtMs) === true ? undefined : page.asleep;
        for (const w of workers) {
          this.opts.health?.recordCheck(w, true, now, 'metrics');
          if (asleep !== undefined) this.opts.health?.recordSleep?.(w, asleep, now);
        }
        this.opts.onScraped?.(url, page);
        return;
      }
      case 'absent':
        // No metrics exported (any more): an earlier page must not stand for the worker for good (a
        // stale sample shows no room: load/saturation.ts).
        for (const key of atSample.keys()) this.opts.board.forget(key);
        // But the process answered: a scrape source that failed while the worker was down (a restart)
        // must not stay unhealthy for good.
        for (const w of workers) this.opts.health?.recordCheck(w, true, now, 'metrics');
        return;
      case 'stalled':
        this.opts.onScrapeFailed?.(url, 'router_stalled');
        return;
      case 'failed':
        this.opts.onScrapeFailed?.(url, result.reason);
        for (const w of workers) this.opts.health?.recordCheck(w, false, now, 'metrics');
        return;
    }
  }

  private async fetch(baseUrl: string, handle: PageHandle, perEngine: boolean): Promise<Result> {
    const page = await this.readPage(joinUrl(baseUrl, this.path), handle);
    return page.kind === 'ok'
      ? { kind: 'ok', figures: parseLoadFigures(page.text, this.names, { perEngine }) }
      : page;
  }
}

/**
 * Where a worker's metrics page is: its URL, with the port replaced by the worker's own metrics port
 * when it has one (Kubernetes `vllm.ai/metrics-port`, `--service-discovery-metrics-port`, or a
 * registration's `metrics_port` metadata). Board entries stay keyed by the worker URL.
 */
export function scrapeBase(url: string, workers: readonly Worker[]): string {
  const port = workers.find((w) => w.metricsPort !== undefined)?.metricsPort;
  if (port === undefined) return url;
  const u = new URL(url);
  u.port = String(port);
  return u.toString();
}

/** A page's figures without its load counts: a rank whose engine the page does not break out. */
function withoutLoad(page: LoadFigures): LoadFigures {
  const { waiting: _w, running: _r, kvUsage: _k, engines: _e, ...rest } = page;
  return rest;
}
