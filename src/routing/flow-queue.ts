/**
 * The requests flow control holds while their pool is saturated (routing/flow-control.ts), in the order
 * they are let go: the highest priority first (routing/objectives.ts); within one priority, the flows
 * (`x-gateway-inference-fairness-id`: a tenant, a user; '' without one) take turns, one request each,
 * and each flow's requests leave in arrival order. So a priority band is never starved by another of
 * the same priority that sends more, and a lower band waits while a higher one has requests.
 *
 * Pure data structure: times passed in; no timers, metrics or logging. `push` and `pop` are O(1) (a
 * new priority band: O(bands), a handful); `displace` is O(flows of a band); `take`, `remove`,
 * `below` and `expired` scan the requests.
 */

export interface QueuedRequest<T> {
  readonly item: T;
  readonly priority: number;
  readonly flow: string;
  /** Clock time it was queued. */
  readonly queuedAt: number;
  /** The memory it holds (its request body's bytes); absent: 0. */
  readonly bytes?: number;
}

export class FlowQueue<T> {
  /** priority -> flow -> its requests, oldest first; a Map's order is the flows' turn order. */
  private readonly bands = new Map<number, Map<string, QueuedRequest<T>[]>>();
  /** The bands' priorities, highest first. */
  private priorities: number[] = [];
  private count = 0;
  private held = 0;

  get size(): number {
    return this.count;
  }

  /** The `bytes` of every queued request. */
  get bytes(): number {
    return this.held;
  }

  push(entry: QueuedRequest<T>): void {
    let band = this.bands.get(entry.priority);
    if (band === undefined) {
      band = new Map();
      this.bands.set(entry.priority, band);
      this.priorities = [...this.bands.keys()].sort((a, b) => b - a);
    }
    const flow = band.get(entry.flow);
    if (flow === undefined) band.set(entry.flow, [entry]);
    else flow.push(entry);
    this.count++;
    this.held += entry.bytes ?? 0;
  }

  /** The next request to let go (see the header), removed; undefined when empty. */
  pop(): QueuedRequest<T> | undefined {
    return this.take(() => true);
  }

  /**
   * The next request to let go among those `accept` takes (see the header: the highest priority,
   * flows in turn; within a flow the oldest accepted one, so a request that cannot go yet does not
   * hold back a later one that can), removed; undefined when `accept` takes none.
   */
  take(accept: (entry: QueuedRequest<T>) => boolean): QueuedRequest<T> | undefined {
    for (const p of this.priorities) {
      const band = this.bands.get(p) as Map<string, QueuedRequest<T>[]>;
      for (const [key, flow] of band) {
        const at = flow.findIndex(accept);
        if (at < 0) continue;
        const [entry] = flow.splice(at, 1) as [QueuedRequest<T>];
        // The flow's turn is over: to the back of the band, or gone when it has nothing left.
        band.delete(key);
        if (flow.length > 0) band.set(key, flow);
        this.dropIfEmpty(p, band);
        this.count--;
        this.held -= entry.bytes ?? 0;
        return entry;
      }
    }
    return undefined;
  }

  /** Removes `entry` (its client went away); false when it is not queued (already let go). */
  remove(entry: QueuedRequest<T>): boolean {
    const band = this.bands.get(entry.priority);
    const flow = band?.get(entry.flow);
    const at = flow?.indexOf(entry) ?? -1;
    if (band === undefined || flow === undefined || at < 0) return false;
    flow.splice(at, 1);
    if (flow.length === 0) band.delete(entry.flow);
    this.dropIfEmpty(entry.priority, band);
    this.count--;
    this.held -= entry.bytes ?? 0;
    return true;
  }

  /** How many requests, and how many `bytes`, are queued below `priority` (what `displace` may free). */
  below(priority: number): { count: number; bytes: number } {
    let count = 0;
    let bytes = 0;
    for (const p of this.priorities) {
      if (p >= priority) continue;
      for (const flow of (this.bands.get(p) as Map<string, QueuedRequest<T>[]>).values()) {
        count += flow.length;
        for (const e of flow) bytes += e.bytes ?? 0;
      }
    }
    return { count, bytes };
  }

  /**
   * Makes room for a request of `priority`: removes and returns the newest request of the lowest
   * band when that band is below `priority`; undefined when none is (nothing held matters less).
   */
  displace(priority: number): QueuedRequest<T> | undefined {
    const lowest = this.priorities[this.priorities.length - 1];
    if (lowest === undefined || lowest >= priority) return undefined;
    const band = this.bands.get(lowest) as Map<string, QueuedRequest<T>[]>;
    let newest: QueuedRequest<T> | undefined;
    for (const flow of band.values()) {
      const last = flow[flow.length - 1] as QueuedRequest<T>;
      if (newest === undefined || last.queuedAt >= newest.queuedAt) newest = last;
    }
    if (newest !== undefined) this.remove(newest);
    return newest;
  }

  /** Removes and returns every request queued at or before `cutoff` (oldest of each flow first). */
  expired(cutoff: number): QueuedRequest<T>[] {
    const out: QueuedRequest<T>[] = [];
    for (const p of [...this.priorities]) {
      const band = this.bands.get(p) as Map<string, QueuedRequest<T>[]>;
      for (const [key, flow] of [...band]) {
        let n = 0;
        while (n < flow.length && (flow[n] as QueuedRequest<T>).queuedAt <= cutoff) n++;
        if (n === 0) continue;
        out.push(...flow.splice(0, n));
        if (flow.length === 0) band.delete(key);
      }
      this.dropIfEmpty(p, band);
    }
    this.count -= out.length;
    for (const e of out) this.held -= e.bytes ?? 0;
    return out;
  }

  /** Every queued request, in no particular order (for closing). */
  drain(): QueuedRequest<T>[] {
    const out: QueuedRequest<T>[] = [];
    for (const band of this.bands.values()) for (const flow of band.values()) out.push(...flow);
    this.bands.clear();
    this.priorities = [];
    this.count = 0;
    this.held = 0;
    return out;
  }

  private dropIfEmpty(priority: number, band: Map<string, QueuedRequest<T>[]>): void {
    if (band.size > 0) return;
    this.bands.delete(priority);
    this.priorities = this.priorities.filter((p) => p !== priority);
  }
}
