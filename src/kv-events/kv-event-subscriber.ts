/**
 * One ZMQ SUB connection to one vLLM KV-event publisher (one data-parallel rank of one worker),
 * feeding a KvBlockIndex under `indexKey`.
 *
 * The router connects (vLLM's publisher binds `tcp://*:5557`; rank r binds base port + r). The topic
 * filter is a prefix match ('' = every message), as in ZMQ.
 *
 * Sequence tracking: each publisher numbers its batches from 0. In order -> applied. Otherwise:
 * - a gap (seq > expected: the PUB high-water mark dropped batches) -> `gap`; with a replay endpoint
 *   the missing batches are fetched (`resync(expected)`), else the worker's entries are dropped and
 *   the index rebuilds from new events;
 * - seq going backwards (the publisher restarted) and every reconnect of the SUB socket (the
 *   publisher may have restarted, batches may have been lost while disconnected) -> the entries are
 *   dropped, then, with a replay endpoint, everything the publisher still buffers is replayed from 0;
 * - the first connection replays from 0 too when a replay endpoint is set (catch-up on start).
 * While a replay runs, live batches wait in a queue (at most 4,096; beyond, the replay's result is
 * discarded and the worker restarts empty from the live stream). After the replay, waiting batches
 * already covered are skipped, the rest applied in order.
 *
 * Replay protocol (vLLM ZmqEventPublisher._service_replay): a DEALER sends `['', start seq as 8 bytes
 * big-endian]` to the publisher's ROUTER, and receives `['', seq, payload]` per buffered batch with
 * seq >= start, then `['', -1 as 8 signed bytes, '']`. Bounded: 5 s without a reply or more than
 * `maxReplayBatches` (default 20,000; vLLM keeps 10,000) fails the replay (entries dropped).
 *
 * Lag: each live batch's age when it is decoded (now - its `ts`) goes to the `lag` hook
 * (vllm_router_kv_event_lag_seconds): a router whose event loop is busy, or a slow network, routes
 * on a picture of the caches that old. Replayed batches are old on purpose and not observed.
 *
 * Flood protection: frames over `maxMessageBytes` (default 16 MiB) make libzmq drop the connection
 * (reconnect -> resync); receive HWM 100,000 (vLLM's PUB default), the loop yields every 64 batches.
 *
 * close(): idempotent; closes the sockets (linger 0) and waits for the loops to end.
 */
import * as zmq from 'zeromq';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import {
  DEFAULT_DECODER_LIMITS,
  decodeFrame,
  decodePayload,
  encodeSeq,
  readSeq,
  type DecoderLimits,
  type EventSkipReason,
  type FrameRejectReason,
  type KvEventBatch,
} from './kv-event-decoder.js';
import type { ApplyResult, KvBlockIndex } from './kv-block-index.js';

export type KvDropReason =
  FrameRejectReason | EventSkipReason | keyof ApplyResult['dropped'] | 'resync_overflow' | 'replay_frame';

export type ReplayOutcome = 'ok' | 'partial' | 'failed';

/** Observations for metrics and logs (all optional; exceptions thrown by hooks are ignored). */
export interface KvEventHooks {
  /** A batch arrived (live, or replayed: not again for a copy of one that came live) with `events` events. */
  received?(worker: string, events: number): void;
  applied?(worker: string, events: number): void;
  dropped?(worker: string, reason: KvDropReason, count: number): void;
  gap?(worker: string, missing: number): void;
  reconnect?(worker: string): void;
  replay?(worker: string, outcome: ReplayOutcome): void;
  /** The worker's entries were dropped (reset), with why. */
  reset?(worker: string, why: 'gap' | 'reconnect' | 'restart' | 'replay_failed' | 'resync_overflow'): void;
  /**
   * A live batch was decoded `seconds` after its publisher stamped it (`ts`; clamped at 0): how far
   * the router's picture of the worker's cache trails the worker (needs synchronised clocks).
   */
  lag?(worker: string, seconds: number): void;
  /** The batch stored these blocks (own keys, block-keys.ts) on the worker (`indexKey`: its rank's). */
  stored?(worker: string, keys: readonly number[], indexKey: string): void;
}

export interface KvEventSubscriberOptions {
  /** Worker label for hooks (its URL). */
  worker: string;
  /** The index key for this publisher (e.g. `<url>#<rank>`). */
  indexKey: string;
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
  index: KvBlockIndex;
  hooks?: KvEventHooks;
  limits?: Readonly<DecoderLimits>;
  maxReplayBatches?: number;
  replayTimeoutMs?: number;
  /** Wall clock, ms since the epoch (the publisher's `ts` is on the same clock). Default Date.now. */
  clock?: () => number;
}

const YIELD_EVERY = 64;
const MAX_PENDING = 4096;
const END_MARK = encodeSeq(-1);
/** Replays in a row that may end in another gap before the worker restarts empty instead. */
const MAX_CHAINED_RESYNCS = 3;

export class KvEventSubscriber {
  private readonly socket: zmq.Subscriber;
  private readonly limits: Readonly<DecoderLimits>;
  private expected: number | undefined;
  private resyncing = false;
  private pending: Array<{ seq: number; batch: KvEventBatch }> = [];
  private pendingOverflow = false;
  private connects = 0;
  private closed = false;
  private loop: Promise<void> | undefined;
  private replaySocket: zmq.Dealer | undefined;
  private resyncDone: Promise<void> = Promise.resolve();
  private firstReplayDone = false;
  /** A reconnect happened while a replay was in flight: replay from 0 once it ends. */
  private replayAfterReconnect = false;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: KvEventSubscriberOptions) {
    this.limits = opts.limits ?? DEFAULT_DECODER_LIMITS;
    this.socket = new zmq.Subscriber({
      linger: 0,
      maxMessageSize: this.limits.maxPayloadBytes + 4096,
      receiveHighWaterMark: 100_000,
    });
  }

  /** Connects (ZMQ retries in the background until the publisher is up) and starts receiving. */
  start(): void {
    if (this.loop !== undefined || this.closed) return;
    this.socket.subscribe(this.opts.topic ?? '');
    this.socket.events.on('connect', () => this.onConnect());
    this.socket.connect(this.opts.endpoint);
    this.loop = this.receiveLoop();
  }

  /**
   * The router's picture of this publisher is rebuilt (warm-up): connected, and with a replay
   * endpoint, the first replay attempted (whatever its outcome: a failed one restarts empty from
   * the live stream).
   */
  get synced(): boolean {
    return this.connects > 0 && (this.opts.replayEndpoint === undefined || this.firstReplayDone);
  }

  /** Resolves when no replay is running (tests synchronise on it). */
  idle(): Promise<void> {
    return this.resyncDone;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      if (!this.socket.closed) this.socket.close();
      if (this.replaySocket !== undefined && !this.replaySocket.closed) this.replaySocket.close();
      await this.loop;
      await this.resyncDone;
    })();
    return this.closing;
  }

  private hook(fn: (h: KvEventHooks) => void): void {
    const hooks = this.opts.hooks;
    if (hooks === undefined) return;
    try {
      fn(hooks);
    } catch {
      /* observers never break the stream */
    }
  }

  private onConnect(): void {
    if (this.closed) return;
    const first = this.connects++ === 0;
    if (!first) this.hook((h) => h.reconnect?.(this.opts.worker));
    if (this.opts.replayEndpoint !== undefined) {
      if (!first) {
        this.reset('reconnect');
        // The new connection's seqs may restart from 0: nothing from the old one is "covered".
        this.expected = undefined;
      }
      if (this.resyncing) this.replayAfterReconnect = true;
      else this.startResync(0);
    } else if (!first) {
      this.reset('reconnect');
      this.expected = undefined;
    }
  }

  private async receiveLoop(): Promise<void> {
    let sinceYield = 0;
    while (!this.closed) {
      let parts: Buffer[];
      try {
        parts = await this.socket.receive();
      } catch {
        if (this.closed || this.socket.closed) return;
        await yieldToEventLoop();
        continue;
      }
      try {
        this.onFrame(parts);
      } catch {
        // A frame no check foresaw must not end the loop (the worker's index would never move again,
        // and the loop's rejection would go unhandled): what it held is unknown, as after a gap.
        this.drop('bad_batch', 1);
        this.reset('gap');
        this.expected = undefined;
      }
      if (++sinceYield >= YIELD_EVERY) {
        sinceYield = 0;
        await yieldToEventLoop();
      }
    }
  }

  private onFrame(parts: Buffer[]): void {
    const frame = decodeFrame(parts, this.limits);
    if (!frame.ok) {
      this.drop(frame.reason, 1);
      return;
    }
    const { seq, batch } = frame;
    this.hook((h) => h.received?.(this.opts.worker, batch.received));
    const now = (this.opts.clock ?? Date.now)() / 1000;
    this.hook((h) => h.lag?.(this.opts.worker, Math.max(0, now - batch.ts)));
    this.countSkipped(batch);
    if (this.resyncing) {
      this.queue(seq, batch);
      return;
    }
    const expected = this.expected;
    if (expected === undefined || seq === expected) {
      this.applyBatch(seq, batch);
      return;
    }
    if (seq > expected) {
      this.hook((h) => h.gap?.(this.opts.worker, seq - expected));
      if (this.opts.replayEndpoint !== undefined) {
        this.queue(seq, batch);
        this.startResync(expected);
        return;
      }
      this.reset('gap');
      this.applyBatch(seq, batch);
      return;
    }
    // Backwards: the publisher restarted and numbers from 0 again.
    this.reset('restart');
    if (this.opts.replayEndpoint !== undefined) {
      this.queue(seq, batch);
      this.startResync(0);
      return;
    }
    this.applyBatch(seq, batch);
  }

  private queue(seq: number, batch: KvEventBatch): void {
    if (this.pending.length >= MAX_PENDING) {
      this.pendingOverflow = true;
      this.drop('resync_overflow', 1);
      return;
    }
    this.pending.push({ seq, batch });
  }

  private applyBatch(seq: number, batch: KvEventBatch): void {
    this.expected = seq + 1;
    if (batch.events.length === 0) return;
    const stored = this.opts.hooks?.stored !== undefined ? [] : undefined;
    const r = this.opts.index.apply(this.opts.indexKey, batch.events, stored);
    this.hook((h) => h.applied?.(this.opts.worker, r.applied));
    if (stored !== undefined && stored.length > 0)
      this.hook((h) => h.stored?.(this.opts.worker, stored, this.opts.indexKey));
    for (const [reason, n] of Object.entries(r.dropped) as Array<[keyof ApplyResult['dropped'], number]>) {
      this.drop(reason, n);
    }
  }

  private countSkipped(batch: KvEventBatch): void {
    for (const [reason, n] of Object.entries(batch.skipped) as Array<[EventSkipReason, number]>) {
      this.drop(reason, n);
    }
  }

  private drop(reason: KvDropReason, n: number): void {
    this.hook((h) => h.dropped?.(this.opts.worker, reason, n));
  }

  private reset(why: Parameters<NonNullable<KvEventHooks['reset']>>[1]): void {
    this.opts.index.clearWorker(this.opts.indexKey);
    this.hook((h) => h.reset?.(this.opts.worker, why));
  }

  private startResync(from: number, chained = 0): void {
    if (this.resyncing || this.closed) return;
    this.resyncing = true;
    this.resyncDone = this.resync(from).then((again) => {
      this.resyncing = false;
      this.firstReplayDone = true;
      if (this.replayAfterReconnect && !this.closed) {
        // The replay that was in flight may predate the reconnect: start over from 0.
        this.replayAfterReconnect = false;
        this.opts.index.clearWorker(this.opts.indexKey);
        this.startResync(0);
        return this.resyncDone;
      }
      if (again !== undefined && !this.closed) {
        if (chained + 1 < MAX_CHAINED_RESYNCS) {
          this.startResync(again, chained + 1);
          return this.resyncDone;
        }
        // Still gapped after several replays: restart empty from the waiting live batches.
        this.reset('gap');
        this.expected = undefined;
        const waiting = this.pending;
        this.pending = [];
        for (const { seq, batch } of waiting) this.applyBatch(seq, batch);
      }
      return undefined;
    });
  }

  /** One replay; returns the seq to replay from again when the waiting live batches still have a gap. */
  private async resync(from: number): Promise<number | undefined> {
    const replies = await this.fetchReplay(from);
    if (this.closed) return undefined;
    if (this.pendingOverflow) {
      // Too much arrived meanwhile to merge safely: restart empty from the live stream.
      this.pendingOverflow = false;
      this.pending = [];
      this.reset('resync_overflow');
      this.expected = undefined;
      this.hook((h) => h.replay?.(this.opts.worker, replies === undefined ? 'failed' : 'partial'));
      return undefined;
    }
    if (replies === undefined) {
      this.hook((h) => h.replay?.(this.opts.worker, 'failed'));
      this.reset('replay_failed');
      this.expected = undefined;
    } else {
      const complete = replies.length === 0 || (replies[0] as { seq: number }).seq <= from;
      // A replayed batch the decoder rejected leaves a hole in the sequence (fetchReplay skips it).
      const holed = replies.some((r, i) => i > 0 && r.seq !== (replies[i - 1] as { seq: number }).seq + 1);
      this.hook((h) => h.replay?.(this.opts.worker, complete && !holed ? 'ok' : 'partial'));
      // History before the first replayed batch is lost: drop what may be stale (a no-op on start).
      if (!complete && from > 0) this.reset('gap');
      // The seq that must come next, when known: a replayed batch the decoder rejected leaves a hole.
      let next = complete && from > 0 ? this.expected : undefined;
      // Batches that arrived live while the replay ran were counted then: their replayed copies are not.
      const counted = new Set<number>();
      for (const p of this.pending) counted.add(p.seq);
      for (const { seq, batch } of replies) {
        if (this.expected !== undefined && seq < this.expected && from > 0) continue;
        // What the missing batch removed is unknown: drop what may be stale, as after a live gap.
        if (next !== undefined && seq !== next) this.reset('gap');
        next = seq + 1;
        if (!counted.has(seq)) {
          this.hook((h) => h.received?.(this.opts.worker, batch.received));
          this.countSkipped(batch);
        }
        this.applyBatch(seq, batch);
      }
    }
    const waiting = this.pending;
    this.pending = [];
    for (let i = 0; i < waiting.length; i++) {
      const { seq, batch } = waiting[i] as { seq: number; batch: KvEventBatch };
      const expected = this.expected;
      if (expected !== undefined && seq < expected) continue;
      if (expected !== undefined && seq > expected) {
        this.hook((h) => h.gap?.(this.opts.worker, seq - expected));
        // Batches published between the replay and the live stream: replay again from there.
        this.pending = waiting.slice(i);
        return expected;
      }
      this.applyBatch(seq, batch);
    }
    return undefined;
  }

  /** The replayed batches from `from` on, in order; undefined when the replay failed. */
  private async fetchReplay(from: number): Promise<Array<{ seq: number; batch: KvEventBatch }> | undefined> {
    const endpoint = this.opts.replayEndpoint as string;
    const max = this.opts.maxReplayBatches ?? 20_000;
    const dealer = new zmq.Dealer({
      linger: 0,
      receiveTimeout: this.opts.replayTimeoutMs ?? 5000,
      maxMessageSize: this.limits.maxPayloadBytes + 4096,
    });
    this.replaySocket = dealer;
    const out: Array<{ seq: number; batch: KvEventBatch }> = [];
    try {
      dealer.connect(endpoint);
      await dealer.send([Buffer.alloc(0), encodeSeq(from)]);
      for (;;) {
        if (this.closed) return undefined;
        const parts = await dealer.receive();
        if (parts.length !== 3) {
          this.drop('replay_frame', 1);
          return undefined;
        }
        const seq = readSeq(parts[1] as Buffer);
        if (seq === undefined) {
          this.drop('replay_frame', 1);
          return undefined;
        }
        if ((parts[1] as Buffer).equals(END_MARK)) return out;
        if (out.length >= max) return undefined;
        const batch = decodePayload(parts[2] as Buffer, this.limits);
        if (!('events' in batch)) {
          this.drop(batch.reason, 1);
          continue;
        }
        out.push({ seq, batch });
      }
    } catch {
      return undefined;
    } finally {
      if (!dealer.closed) dealer.close();
      if (this.replaySocket === dealer) this.replaySocket = undefined;
    }
  }
}
