/**
 * Learns what every pool member serves from its `GET /v1/models` list (vLLM, SGLang and any
 * OpenAI-compatible server have it), for model-aware candidates (workers/served-models.ts): a request
 * for a LoRA adapter or a second served name reaches only the workers that serve it.
 *
 * Schedule: every `intervalMs` (config `models-interval-ms`, default 5000; 0 = off) every member URL is
 * read again (the list changes only when an adapter is loaded or unloaded at run time), and a URL never
 * read (a worker that joined, or re-registered at its URL: a new process may serve other models) is read
 * when `pollNew()` is called (the registry changed): at once, or right after the read of that URL
 * already running ends. At most
 * `concurrency` reads run at once, one per URL, each bounded by `timeoutMs` and 1 MiB.
 * Outcomes: a list is recorded on the catalog; a 404 / 405 records that the worker has none (its metrics
 * label is used again); anything else (a failure, a timeout, a body that is not a model list or is an
 * empty one; a 401 from a server started with `--api-key` when `apiKey` (`--worker-api-key`) is not
 * its key) keeps
 * what was known, since a worker's models do not change because one read failed, and is reported
 * through `onPolled` (the router counts outcomes on /metrics). No health effect: the health checks
 * and the metrics scraper judge the worker.
 *
 * The catalog forgets departed and re-registered workers through its owner (composition/wiring.ts:
 * registry changes and the pools' `replaced` hook).
 *
 * close() is idempotent: stops the timer, aborts the reads in flight (their results are dropped),
 * waits for them, destroys the Agent. The timer is unref'd.
 */
import { joinUrl, type PageHandle } from '../util/http-page.js';
import { groupBy } from '../util/keyed-reads.js';
import { PagePoller } from '../util/page-poller.js';
import { parseModelList, type ModelCatalog } from '../workers/served-models.js';
import type { Worker } from '../workers/worker.js';

export type ModelsPollOutcome = 'listed' | 'absent' | 'invalid' | 'failed';

export interface ModelsPollerOptions {
  /** Current pool members, read at every round. */
  readonly workers: () => Iterable<Worker>;
  readonly catalog: ModelCatalog;
  /** Re-read interval, ms; 0 disables the poller. */
  readonly intervalMs: number;
  /** Whole-request timeout of one read, ms. */
  readonly timeoutMs: number;
  /** Reads in flight at once. Default 4. */
  readonly concurrency?: number;
  /** The workers' API key (vllm serve --api-key): sent as `Authorization: Bearer <key>`. */
  readonly apiKey?: string;
  /** One read ended (`reason`: the failure, for debug logs). */
  readonly onPolled?: (url: string, outcome: ModelsPollOutcome, reason?: string) => void;
}

export const DEFAULT_MODELS_INTERVAL_MS = 5_000;

const MAX_BODY_BYTES = 1024 * 1024;

export class ModelsPoller extends PagePoller {
  /** `url generation` of the members read at least once (any outcome). */
  private readonly attempted = new Set<string>();
  /** URLs that pollNew found busy with a read started before it: looked at again once it ends. */
  private readonly recheck = new Set<string>();
  /** URLs that refresh() found busy: read again once the read in flight ends. */
  private readonly rereads = new Set<string>();

  constructor(private readonly opts: ModelsPollerOptions) {
    super({
      intervalMs: opts.intervalMs,
      timeoutMs: opts.timeoutMs,
      concurrency: opts.concurrency ?? 4,
      maxBytes: MAX_BODY_BYTES,
      onReadError: (url, reason) => opts.onPolled?.(url, 'failed', reason),
      ...(opts.apiKey ? { headers: { authorization: `Bearer ${opts.apiKey}` } } : {}),
    });
  }

  /** Reads the members never read yet (a worker joined). No-op before start() or after close(). */
  pollNew(): void {
    if (this.started) this.queue(false);
  }

  /**
   * Reads the lists of the members at `urls` now (their models changed: a runtime LoRA load). A URL
   * being read already is read again once that read ends. No-op before start() or after close().
   */
  refresh(urls: Iterable<string>): void {
    if (!this.started || this.closed) return;
    const wanted = new Set(urls);
    for (const w of this.opts.workers()) {
      if (!wanted.delete(w.url)) continue;
      const url = w.url;
      const queued = this.reads.add(url, (handle) => this.read(url, handle));
      // A read in flight may have started before the change: read again once it ends (read() below).
      if (!queued) this.rereads.add(url);
    }
  }

  /** Every current member has been read once, with any outcome (warm-up). True when polling is off. */
  seenAll(): boolean {
    if (this.off) return true;
    for (const w of this.opts.workers()) if (!this.attempted.has(memberKey(w))) return false;
    return true;
  }

  /** Reads in flight right now. */
  get readsInFlight(): number {
    return this.reads.inFlight;
  }

  protected round(): void {
    this.queue(true);
  }

  /** Queues a read of every member (`all`) or of those never read. */
  private queue(all: boolean): void {
    if (this.closed) return;
    let byUrl: Map<string, string[]>;
    try {
      const groups = groupBy(this.opts.workers(), (w) => w.url);
      byUrl = new Map(Array.from(groups, ([url, ws]) => [url, ws.map(memberKey)]));
    } catch {
      return; // the pools could not be read this round; the next one tries again
    }
    if (all) {
      const current = new Set<string>();
      for (const keys of byUrl.values()) for (const k of keys) current.add(k);
      for (const k of this.attempted) if (!current.has(k)) this.attempted.delete(k);
    }
    for (const [url, keys] of byUrl) {
      if (!all && keys.every((k) => this.attempted.has(k))) continue;
      const queued = this.reads.add(url, async (handle) => {
        try {
          await this.read(url, handle);
        } finally {
          for (const k of keys) this.attempted.add(k);
          // A new generation that joined while this read ran (it may have read the old process).
          if (this.recheck.delete(url)) setImmediate(() => this.queue(false));
        }
      });
      if (!queued && !all) this.recheck.add(url);
    }
  }

  private async read(url: string, handle: PageHandle): Promise<void> {
    try {
      await this.readList(url, handle);
    } finally {
      if (this.rereads.delete(url)) setImmediate(() => this.refresh([url]));
    }
  }

  private async readList(url: string, handle: PageHandle): Promise<void> {
    const page = await this.readPage(joinUrl(url, '/v1/models'), handle);
    if (this.closed) return;
    switch (page.kind) {
      case 'ok': {
        const served = parseModelList(page.text);
        if (served === undefined) return this.opts.onPolled?.(url, 'invalid', 'not a model list');
        this.opts.catalog.recordListed(url, served);
        return this.opts.onPolled?.(url, 'listed');
      }
      case 'absent':
        this.opts.catalog.recordListed(url, undefined);
        return this.opts.onPolled?.(url, 'absent');
      case 'stalled':
        return this.opts.onPolled?.(url, 'failed', 'router_stalled');
      case 'failed':
        return this.opts.onPolled?.(url, 'failed', page.reason);
    }
  }
}

function memberKey(w: Worker): string {
  return `${w.url} ${w.generation}`;
}
