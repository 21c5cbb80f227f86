/**
 * The queue the workers' page pollers run on (load/metrics-scraper.ts, discovery/models-poller.ts): at
 * most `concurrency` reads at once and at most one per key (a worker URL), so a slow or hung worker
 * occupies one slot until its timeout and is merely skipped by later rounds. Each read gets a
 * PageHandle (util/http-page.ts) through which close() aborts it.
 */
import type { PageHandle } from './http-page.js';

export type Read = (handle: PageHandle) => Promise<void>;

export class KeyedReads {
  /** Keys with a read queued or running. */
  private readonly busy = new Set<string>();
  private readonly queue: Array<{ key: string; read: Read }> = [];
  private readonly running = new Map<PageHandle, Promise<void>>();
  private closed = false;

  constructor(
    private readonly concurrency: number,
    /** A read threw instead of reporting its outcome (a bug): told here, never left unhandled. */
    private readonly onError: (key: string, err: unknown) => void = () => undefined,
  ) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError('concurrency must be an integer >= 1');
    }
  }

  /** Reads running right now. */
  get inFlight(): number {
    return this.running.size;
  }

  /** Queues `read` for `key` unless one is queued or running already (then false), and starts what fits. */
  add(key: string, read: Read): boolean {
    if (this.closed || this.busy.has(key)) return false;
    this.busy.add(key);
    this.queue.push({ key, read });
    this.pump();
    return true;
  }

  /** Drops the queue, aborts the reads running (their results are the pollers' to drop) and waits for them. */
  async close(): Promise<void> {
    this.closed = true;
    this.queue.length = 0;
    for (const handle of this.running.keys()) handle.abort?.();
    await Promise.all(this.running.values());
  }

  private pump(): void {
    while (!this.closed && this.running.size < this.concurrency && this.queue.length > 0) {
      const { key, read } = this.queue.shift()!;
      const handle: PageHandle = {};
      const done = read(handle)
        .catch((err: unknown) => {
          try {
            this.onError(key, err);
          } catch {
            // the error hook itself failed: nothing left to tell
          }
        }) // a throw must not wedge the key nor go unhandled
        .finally(() => {
          this.running.delete(handle);
          this.busy.delete(key);
          this.pump();
        });
      this.running.set(handle, done);
    }
  }
}

/** `items` grouped by `key`, in first-seen order (workers sharing a URL share one read). */
export function groupBy<T>(items: Iterable<T>, key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}
