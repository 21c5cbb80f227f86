/**
 * Data-parallel ranks as workers.
 *
 * `vllm serve --data-parallel-size N` (internal load balancing) runs N engines, each with its own KV
 * cache and queue, behind one API server. vLLM's own balancer picks an engine per request from the
 * engines' queue lengths, not from what their caches hold, so a conversation's turns land on whichever
 * engine is least busy and recompute their prefix there. vLLM lets a client pin a request to an engine
 * with the `X-data-parallel-rank` header, so the router can schedule the engines itself: each rank of
 * such a server becomes a Worker of its own (`<url>@<rank>`, the reference router's spelling), with its
 * own load, its own tree in the cache-aware policy, its own scraped series (vLLM labels them `engine`)
 * and its own KV-event publisher (vLLM's port + rank).
 *
 * How many ranks a server has: its metadata's `data_parallel_size` (a registration's, the admin API's,
 * Kubernetes annotation `vllm.ai/data-parallel-size`), else `--intra-node-data-parallel-size`. The
 * expansion applies to regular and decode workers; a prefill worker's leg keeps choosing its rank per
 * connector (pd/pd-dispatcher.ts: the Mooncake bootstrap's engines, MoRI-IO's `dp_size`).
 *
 * Pure: no I/O, timers, metrics or logging.
 */
import type { Role } from './role.js';

/** The most ranks one server may have (vLLM's largest published deployments use 64-way DP). */
export const MAX_DATA_PARALLEL_SIZE = 256;

/** The metadata's `data_parallel_size` when it is an integer in 1..MAX, else undefined. */
export function dataParallelSizeOf(
  metadata: Readonly<Record<string, unknown>> | undefined,
): number | undefined {
  const raw = metadata?.data_parallel_size;
  const n = typeof raw === 'string' && /^[0-9]{1,3}$/.test(raw) ? Number(raw) : raw;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= MAX_DATA_PARALLEL_SIZE
    ? n
    : undefined;
}

/**
 * The ranks a pool of `role` schedules for a server: undefined when it schedules the server as one
 * worker (one rank, or a prefill pool), else the rank count.
 */
export function scheduledRanks(
  role: Role,
  metadata: Readonly<Record<string, unknown>> | undefined,
  defaultSize: number,
): number | undefined {
  if (role === 'prefill') return undefined;
  const size = dataParallelSizeOf(metadata) ?? defaultSize;
  return size > 1 ? size : undefined;
}
