/**
 * Saturation: whether a set of workers has room for one more request, as the Gateway API Inference
 * Extension's endpoint picker decides it (its saturation detector). The set is saturated when NO
 * worker in it has "good capacity":
 *   - a sample that is not stale (load-board.ts: a worker whose scrapes fail or lag shows no room),
 *   - a waiting queue of at most `waiting` requests, and
 *   - KV-cache usage of at most `kvUsage` (a page without a usage figure passes this test).
 * A worker without load figures at all (its /metrics is 404: SGLang without --enable-metrics, a proxy
 * that forwards only /v1; a page without queue figures; not scraped yet) is judged as routing judges
 * it, from this router's own counts: its queue is the prefills this router has queued there (none
 * without a backlog: a policy other than the cost model tracks none). Without that, a fleet that exports no metrics would never have room: flow control would hold every request
 * until its TTL and admission would shed every sheddable one.
 * An empty set is saturated too (no capacity), though callers route an empty candidate set to the
 * router's own 503 before asking.
 *
 * The queue read is the scraped `waiting`, or, when larger, what of it this router did not put there
 * plus the prefills this router has queued on the worker NOW (load/prefill-backlog.ts): a burst sent
 * since the last scrape counts before the next one shows it. The endpoint picker's defaults are 5
 * waiting and 0.8 usage (`--saturation-waiting`, `--saturation-kv-usage`).
 *
 * Pure: reads views passed in; no timers, metrics or logging.
 */
import type { Backlog } from './prefill-backlog.js';
import type { LoadView } from './load-board.js';

export interface SaturationLimits {
  /** A worker with more requests waiting than this has no room. Default 5. */
  readonly waiting: number;
  /** A worker with KV-cache usage above this (0..1) has no room. Default 0.8. */
  readonly kvUsage: number;
}

export const DEFAULT_SATURATION: SaturationLimits = Object.freeze({ waiting: 5, kvUsage: 0.8 });

/** What saturation reads of one worker. */
export interface SaturationSignals<W> {
  load(worker: W): LoadView;
  /** This router's prefills queued on the worker now (absent: none tracked). */
  backlog?(worker: W): Backlog;
}

/** Whether `worker` has room for one more request (see the header). */
export function hasRoom<W>(worker: W, signals: SaturationSignals<W>, limits: SaturationLimits): boolean {
  const view = signals.load(worker);
  if (view.stale === true) return false;
  if (view.kvUsage !== undefined && view.kvUsage > limits.kvUsage) return false;
  return queued(view, signals.backlog?.(worker)) <= limits.waiting;
}

/** True when no worker of `workers` has room (an empty set has none). */
export function saturated<W>(
  workers: readonly W[],
  signals: SaturationSignals<W>,
  limits: SaturationLimits,
): boolean {
  for (const w of workers) if (hasRoom(w, signals, limits)) return false;
  return true;
}

function queued(view: LoadView, backlog: Backlog | undefined): number {
  const scraped = view.waiting ?? 0;
  if (backlog === undefined) return scraped;
  return Math.max(scraped, (view.waitingElsewhere ?? 0) + backlog.requests);
}
