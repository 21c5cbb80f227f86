/**
 * Admission control of the simulated engine: at most `maxRunning` sequences run; the rest wait FIFO
 * (or by priority, below).
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
 * Optional `eligible(item)`: whether the item may be scheduled at all now (a LoRA request whose adapter
 * has no slot: sim/lora-slots.ts). vLLM's scheduler passes over such a request and goes on with the
 * ones behind it, so an ineligible item is skipped, not waited for; it starts once it is eligible and
 * heads the eligible items.
 *
 * Optional `priority(item)`: vLLM's `--scheduling-policy priority`, whose waiting queue is ordered by
 * (priority, arrival): a lower value goes first, equal values first come, first served. Without it
 * every item has priority 0 (vLLM's default `fcfs`). The items wait in one insertion-ordered Set per
 * priority, the levels kept sorted (a handful in practice), so append, cancel and pop-front stay cheap.
 *
 * Optional `weight(item)`: the running slots an item takes (a request of several sequences, each a
 * running request to vLLM's scheduler); default 1. `running` and `waiting` count slots. An item that
 * needs more slots than are free waits, unless nothing runs (it then starts alone, past the limit,
 * as the oversized-prompt rule above).
 *
 * Pure data structure: no timers, metrics or logging.
 */
export class RunQueue<T> {
  private runningCount = 0;
  private waitingCount = 0;
  /** Waiting items per priority, in arrival order; `order` holds the priorities, ascending. */
  private readonly levels = new Map<number, Set<T>>();
  private readonly order: number[] = [];

  constructor(
    readonly maxRunning: number,
    private readonly fits: (item: T) => boolean = () => true,
    private readonly eligible?: (item: T) => boolean,
    private readonly priority?: (item: T) => number,
    private readonly weight: (item: T) => number = () => 1,
  ) {
    if (!Number.isInteger(maxRunning) || maxRunning < 1) {
      throw new RangeError('maxRunning must be a positive integer');
    }
  }

  get running(): number {
    return this.runningCount;
  }

  get waiting(): number {
    return this.waitingCount;
  }

  /** True when `item` got a slot and must start now; false when it was queued. */
  submit(item: T): boolean {
    if (this.noEligibleWaiting() && this.mayStart(item) && (this.eligible?.(item) ?? true)) {
      this.runningCount += this.weight(item);
      return true;
    }
    this.enqueue(item);
    return false;
  }

  /** Frees a running item's slots (one without `item`); the caller then starts what `take` hands out. */
  finish(item?: T): void {
    const w = item === undefined ? 1 : this.weight(item);
    if (this.runningCount < w) throw new Error('RunQueue.finish() without a running item');
    this.runningCount -= w;
  }

  /** The waiting head when it may start now (it then owns a slot), else undefined. */
  take(): T | undefined {
    for (const item of this.waitingItems()) {
      if (this.eligible !== undefined && !this.eligible(item)) continue;
      if (!this.mayStart(item)) return undefined;
      this.cancel(item);
      this.runningCount += this.weight(item);
      return item;
    }
    return undefined;
  }

  /** The waiting items in the order they would start: by priority, then oldest first. */
  *waitingItems(): IterableIterator<T> {
    for (const p of this.order) yield* this.levels.get(p) as Set<T>;
  }

  /** Removes a waiting item. Returns false when it was not waiting (already running or unknown). */
  cancel(item: T): boolean {
    const p = this.priority?.(item) ?? 0;
    const level = this.levels.get(p);
    if (level === undefined || !level.delete(item)) return false;
    this.waitingCount -= this.weight(item);
    if (level.size === 0) {
      this.levels.delete(p);
      this.order.splice(this.order.indexOf(p), 1);
    }
    return true;
  }

  /** Drops every waiting item and resets the running count (engine shutdown). */
  clear(): T[] {
    const items = [...this.waitingItems()];
    this.levels.clear();
    this.order.length = 0;
    this.waitingCount = 0;
    this.runningCount = 0;
    return items;
  }

  private enqueue(item: T): void {
    const p = this.priority?.(item) ?? 0;
    let level = this.levels.get(p);
    if (level === undefined) {
      level = new Set<T>();
      this.levels.set(p, level);
      let at = this.order.length;
      while (at > 0 && (this.order[at - 1] as number) > p) at--;
      this.order.splice(at, 0, p);
    }
    level.add(item);
    this.waitingCount += this.weight(item);
  }

  private noEligibleWaiting(): boolean {
    if (this.waitingCount === 0) return true;
    if (this.eligible === undefined) return false;
    for (const item of this.waitingItems()) if (this.eligible(item)) return false;
    return true;
  }

  private mayStart(item: T): boolean {
    if (this.runningCount === 0) return true;
    return this.runningCount + this.weight(item) <= this.maxRunning && this.fits(item);
  }
}
