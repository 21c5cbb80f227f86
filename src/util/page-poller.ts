/**
 * What the pollers of the workers' pages share (load/metrics-scraper.ts: `/metrics`;
 * discovery/models-poller.ts: `/v1/models`): a round every `intervalMs` (0 = off), the reads of a
 * round on a KeyedReads queue (one per URL, `concurrency` at once), one keep-alive Agent, and an
 * idempotent close() that stops the timer, aborts the reads in flight (their results are dropped:
 * `closed` is set first), waits for them and destroys the Agent. The timer is unref'd. A subclass
 * says what a round queues (`round`) and reads its pages with `readPage`.
 */
import type { Agent } from 'undici';
import { getPage, pageAgent, type PageHandle, type PageResult } from './http-page.js';
import { KeyedReads } from './keyed-reads.js';

export interface PagePollerSettings {
  /** Round interval, ms; 0 disables the poller. */
  readonly intervalMs: number;
  /** Whole-request timeout of one read, ms. */
  readonly timeoutMs: number;
  /** Reads in flight at once. */
  readonly concurrency: number;
  /** The most bytes of a page read. */
  readonly maxBytes: number;
  /** A read threw instead of reporting its outcome. */
  readonly onReadError: (url: string, reason: string) => void;
  /** Request headers of every read (e.g. the workers' API key). */
  readonly headers?: Readonly<Record<string, string>>;
}

export abstract class PagePoller {
  protected readonly reads: KeyedReads;
  /** Set by close() before anything else: a read that ends after it drops its result. */
  protected closed = false;
  private readonly agent: Agent;
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;

  protected constructor(private readonly settings: PagePollerSettings) {
    if (!Number.isFinite(settings.intervalMs) || settings.intervalMs < 0)
      throw new RangeError('intervalMs must be >= 0');
    if (!Number.isFinite(settings.timeoutMs) || settings.timeoutMs <= 0)
      throw new RangeError('timeoutMs must be > 0');
    this.reads = new KeyedReads(settings.concurrency, (url, err) =>
      settings.onReadError(url, `error: ${(err as Error)?.message ?? String(err)}`),
    );
    this.agent = pageAgent(settings.timeoutMs);
  }

  /** Starts the rounds, the first one now (no-op when off, already started, or closed). */
  start(): void {
    if (this.timer || this.closed || this.off) return;
    this.round();
    this.timer = setInterval(() => this.round(), this.settings.intervalMs);
    this.timer.unref();
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

  /** intervalMs is 0. */
  protected get off(): boolean {
    return this.settings.intervalMs === 0;
  }

  /** start() ran and close() did not. */
  protected get started(): boolean {
    return this.timer !== undefined;
  }

  /** One round: queue its reads on `reads`. */
  protected abstract round(): void;

  protected readPage(url: string, handle: PageHandle): Promise<PageResult> {
    return getPage(
      this.agent,
      url,
      this.settings.timeoutMs,
      this.settings.maxBytes,
      handle,
      this.settings.headers,
    );
  }
}
