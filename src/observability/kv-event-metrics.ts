/**
 * Prometheus metrics of the exact prefix index (KV events), on the router's injected registry.
 * The index size per worker is read at scrape time; counters are bumped by the subscribers' hooks and
 * by kv_aware's routed() step (fallback lookups), never inside selection.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { KvEventHooks } from '../kv-events/kv-event-subscriber.js';

export interface KvEventMetrics {
  readonly hooks: KvEventHooks;
  /** A request routed without exact data (why: no_tokenizer, multimodal, no_publisher, ...). */
  fallback(reason: string): void;
}

export function createKvEventMetrics(registry: Registry, sizes: () => Map<string, number>): KvEventMetrics {
  const registers = [registry];
  const received = new Counter({
    name: 'vllm_router_kv_events_received_total',
    help: 'KV-cache events received from workers (live and replayed).',
    labelNames: ['worker'] as const,
    registers,
  });
  const applied = new Counter({
    name: 'vllm_router_kv_events_applied_total',
    help: 'KV-cache events applied to the exact prefix index.',
    labelNames: ['worker'] as const,
    registers,
  });
  const dropped = new Counter({
    name: 'vllm_router_kv_events_dropped_total',
    help: 'KV-cache frames or events dropped, by reason (garbage, unknown_type, not_prefix, unknown_parent, ...).',
    labelNames: ['worker', 'reason'] as const,
    registers,
  });
  const gaps = new Counter({
    name: 'vllm_router_kv_event_gaps_total',
    help: 'Sequence gaps detected on a KV-event stream.',
    labelNames: ['worker'] as const,
    registers,
  });
  const replays = new Counter({
    name: 'vllm_router_kv_event_replays_total',
    help: 'Replays requested from a publisher replay endpoint, by outcome (ok, partial, failed).',
    labelNames: ['worker', 'outcome'] as const,
    registers,
  });
  const reconnects = new Counter({
    name: 'vllm_router_kv_event_reconnects_total',
    help: 'Reconnections of a KV-event subscription.',
    labelNames: ['worker'] as const,
    registers,
  });
  const resets = new Counter({
    name: 'vllm_router_kv_index_resets_total',
    help: "A worker's exact index entries dropped, by cause (gap, reconnect, restart, replay_failed, ...).",
    labelNames: ['worker', 'reason'] as const,
    registers,
  });
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
  const fallbacks = new Counter({
    name: 'vllm_router_kv_fallback_lookups_total',
    help: 'Requests routed on the approximate prefix tree instead of exact KV data, by reason.',
    labelNames: ['reason'] as const,
    registers,
  });
  return {
    hooks: {
      received: (worker, n) => received.inc({ worker }, n),
      applied: (worker, n) => applied.inc({ worker }, n),
      dropped: (worker, reason, n) => dropped.inc({ worker, reason }, n),
      gap: (worker) => gaps.inc({ worker }),
      replay: (worker, outcome) => replays.inc({ worker, outcome }),
      reconnect: (worker) => reconnects.inc({ worker }),
      reset: (worker, reason) => resets.inc({ worker, reason }),
    },
    fallback: (reason) => fallbacks.inc({ reason }),
  };
}
