/**
 * Learns which workers have vLLM's generation paused from their own `GET /is_paused`
 * (`{"is_paused": true}`; vLLM serves it with VLLM_SERVER_DEV_MODE=1), for the pauses this router did
 * not forward (routing/fleet-control.ts records those at once): a trainer that pauses engines
 * directly, or through another router replica. vLLM's /metrics say nothing of a pause, so without
 * this a replica kept routing to an engine another replica had paused, and each request waited
 * there for the rest of the update.
 *
 * Schedule: every `intervalMs` (config `pause-poll-ms`, default 1000; 0 = off) every member URL is
 * read, at most `concurrency` at once, one per URL, each bounded by `timeoutMs`. Outcomes: an answer
 * is reported through `onPaused` (the composition root records it on every worker at the URL,
 * unless a fleet control call to that URL ended after the read started: the call's own record is
 * newer); a 404 / 405 says the worker does not serve it (dev mode off, SGLang): that process is not
 * read again (a new registration generation at the URL is); anything else keeps what was known.
 * No health effect: the checks and the scraper judge the worker.
 *
 * close() is idempotent (util/page-poller.ts).
 */
import { joinUrl, type PageHandle } from '../util/http-page.js';
import { groupBy } from '../util/keyed-reads.js';
import { PagePoller } from '../util/page-poller.js';
import type { Worker } from '../workers/worker.js';

export interface PausePollerOptions {
  /** Current pool members, read at every round. */
  readonly workers: () => Iterable<Worker>;
  /** Round interval, ms; 0 disables the poller. */
  readonly intervalMs: number;
  /** Whole-request timeout of one read, ms. */
  readonly timeoutMs: number;
  /** Reads in flight at once. Default 4. */
  readonly concurrency?: number;
  /** The workers' API key (vllm serve --api-key): sent as `Authorization: Bearer <key>`. */
  readonly apiKey?: string;
  readonly clock: () => number;
  /** The worker at `url` answered; `readAt`: the clock when the read was sent. */
  readonly onPaused: (url: string, paused: boolean, readAt: number) => void;
}

export const DEFAULT_PAUSE_POLL_MS = 1_000;

const MAX_BODY_BYTES = 4 * 1024;

export class PausePoller extends PagePoller {
  /** `url generation` of the members that answered 404 / 405: not read again. */
  private readonly absent = new Set<string>();

  constructor(private readonly opts: PausePollerOptions) {
    super({
      intervalMs: opts.intervalMs,
      timeoutMs: opts.timeoutMs,
      concurrency: opts.concurrency ?? 4,
      maxBytes: MAX_BODY_BYTES,
      onReadError: () => undefined,
      ...(opts.apiKey ? { headers: { authorization: `Bearer ${opts.apiKey}` } } : {}),
    });
  }

  protected round(): void {
    if (this.closed) return;
    let groups: Map<string, Worker[]>;
    try {
      groups = groupBy(this.opts.workers(), (w) => w.url);
    } catch {
      return; // the pools could not be read this round; the next one tries again
    }
    const current = new Set<string>();
    for (const [url, workers] of groups) {
      const keys = workers.map(memberKey);
      for (const k of keys) current.add(k);
      if (keys.every((k) => this.absent.has(k))) continue;
      this.reads.add(url, (handle) => this.read(url, keys, handle));
    }
    for (const k of this.absent) if (!current.has(k)) this.absent.delete(k);
  }

  private async read(url: string, keys: readonly string[], handle: PageHandle): Promise<void> {
    const readAt = this.opts.clock();
    const page = await this.readPage(joinUrl(url, '/is_paused'), handle);
    if (this.closed) return;
    if (page.kind === 'absent') {
      for (const k of keys) this.absent.add(k);
      return;
    }
    if (page.kind !== 'ok') return;
    const paused = pausedOf(page.text);
    if (paused !== undefined) this.opts.onPaused(url, paused, readAt);
  }
}

/** `{"is_paused": true}` -> true; anything else -> undefined. */
function pausedOf(text: string): boolean | undefined {
  try {
    const v = (JSON.parse(text) as { is_paused?: unknown }).is_paused;
    return typeof v === 'boolean' ? v : undefined;
  } catch {
    return undefined;
  }
}

function memberKey(w: Worker): string {
  return `${w.url} ${w.generation}`;
}
