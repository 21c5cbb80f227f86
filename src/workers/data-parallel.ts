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
 * Kubernetes annotation `vllm.ai/data-parallel-size`), else `--intra-node-data-parallel-size`. It
 * applies to every role: a P/D prefill leg is pinned to its Worker's rank the same way (and, with
 * Mooncake, uses that rank's engine id from the instance's bootstrap server; pd/pd-dispatcher.ts).
 * Without it, a prefill leg's rank is the connector's choice as before (Mooncake's least-busy engine,
 * MoRI-IO's rotation over `dp_size`, else vLLM's balancer).
 *
 * Pure: no I/O, timers, metrics or logging.
 */
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
 * The ranks a pool schedules for a server: undefined when it schedules the server as one worker (it
 * has one rank), else the rank count.
 */
export function scheduledRanks(
  metadata: Readonly<Record<string, unknown>> | undefined,
  defaultSize: number,
): number | undefined {
  const size = dataParallelSizeOf(metadata) ?? defaultSize;
  return size > 1 ? size : undefined;
}
