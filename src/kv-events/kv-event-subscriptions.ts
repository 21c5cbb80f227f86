/**
 * Keeps one KvEventSubscriber per publisher of every current worker, and the KvBlockIndex they feed.
 *
 * `sync(workers)` (called by the router on every registry change with the pools' current members,
 * optionally by an unref'd timer armed in start(), and directly by tests) reconciles: a worker with publishers (kv-event-sources.ts) and no subscription gets one per
 * rank; a worker that left is unsubscribed and forgotten once it has been gone LINGER_MS. So the index
 * only ever holds configured or registered workers (and, for a while, ones that just left).
 *
 * A new registration generation at a URL (a re-registration, or a worker back within LINGER_MS after
 * leaving: a Kubernetes pod NotReady -> Ready, a lapsed heartbeat) keeps the subscription when its
 * publishers are the same endpoints: the subscriber itself tells a new process from the same one (a
 * restarted publisher means a new connection, and every reconnect drops the worker's entries:
 * kv-event-subscriber.ts). Dropping them at the new generation (as until now) made the router blind to
 * everything the process still held: vLLM publishes a block once, when it is stored, so each later
 * prompt extending a prefix cached before (a system prompt) is a BlockStored whose parent the new
 * subscriber never saw, dropped as `unknown_parent`, for as long as that prefix stays cached; a replay
 * reaches back only the publisher's last `buffer_steps` (10,000) batches, and vLLM has none by default.
 * Every replica saw the re-registration, so every replica lost the worker's picture. (Where history is
 * lost anyway, the drops mark the worker `incomplete`: kv-block-index.ts; its answers are then a lower
 * bound, kv-prefix-source.ts.)
 *
 * Index keys are `<worker key>#<rank>`: each data-parallel rank has its own KV cache, and a request
 * sent to the worker's URL lands on one of them; lookups take the best rank (`cachedTokens`). A Worker
 * that stands for one rank (Worker.dpRank: workers/data-parallel.ts) reads only its rank's entries, and
 * the default rule subscribes to at least as many ranks as the pool schedules at that URL.
 */
import type { Worker } from '../workers/worker.js';
import { KvBlockIndex, type KvIndexOptions } from './kv-block-index.js';
import { KvEventSubscriber, type KvEventHooks } from './kv-event-subscriber.js';
import { publishersOf, workerKey, type KvEventSourceRules } from './kv-event-sources.js';

export interface KvEventSubscriptionsOptions {
  rules: KvEventSourceRules;
  topic?: string;
  index?: Partial<KvIndexOptions>;
  hooks?: KvEventHooks;
  /** Current workers, read by start() and the sync timer. */
  workers?: () => Iterable<Worker>;
  /** Sync timer armed by start(); default 0 = none (call sync on membership changes). */
  syncIntervalMs?: number;
  /** Clock for LINGER_MS (milliseconds). Default Date.now. */
  clock?: () => number;
}

/**
 * How long a worker that left keeps its subscription (and its entries) in case it comes back as the
 * same process: longer than a readiness flap or a lapsed heartbeat, short enough that the workers a
 * rolling update replaced do not hold their sockets and entries for long. Swept at the next sync, or
 * by an unref'd timer while any is lingering.
 */
export const LINGER_MS = 60_000;

interface WorkerSubscription {
  generation: number;
  /** The publishers' endpoints (one string): a worker back with other ones is subscribed anew. */
  readonly publishers: string;
  readonly subscribers: KvEventSubscriber[];
  readonly indexKeys: string[];
  /** Per rank, the one-element list a Worker of that rank reads (built once: lookups are per request). */
  readonly rankKeys: Array<readonly string[]>;
}

export class KvEventSubscriptions {
  readonly index: KvBlockIndex;
  private readonly subs = new Map<string, WorkerSubscription>();
  /** Workers that left, with when: kept LINGER_MS in case the same process comes back. */
  private readonly departed = new Map<string, { sub: WorkerSubscription; at: number }>();
  private timer: NodeJS.Timeout | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  private readonly closingSubs = new Set<Promise<void>>();
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: KvEventSubscriptionsOptions) {
    this.index = new KvBlockIndex(opts.index);
  }

  /** First sync with `workers()`, and the optional sync timer. No-op after close(). */
  start(): void {
    const workers = this.opts.workers;
    if (this.closed || workers === undefined) return;
    this.sync(workers());
    const interval = this.opts.syncIntervalMs ?? 0;
    if (interval > 0 && this.timer === undefined) {
      this.timer = setInterval(() => this.sync(workers()), interval);
      this.timer.unref();
    }
  }

  /** Reconciles subscriptions with the current workers (see the header comment). */
  sync(workers: Iterable<Worker>): void {
    if (this.closed) return;
    const seen = new Set<string>();
    const list = [...workers];
    // The ranks the pools schedule per URL (a data-parallel server's Workers, one per rank).
    const ranks = new Map<string, number>();
    for (const w of list) {
      if (w.dpRank !== undefined) ranks.set(w.url, Math.max(ranks.get(w.url) ?? 0, w.dpRank + 1));
    }
    for (const w of list) {
      let key: string;
      try {
        key = workerKey(w.url);
      } catch {
        continue;
      }
      if (seen.has(key)) continue;
      seen.add(key);
      const current = this.subs.get(key);
      if (current !== undefined && current.generation === w.generation) continue;
      const publishers = publishersOf(this.opts.rules, w.url, w.kvEventsPort, ranks.get(w.url));
      const signature = JSON.stringify(publishers);
      const kept = current ?? this.departed.get(key)?.sub;
      this.departed.delete(key);
      if (kept !== undefined && kept.publishers === signature) {
        // The same publishers: the subscriber tells a new process by its reconnect (see the header).
        kept.generation = w.generation;
        this.subs.set(key, kept);
        continue;
      }
      if (kept !== undefined) this.unsubscribe(key, kept);
      if (publishers.length === 0) continue;
      const sub: WorkerSubscription = {
        generation: w.generation,
        publishers: signature,
        subscribers: [],
        indexKeys: [],
        rankKeys: [],
      };
      publishers.forEach((p, rank) => {
        const indexKey = `${key}#${rank}`;
        this.index.dropWorker(indexKey);
        const s = new KvEventSubscriber({
          worker: key,
          indexKey,
          endpoint: p.endpoint,
          ...(p.replayEndpoint !== undefined ? { replayEndpoint: p.replayEndpoint } : {}),
          ...(this.opts.topic !== undefined ? { topic: this.opts.topic } : {}),
          index: this.index,
          ...(this.opts.hooks !== undefined ? { hooks: this.opts.hooks } : {}),
        });
        s.start();
        sub.subscribers.push(s);
        sub.indexKeys.push(indexKey);
        sub.rankKeys.push([indexKey]);
      });
      this.subs.set(key, sub);
    }
    const now = (this.opts.clock ?? Date.now)();
    for (const [key, sub] of this.subs) {
      if (seen.has(key)) continue;
      this.subs.delete(key);
      this.departed.set(key, { sub, at: now });
    }
    this.sweep();
  }

  /** Unsubscribes the workers gone LINGER_MS; while some are still lingering, looks again later. */
  private sweep(): void {
    const now = (this.opts.clock ?? Date.now)();
    for (const [key, { sub, at }] of this.departed) {
      if (now - at >= LINGER_MS) this.unsubscribe(key, sub);
    }
    if (this.departed.size === 0 || this.sweepTimer !== undefined || this.closed) return;
    this.sweepTimer = setTimeout(() => {
      this.sweepTimer = undefined;
      this.sweep();
    }, LINGER_MS);
    this.sweepTimer.unref();
  }

  /** Every current publisher's subscriber is synced (warm-up: the exact index is rebuilt). */
  synced(): boolean {
    for (const sub of this.subs.values()) if (!sub.subscribers.every((s) => s.synced)) return false;
    return true;
  }

  /** Subscribed workers (keys) and their subscribers, for tests. */
  subscribers(url: string): readonly KvEventSubscriber[] {
    return this.subs.get(workerKey(url))?.subscribers ?? [];
  }

  /** True when the worker has a subscription (it publishes, as far as the router knows). */
  publishes(url: string): boolean {
    return this.subs.has(safeKey(url));
  }

  /** Index entries per worker key (summed over ranks), for metrics. */
  sizes(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [key, sub] of this.subs) {
      let n = 0;
      for (const k of sub.indexKeys) n += this.index.size(k);
      out.set(key, n);
    }
    return out;
  }

  /**
   * Tokens the worker's KV cache holds by its events (its fullest rank), or undefined for a worker
   * without a subscription of its current generation. A subscribed worker that stored nothing holds 0.
   * Blocks on any medium count (a worker that offloads to CPU can read more than its GPU capacity;
   * the caller clamps the fill at 1).
   */
  heldTokens(worker: Worker): number | undefined {
    const sub = this.subs.get(safeKey(worker.url));
    if (sub === undefined || sub.generation !== worker.generation) return undefined;
    let most = 0;
    for (const k of rankKeys(sub, worker)) {
      const held = this.index.size(k) * (this.index.blockSizeOf(k) ?? 0);
      if (held > most) most = held;
    }
    return most;
  }

  /**
   * Credited cached tokens per worker for prompt keys computed at `blockSize` (best rank), or
   * undefined for a worker without a subscription or without indexed blocks at that size.
   */
  cachedTokens(
    keys: readonly number[],
    blockSize: number,
    workers: readonly Worker[],
  ): (number | undefined)[] {
    const out = new Array<number | undefined>(workers.length);
    for (let i = 0; i < workers.length; i++) {
      const sub = this.subs.get(safeKey((workers[i] as Worker).url));
      if (sub === undefined || sub.generation !== (workers[i] as Worker).generation) {
        out[i] = undefined;
        continue;
      }
      let best: number | undefined;
      const indexKeys = rankKeys(sub, workers[i] as Worker);
      const per = this.index.cachedTokens(keys, blockSize, indexKeys);
      for (const v of per) if (v !== undefined && (best === undefined || v > best)) best = v;
      // A subscribed worker that has not stored a block yet holds nothing (known: 0).
      out[i] = best ?? (per.every((v) => v === undefined) && !this.anyIndexed(indexKeys) ? 0 : undefined);
    }
    return out;
  }

  /**
   * True when the worker's index is known to miss blocks it holds (kv-block-index.ts `incomplete`: a
   * chain stored before this router saw its stream, e.g. a partial replay), on any rank it reads.
   */
  incomplete(worker: Worker): boolean {
    const sub = this.subs.get(safeKey(worker.url));
    if (sub === undefined || sub.generation !== worker.generation) return false;
    return rankKeys(sub, worker).some((k) => this.index.incomplete(k));
  }

  private anyIndexed(indexKeys: readonly string[]): boolean {
    return indexKeys.some((k) => this.index.hasWorker(k));
  }

  /** Idempotent: stops the timer and every subscriber. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      if (this.timer !== undefined) clearInterval(this.timer);
      if (this.sweepTimer !== undefined) clearTimeout(this.sweepTimer);
      for (const [key, sub] of this.subs) this.unsubscribe(key, sub);
      for (const [key, { sub }] of this.departed) this.unsubscribe(key, sub);
      await Promise.all([...this.closingSubs]);
    })();
    return this.closing;
  }

  private unsubscribe(key: string, sub: WorkerSubscription): void {
    if (this.subs.get(key) === sub) this.subs.delete(key);
    if (this.departed.get(key)?.sub === sub) this.departed.delete(key);
    for (const k of sub.indexKeys) this.index.dropWorker(k);
    for (const s of sub.subscribers) {
      const p = s.close().finally(() => this.closingSubs.delete(p));
      this.closingSubs.add(p);
    }
  }
}

/** The index keys a Worker reads: its rank's alone when it stands for one rank, else every rank's. */
function rankKeys(sub: WorkerSubscription, worker: Worker): readonly string[] {
  if (worker.dpRank === undefined) return sub.indexKeys;
  return sub.rankKeys[worker.dpRank] ?? NO_KEYS;
}

const NO_KEYS: readonly string[] = [];

/** URL -> worker key, memoised: every routing decision asks for each candidate's (a URL parse each). */
const keyMemo = new Map<string, string>();
const KEY_MEMO_MAX = 4096;

/** The worker key (kv-event-sources.ts `workerKey`) of a URL, as the subscriptions and hooks name it. */
export function safeKey(url: string): string {
  let key = keyMemo.get(url);
  if (key !== undefined) return key;
  try {
    key = workerKey(url);
  } catch {
    key = url;
  }
  if (keyMemo.size >= KEY_MEMO_MAX) keyMemo.clear(); // bounded: worker URLs churn only with the fleet
  keyMemo.set(url, key);
  return key;
}
