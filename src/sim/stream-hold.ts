/**
 * "Hold the stream until released": a test control of the simulator that stops a response at a known
 * point and keeps it open until the test says so, so tests synchronise on an event instead of on
 * token pacing (which a loaded CI machine stretches or squeezes).
 *
 *   const hold = sim.hold({ afterChunks: 1 });   // the next generation request is held
 *   ...send a request...
 *   await hold.reached();                         // headers + 1 SSE event are out; the rest waits
 *   ...assert on in-flight state (router load, records)...
 *   hold.release();                               // the response runs to its end
 *
 * Hold point: a streaming response is held after its headers and `afterChunks` SSE events (default 1;
 * 0 = right after the headers); a non-streaming response is held before its JSON answer. Only the
 * response is held: the engine runs on (tokens are counted, the slot is freed when generation ends),
 * and what it produces is written, in order, on release. A client that goes away while held ends the
 * request as usual (the held output is dropped).
 *
 * A hold applies to the next `count` (default 1) generation requests that enter the engine, oldest hold
 * first, optionally only those whose path contains `path` and only streaming or non-streaming ones (a
 * worker serving both P/D legs: hold the decode stream, not the prefill answer). release() lets every held response go on
 * and disarms the rest of the count. Pure bookkeeping: no timers, no I/O.
 */

export interface HoldOptions {
  /** Streaming: SSE events written before the hold (default 1; 0 = after the headers). */
  afterChunks?: number;
  /** How many matching requests to hold. Default 1. */
  count?: number;
  /** Path substring filter (e.g. '/v1/chat/completions'); default: every generation request. */
  path?: string;
  /** Only streaming (true) or only non-streaming (false) responses; default: both. */
  stream?: boolean;
}

export interface StreamHold {
  /** Responses stopped at the hold point right now. */
  readonly held: number;
  /** Resolves once `n` (default 1) responses have reached the hold point (ever). */
  reached(n?: number): Promise<void>;
  /** Lets every held response run to its end; later requests are no longer held. Idempotent. */
  release(): void;
}

/** The output of one held response: actions queued while held, replayed in order on release. */
export class OutputGate {
  private deferred: Array<() => void> = [];
  private holding = false;
  private dropped = false;

  constructor(
    private readonly hold: Hold,
    /** Streaming: SSE events written before the hold engages. */
    readonly afterChunks: number,
  ) {}

  get isHolding(): boolean {
    return this.holding;
  }

  /** The response reached its hold point: from now on, actions wait (unless already released). */
  engage(): void {
    if (this.holding || this.dropped || this.hold.isReleased) return;
    this.holding = true;
    this.hold.engaged(this);
  }

  /** Runs `action` now, or queues it while held. */
  run(action: () => void): void {
    if (this.holding) this.deferred.push(action);
    else action();
  }

  /** Release: replays the queued actions in order. */
  flow(): void {
    if (!this.holding) return;
    this.holding = false;
    const actions = this.deferred;
    this.deferred = [];
    for (const a of actions) a();
  }

  /** The request ended while held (client gone, simulator closed): drop what was queued. */
  drop(): void {
    this.dropped = true;
    this.holding = false;
    this.deferred = [];
    this.hold.dropped(this);
  }
}

interface Waiter {
  readonly n: number;
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
}

export class Hold implements StreamHold {
  private remaining: number;
  private released = false;
  private reachedTotal = 0;
  private readonly gates = new Set<OutputGate>();
  private waiters: Waiter[] = [];
  readonly afterChunks: number;
  readonly path: string | undefined;
  readonly stream: boolean | undefined;

  constructor(opts: HoldOptions = {}) {
    const count = opts.count ?? 1;
    const afterChunks = opts.afterChunks ?? 1;
    if (!Number.isInteger(count) || count < 1) throw new RangeError('hold count must be a positive integer');
    if (!Number.isInteger(afterChunks) || afterChunks < 0) {
      throw new RangeError('afterChunks must be an integer >= 0');
    }
    this.remaining = count;
    this.afterChunks = afterChunks;
    this.path = opts.path;
    this.stream = opts.stream;
  }

  get held(): number {
    return this.gates.size;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** Takes no more requests (released, or its count used up). */
  get exhausted(): boolean {
    return this.released || this.remaining === 0;
  }

  /** Whether this hold takes a request on `path` (and counts it). */
  take(path: string, stream: boolean): OutputGate | undefined {
    if (this.released || this.remaining === 0) return undefined;
    if (this.path !== undefined && !path.includes(this.path)) return undefined;
    if (this.stream !== undefined && this.stream !== stream) return undefined;
    this.remaining--;
    return new OutputGate(this, this.afterChunks);
  }

  reached(n = 1): Promise<void> {
    if (this.reachedTotal >= n) return Promise.resolve();
    return new Promise((resolve, reject) => this.waiters.push({ n, resolve, reject }));
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    this.remaining = 0;
    const gates = [...this.gates];
    this.gates.clear();
    for (const g of gates) g.flow();
  }

  /** The simulator closed: nothing will reach the hold point any more. */
  close(err: Error): void {
    this.remaining = 0;
    for (const w of this.waiters) w.reject(err);
    this.waiters = [];
  }

  engaged(gate: OutputGate): void {
    this.gates.add(gate);
    this.reachedTotal++;
    const keep: Waiter[] = [];
    for (const w of this.waiters) {
      if (this.reachedTotal >= w.n) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }

  dropped(gate: OutputGate): void {
    this.gates.delete(gate);
  }
}

/** The simulator's holds, oldest first. */
export class HoldQueue {
  private holds: Hold[] = [];

  add(opts?: HoldOptions): Hold {
    const h = new Hold(opts);
    this.holds.push(h);
    return h;
  }

  /** The gate for a generation request entering the engine on `path`, if a hold takes it. */
  take(path: string, stream: boolean): OutputGate | undefined {
    if (this.holds.length === 0) return undefined;
    let gate: OutputGate | undefined;
    for (const h of this.holds) {
      gate = h.take(path, stream);
      if (gate) break;
    }
    this.holds = this.holds.filter((h) => !h.exhausted);
    return gate;
  }

  close(err: Error): void {
    for (const h of this.holds) h.close(err);
    this.holds = [];
  }
}
