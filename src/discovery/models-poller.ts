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
 * empty one; a 401 from a server started with `--api-key`, whose list needs the key) keeps
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
import type { Agent } from 'undici';
import { getPage, joinUrl, pageAgent, type PageHandle } from '../util/http-page.js';
import { groupBy, KeyedReads } from '../util/keyed-reads.js';
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
  /** One read ended (`reason`: the failure, for debug logs). */
  readonly onPolled?: (url: string, outcome: ModelsPollOutcome, reason?: string) => void;
}

export const DEFAULT_MODELS_INTERVAL_MS = 5_000;

const MAX_BODY_BYTES = 1024 * 1024;

export class ModelsPoller {
  private readonly agent: Agent;
  private readonly reads: KeyedReads;
  /** `url generation` of the members read at least once (any outcome). */
  private readonly attempted = new Set<string>();
  /** URLs that pollNew found busy with a read started before it: looked at again once it ends. */
  private readonly recheck = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: ModelsPollerOptions) {
    if (!Number.isFinite(opts.intervalMs) || opts.intervalMs < 0)
      throw new RangeError('intervalMs must be >= 0');
    if (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs <= 0)
      throw new RangeError('timeoutMs must be > 0');
    this.reads = new KeyedReads(opts.concurrency ?? 4, (url, err) =>
      opts.onPolled?.(url, 'failed', `error: ${(err as Error)?.message ?? String(err)}`),
    );
    this.agent = pageAgent(opts.timeoutMs);
  }

  /** Starts polling (no-op when intervalMs is 0, already started, or closed). */
  start(): void {
    if (this.timer || this.closed || this.opts.intervalMs === 0) return;
    this.round(true);
    this.timer = setInterval(() => this.round(true), this.opts.intervalMs);
    this.timer.unref();
  }

  /** Reads the members never read yet (a worker joined). No-op before start() or after close(). */
  pollNew(): void {
    if (this.timer !== undefined) this.round(false);
  }

  /** Every current member has been read once, with any outcome (warm-up). True when polling is off. */
  seenAll(): boolean {
    if (this.opts.intervalMs === 0) return true;
    for (const w of this.opts.workers()) if (!this.attempted.has(memberKey(w))) return false;
    return true;
  }

  /** Reads in flight right now. */
  get readsInFlight(): number {
    return this.reads.inFlight;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      if (this.timer) clearInterval(this.timer);
      this.timer = undefined;
      await this.reads.close();
      await this.agent.destroy();
    })();
    return this.closing;
  }

  private round(all: boolean): void {
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
          if (this.recheck.delete(url)) setImmediate(() => this.round(false));
        }
      });
      if (!queued && !all) this.recheck.add(url);
    }
  }

  private async read(url: string, handle: PageHandle): Promise<void> {
    const page = await getPage(
      this.agent,
      joinUrl(url, '/v1/models'),
      this.opts.timeoutMs,
      MAX_BODY_BYTES,
      handle,
    );
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
