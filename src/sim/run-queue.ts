/**
 * Admission control of the simulated engine: at most `maxRunning` sequences run; the rest wait FIFO.
 *
 * `submit` either takes a free slot (returns true: the caller starts the sequence now) or appends the
 * item to the waiting queue. `finish` frees the slot of a running sequence; `take` then hands out the
 * next waiting item that may start (the caller starts it and calls `take` again until it returns
 * undefined). `cancel` removes a waiting item (a client that aborted before its prefill started). The
 * waiting queue is an insertion-ordered Set, so append, pop-front and cancel are all O(1).
 *
 * Optional `fits(item)`: whether the item's KV blocks fit now (vLLM's scheduler admits a waiting
 * request only when the block pool can allocate its prompt; sim/kv-usage.ts). The queue is first come,
 * first served as vLLM's default scheduler: a head that does not fit blocks the items behind it, and a
 * head always starts when nothing runs (a prompt larger than the pool must not wait forever).
 *
 * Pure data structure: no timers, metrics or logging.
 */
export class RunQueue<T> {
  private runningCount = 0;
  private readonly waitingItems = new Set<T>();

  constructor(
    readonly maxRunning: number,
    private readonly fits: (item: T) => boolean = () => true,
  ) {
    if (!Number.isInteger(maxRunning) || maxRunning < 1) {
      throw new RangeError('maxRunning must be a positive integer');
    }
  }

  get running(): number {
    return this.runningCount;
  }

  get waiting(): number {
    return this.waitingItems.size;
  }

  /** True when `item` got a slot and must start now; false when it was queued. */
  submit(item: T): boolean {
    if (this.waitingItems.size === 0 && this.mayStart(item)) {
      this.runningCount++;
      return true;
    }
    this.waitingItems.add(item);
    return false;
  }

  /** Frees one running slot; the caller then starts what `take` hands out. */
  finish(): void {
    if (this.runningCount === 0) throw new Error('RunQueue.finish() without a running item');
    this.runningCount--;
  }

  /** The waiting head when it may start now (it then owns a slot), else undefined. */
  take(): T | undefined {
    const next = this.waitingItems.values().next();
    if (next.done || !this.mayStart(next.value)) return undefined;
    this.waitingItems.delete(next.value);
    this.runningCount++;
    return next.value;
  }

  /** Removes a waiting item. Returns false when it was not waiting (already running or unknown). */
  cancel(item: T): boolean {
    return this.waitingItems.delete(item);
  }

  /** Drops every waiting item and resets the running count (engine shutdown). */
  clear(): T[] {
    const items = [...this.waitingItems];
    this.waitingItems.clear();
    this.runningCount = 0;
    return items;
  }

  private mayStart(item: T): boolean {
    return this.runningCount < this.maxRunning && (this.runningCount === 0 || this.fits(item));
  }
}
