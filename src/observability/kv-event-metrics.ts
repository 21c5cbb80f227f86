/**
 * Prometheus metrics of the exact prefix index (KV events), on the router's injected registry.
 * The index size per worker is read at scrape time; counters are bumped by the subscribers' hooks and
 * by the policies' routed() step (fallback lookups: kv_aware's, and the exact source's own under
 * cache_aware), never inside selection.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { KvEventHooks } from '../kv-events/kv-event-subscriber.js';

export interface KvEventMetrics {
  readonly hooks: KvEventHooks;
  /** A request routed without exact data (why: no_tokenizer, multimodal, no_publisher, ...). */
  fallback(reason: string): void;
  /** Drops the series of every worker not in `workers` (it left: pod churn must not grow /metrics). */
  /**
   * Drops the series of every worker not in `workers` for `keepMs` or more (it left: pod churn must not
   * grow /metrics; its last counts stay a few scrapes). `now` and `keepMs` in ms; keepMs 0: at once.
   */
  retain(workers: ReadonlySet<string>, now: number, keepMs: number): void;
}

export function createKvEventMetrics(registry: Registry, sizes: () => Map<string, number>): KvEventMetrics {
  const registers = [registry];
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]): Counter<L> =>
    new Counter({ name, help, labelNames, registers });
  const received = counter(
    'vllm_router_kv_events_received_total',
    'KV-cache events received from workers (live and replayed).',
    ['worker'],
  );
  const applied = counter(
    'vllm_router_kv_events_applied_total',
    'KV-cache events applied to the exact prefix index.',
    ['worker'],
  );
  const dropped = counter(
    'vllm_router_kv_events_dropped_total',
    'KV-cache frames or events dropped, by reason (garbage, unknown_type, not_prefix, unknown_parent, ...).',
    ['worker', 'reason'],
  );
  const gaps = counter('vllm_router_kv_event_gaps_total', 'Sequence gaps detected on a KV-event stream.', [
    'worker',
  ]);
  const replays = counter(
    'vllm_router_kv_event_replays_total',
    'Replays requested from a publisher replay endpoint, by outcome (ok, partial, failed).',
    ['worker', 'outcome'],
  );
  const reconnects = counter(
    'vllm_router_kv_event_reconnects_total',
    'Reconnections of a KV-event subscription.',
    ['worker'],
  );
  const resets = counter(
    'vllm_router_kv_index_resets_total',
    "A worker's exact index entries dropped, by cause (gap, reconnect, restart, replay_failed, ...).",
    ['worker', 'reason'],
  );
  new Gauge({
    name: 'vllm_router_kv_index_blocks',
    help: 'KV blocks in the exact prefix index per worker (summed over its ranks).',
    labelNames: ['worker'] as const,
    registers,
    collect() {
      this.reset();
      for (const [worker, n] of sizes()) this.set({ worker }, n);
    },
  });
  const lag = new Histogram({
    name: 'vllm_router_kv_event_lag_seconds',
    help: "Age of a live KV-event batch when the router decoded it (now - the publisher's ts; needs synchronised clocks): how far the exact index trails the worker's cache.",
    labelNames: ['worker'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers,
  });
  const fallbacks = counter(
    'vllm_router_kv_fallback_lookups_total',
    'Requests routed on the approximate prefix tree instead of exact KV data, by reason.',
    ['reason'],
  );
  // Per worker, how to remove each series it has (keyed by metric and label values).
  const series = new Map<string, Map<string, () => void>>();
  // Per worker no longer subscribed: since when (its series go DEPARTED keepMs later).
  const goneSince = new Map<string, number>();
  const seen = (worker: string, id: string, remove: () => void): void => {
    let of = series.get(worker);
    if (of === undefined) series.set(worker, (of = new Map()));
    if (!of.has(id)) of.set(id, remove);
  };
  return {
    hooks: {
      received: (worker, n) => {
        received.inc({ worker }, n);
        seen(worker, 'received', () => received.remove({ worker }));
      },
      applied: (worker, n) => {
        applied.inc({ worker }, n);
        seen(worker, 'applied', () => applied.remove({ worker }));
      },
      dropped: (worker, reason, n) => {
        dropped.inc({ worker, reason }, n);
        seen(worker, `dropped ${reason}`, () => dropped.remove({ worker, reason }));
      },
      gap: (worker) => {
        gaps.inc({ worker });
        seen(worker, 'gap', () => gaps.remove({ worker }));
      },
      replay: (worker, outcome) => {
        replays.inc({ worker, outcome });
        seen(worker, `replay ${outcome}`, () => replays.remove({ worker, outcome }));
      },
      reconnect: (worker) => {
        reconnects.inc({ worker });
        seen(worker, 'reconnect', () => reconnects.remove({ worker }));
      },
      reset: (worker, reason) => {
        resets.inc({ worker, reason });
        seen(worker, `reset ${reason}`, () => resets.remove({ worker, reason }));
      },
      lag: (worker, seconds) => {
        lag.observe({ worker }, seconds);
        seen(worker, 'lag', () => lag.remove({ worker }));
      },
    },
    fallback: (reason) => fallbacks.inc({ reason }),
    retain: (workers, now, keepMs) => {
      for (const [worker, of] of series) {
        if (workers.has(worker)) {
          goneSince.delete(worker);
          continue;
        }
        const since = goneSince.get(worker) ?? now;
        goneSince.set(worker, since);
        if (now - since < keepMs) continue;
        for (const remove of of.values()) remove();
        series.delete(worker);
        goneSince.delete(worker);
      }
    },
  };
}
