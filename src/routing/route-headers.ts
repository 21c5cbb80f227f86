/**
 * The request headers that send a request to its chosen worker: the destination list Envoy's
 * ORIGINAL_DST cluster reads (`x-gateway-destination-endpoint`: the chosen endpoint, then any
 * fallbacks), and, for a worker that stands for one data-parallel rank of its server
 * (workers/data-parallel.ts), `X-data-parallel-rank`, which pins the request to that rank's engine in
 * vLLM (it overrides whatever rank the client sent).
 */
import { DESTINATION_HEADER, DP_RANK_HEADER } from '../extproc/headers.js';
import type { Worker } from '../workers/worker.js';

export function routeHeaders(worker: Worker, destination: string = worker.endpoint): Record<string, string> {
  return worker.dpRank === undefined
    ? { [DESTINATION_HEADER]: destination }
    : { [DESTINATION_HEADER]: destination, [DP_RANK_HEADER]: String(worker.dpRank) };
}
