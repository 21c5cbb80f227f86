/**
 * Admission control of the simulated engine: at most `maxRunning` sequences run; the rest wait FIFO.
 *
 * `submit` either takes a free slot (returns true: the caller starts the sequence now) or appends the
 * item to the waiting queue. `finish` frees the slot of a running sequence and returns the next waiting
 * item, which now owns that slot (the caller starts it). `cancel` removes a waiting item (a client that
 * aborted before its prefill started). The waiting queue is an insertion-ordered Set, so append, pop-
 * front and cancel are all O(1).
 *
 * Pure data structure: no timers, metrics or logging.
 */
export class RunQueue<T> {
  private runningCount = 0;
  private readonly waitingItems = new Set<T>();

  constructor(readonly maxRunning: number) {
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
    if (this.runningCount < this.maxRunning) {
      this.runningCount++;
      return true;
    }
    this.waitingItems.add(item);
    return false;
  }

  /** Frees one running slot. Returns the waiting item that takes it over (the caller starts it), if any. */
  finish(): T | undefined {
    if (this.runningCount === 0) throw new Error('RunQueue.finish() without a running item');
    const next = this.waitingItems.values().next();
    if (next.done) {
      this.runningCount--;
      return undefined;
    }
    this.waitingItems.delete(next.value);
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
}
