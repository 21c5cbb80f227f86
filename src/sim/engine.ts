/**
 * The simulated vLLM engine loop: admission, prefill, and batched decode steps.
 *
 * A submitted sequence waits FIFO (by priority first, when it has one) for a running slot, and on a
 * shared block pool for its KV blocks (`spec.fits`; run-queue.ts). Once admitted, its prefill takes `spec.admit()` ms (computed by the
 * caller from timing-model.ts); the first token is produced when the prefill ends. The sequence then
 * joins the decode batch: ONE engine timer per simulator fires every `interTokenMs(running)` and
 * produces one token for every decoding sequence (continuous batching).
 * This keeps the cost at one timer per prefill plus one per step, not one per token per request,
 * which matters when a benchmark pushes thousands of streams through several simulators in one process.
 *
 * Prefill lanes (timing.prefillLanes > 0): each prefill is booked on the lane that frees first; it
 * starts when that lane is free and ends `admit()` ms later, so prefills on one worker queue behind
 * each other (bounded prefill throughput). A cancelled prefill keeps its booking (the compute was
 * already scheduled); lanes only affect the delay to the first token, never the slot accounting.
 * With a step token budget (timing.maxNumBatchedTokens > 0) prefill and decode share the engine, as
 * in vLLM, whose every step runs one token of each decoding sequence and the prefill chunks that fit
 * the budget: each decode step armed while prefill compute is booked lasts that much longer, by at
 * most the budget's worth of prefill (timing-model.ts `prefillChunkMs`). The prefills themselves keep
 * their lane's pace.
 *
 * Reported counts follow vLLM's scheduler, not the slot accounting: a sequence whose prefill has not
 * started yet (queued behind another prefill on its lane, as vLLM keeps a request in its waiting queue
 * until the step token budget has room for its prefill) counts as WAITING, so `num_requests_waiting`
 * grows under a prefill backlog instead of staying 0 while 64 slots are nominally taken. `running` and
 * `waiting` are computed on read (a scan of the at most maxRunningSeqs prefilling sequences), so no
 * timer fires when a booked prefill starts.
 *
 * LoRA (`lora`, sim/lora-slots.ts): a sequence for an adapter starts only while the batch has a slot for
 * its adapter (the queue passes over it until then, as vLLM's scheduler does), and one whose adapter
 * is not loaded pays `loraLoadMs` before its prefill.
 *
 * A zero duration (timeScale 0) uses setImmediate instead of a timer, so tests stream instantly but
 * still asynchronously. Every timer is unref()'d and tracked: cancel() and close() leave nothing behind.
 */
import { interTokenMs, prefillChunkMs, type TimingModel } from './timing-model.js';
import { RunQueue } from './run-queue.js';
import type { LoraSlots } from './lora-slots.js';

export interface SequenceSpec {
  /**
   * Called once when the sequence gets a running slot; returns the delay to its first token, ms
   * (already scaled). The simulator does its prefix-cache lookup here, at scheduling time, like vLLM.
   */
  admit(): number;
  /**
   * The part of `admit()`'s delay that is prefill compute (called right after it): what the decode
   * steps running beside it carry when the timing model has a step token budget
   * (`maxNumBatchedTokens`). Absent: all of it.
   */
  computeMs?(): number;
  /**
   * Whether the sequence's KV blocks fit in the block pool now (shared-pool simulators; checked while
   * it heads the waiting queue). Absent: always.
   */
  fits?(): boolean;
  /** Tokens to produce, >= 1. */
  readonly outputTokens: number;
  /**
   * The sequences it stands for (parallel sampling's `n` children, a batched prompt's prompts), each
   * a running slot and a member of the decode batch, as vLLM schedules them; absent: 1. They are
   * prefilled together (the children share the prompt's blocks) and step in lockstep.
   */
  readonly sequences?: number;
  /** The LoRA adapter the sequence runs with (absent: the base model). */
  readonly adapter?: string;
  /**
   * vLLM's request `priority` (lower goes first) under `--scheduling-policy priority`: the waiting
   * queue is ordered by it, then by arrival (run-queue.ts). Absent: 0.
   */
  readonly priority?: number;
  /** Called once per produced token (`index` from 0); `last` is true for the final one. */
  onToken(index: number, last: boolean): void;
}

type JobState = 'waiting' | 'prefill' | 'decode' | 'done';

export class EngineJob {
  state: JobState = 'waiting';
  produced = 0;
  /** Date.now() at which the prefill starts computing (its lane is free); 0 without lanes. */
  prefillStartAt = 0;
  /** Date.now() window of its prefill compute, the end of its lane booking (lanes only). */
  computeStartAt = 0;
  computeEndAt = 0;
  timer: NodeJS.Timeout | undefined;
  immediate: NodeJS.Immediate | undefined;
  constructor(readonly spec: SequenceSpec) {}
}

export class Engine {
  private readonly queue: RunQueue<EngineJob>;
  private readonly prefilling = new Set<EngineJob>();
  private readonly decoding = new Set<EngineJob>();
  private stepTimer: NodeJS.Timeout | undefined;
  private stepImmediate: NodeJS.Immediate | undefined;
  private closed = false;
  /** Per prefill lane: the Date.now() at which it is free again (empty when lanes are unbounded). */
  private readonly laneFreeAt: number[];

  constructor(
    private readonly timing: Readonly<TimingModel>,
    private timeScale: number,
    /** LoRA adapter slots and the (already scaled) time to load an adapter; absent: LoRA off. */
    private readonly lora?: { readonly slots: LoraSlots; readonly loadMs: number },
  ) {
    const slots = lora?.slots;
    this.queue = new RunQueue<EngineJob>(
      timing.maxRunningSeqs,
      (job) => job.spec.fits?.() ?? true,
      slots ? (job) => slots.canStart(job.spec.adapter) : undefined,
      (job) => job.spec.priority ?? 0,
      (job) => job.spec.sequences ?? 1,
    );
    this.laneFreeAt = new Array<number>(timing.prefillLanes).fill(0);
  }

  /** Every duration `scale` times from the next step on (Simulator.setTimeScale). */
  setTimeScale(scale: number): void {
    this.timeScale = scale;
  }

  /** Sequences computing (prefill started, or decoding): vLLM's `num_requests_running`. */
  get running(): number {
    return this.queue.running - this.prefillsNotStarted();
  }

  /** Sequences waiting for a slot or for their prefill to start: vLLM's `num_requests_waiting`. */
  get waiting(): number {
    return this.queue.waiting + this.prefillsNotStarted();
  }

  /** Adapters of the sequences waiting for a slot, in queue order, each once. */
  waitingAdapters(): string[] {
    const out = new Set<string>();
    for (const job of this.queue.waitingItems())
      if (job.spec.adapter !== undefined) out.add(job.spec.adapter);
    return [...out];
  }

  private prefillsNotStarted(): number {
    if (this.laneFreeAt.length === 0) return 0;
    const now = Date.now();
    let n = 0;
    for (const job of this.prefilling) if (job.prefillStartAt > now) n += job.spec.sequences ?? 1;
    return n;
  }

  submit(spec: SequenceSpec): EngineJob {
    const job = new EngineJob(spec);
    if (this.closed) {
      job.state = 'done';
      return job;
    }
    if (this.queue.submit(job)) this.startPrefill(job);
    return job;
  }

  /** Stops a sequence wherever it is (client abort); frees its slot. Idempotent. */
  cancel(job: EngineJob): void {
    switch (job.state) {
      case 'waiting':
        this.queue.cancel(job);
        job.state = 'done';
        this.startWaiting(); // the head may have been the one that did not fit
        break;
      case 'prefill':
        this.clearJobTimers(job);
        this.prefilling.delete(job);
        this.release(job);
        break;
      case 'decode':
        this.decoding.delete(job);
        this.release(job);
        break;
      case 'done':
        break;
    }
    job.state = 'done';
  }

  /** Cancels everything and clears every timer. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const job of this.prefilling) {
      this.clearJobTimers(job);
      job.state = 'done';
    }
    for (const job of this.decoding) job.state = 'done';
    for (const job of this.queue.clear()) job.state = 'done';
    this.prefilling.clear();
    this.decoding.clear();
    this.clearStep();
  }

  private startPrefill(job: EngineJob): void {
    job.state = 'prefill';
    this.prefilling.add(job);
    const loaded = this.lora?.slots.start(job.spec.adapter) === true;
    const admitMs = job.spec.admit();
    const computeMs = Math.min(admitMs, job.spec.computeMs?.() ?? admitMs);
    const ms = this.bookLane(job, admitMs + (loaded ? (this.lora?.loadMs ?? 0) : 0));
    if (this.laneFreeAt.length > 0) {
      job.computeEndAt = Date.now() + ms;
      job.computeStartAt = job.computeEndAt - computeMs;
    }
    if (ms > 0) job.timer = setTimeout(this.onPrefillDone, ms, job).unref();
    else job.immediate = setImmediate(this.onPrefillDone, job);
  }

  /** Delay to the first token: `ms` itself, or the wait for the earliest-free lane plus `ms`. */
  private bookLane(job: EngineJob, ms: number): number {
    const lanes = this.laneFreeAt;
    if (lanes.length === 0) return ms;
    let best = 0;
    for (let i = 1; i < lanes.length; i++) if (lanes[i]! < lanes[best]!) best = i;
    const now = Date.now();
    job.prefillStartAt = Math.max(now, lanes[best]!);
    const end = job.prefillStartAt + ms;
    lanes[best] = end;
    return end - now;
  }

  private readonly onPrefillDone = (job: EngineJob): void => {
    job.timer = undefined;
    job.immediate = undefined;
    if (job.state !== 'prefill') return;
    this.prefilling.delete(job);
    job.produced = 1;
    const last = job.spec.outputTokens <= 1;
    if (last) {
      job.state = 'done';
    } else {
      job.state = 'decode';
      this.decoding.add(job);
    }
    job.spec.onToken(0, last);
    if (last) this.release(job);
    else this.armStep();
  };

  private readonly onStep = (): void => {
    this.stepTimer = undefined;
    this.stepImmediate = undefined;
    // Prefills always complete asynchronously, so nothing joins `decoding` during this loop.
    for (const job of this.decoding) {
      const index = job.produced++;
      const last = job.produced >= job.spec.outputTokens;
      if (last) {
        this.decoding.delete(job);
        job.state = 'done';
      }
      job.spec.onToken(index, last);
      if (last) this.release(job);
    }
    this.armStep();
  };

  private armStep(): void {
    if (this.closed || this.decoding.size === 0 || this.stepTimer || this.stepImmediate) return;
    const ms =
      interTokenMs(this.timing, this.queue.running, this.timeScale) +
      prefillChunkMs(this.timing, this.prefillAheadMs(), this.timeScale);
    if (ms > 0) this.stepTimer = setTimeout(this.onStep, ms).unref();
    else this.stepImmediate = setImmediate(this.onStep);
  }

  /** Prefill compute still booked on the worker, per lane, ms (0 without lanes or a step budget). */
  private prefillAheadMs(): number {
    const lanes = this.laneFreeAt.length;
    if (lanes === 0 || this.timing.maxNumBatchedTokens === 0) return 0;
    const now = Date.now();
    let ms = 0;
    for (const job of this.prefilling)
      ms += Math.max(0, job.computeEndAt - Math.max(now, job.computeStartAt));
    return ms / lanes;
  }

  private release(job: EngineJob): void {
    if (this.closed) return;
    this.lora?.slots.finish(job.spec.adapter);
    this.queue.finish(job);
    this.startWaiting();
    if (this.decoding.size === 0) this.clearStep();
  }

  /** Starts waiting sequences while the queue hands them out (each start takes its blocks first). */
  private startWaiting(): void {
    if (this.closed) return;
    for (let next = this.queue.take(); next; next = this.queue.take()) this.startPrefill(next);
  }

  private clearStep(): void {
    if (this.stepTimer) clearTimeout(this.stepTimer);
    if (this.stepImmediate) clearImmediate(this.stepImmediate);
    this.stepTimer = undefined;
    this.stepImmediate = undefined;
  }

  private clearJobTimers(job: EngineJob): void {
    if (job.timer) clearTimeout(job.timer);
    if (job.immediate) clearImmediate(job.immediate);
    job.timer = undefined;
    job.immediate = undefined;
  }
}
