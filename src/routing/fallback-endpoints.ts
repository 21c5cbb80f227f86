/**
 * Fallback endpoints: the workers named after the chosen one in `x-gateway-destination-endpoint`
 * (`ip:port,ip:port,...`, the endpoint-picker protocol's list). A gateway whose load balancer walks the
 * list on retries (Envoy's `override_host` policy: each attempt takes the next endpoint) sends a
 * request the chosen worker could not take (refused connection, reset) to the next one, instead of
 * answering the client with a 503. The router learns which endpoint served from the response's
 * `envoy.lb` metadata (extproc/lb-metadata.ts) and moves the request's load there.
 *
 * Which workers: the cost model's runner-up when it scored one (the next best place for this very
 * prompt), then the least loaded of the other candidates by (load, processed, index), the order every
 * policy breaks ties in (tie-break.ts). Pure: reads the candidates, changes nothing.
 */
import type { Worker } from '../workers/worker.js';
import { leastLoaded } from './tie-break.js';

/** The most fallback endpoints a request names (`--fallback-endpoints`). */
export const MAX_FALLBACK_ENDPOINTS = 15;

/** Up to `count` candidates other than `chosen`, best first (see the header). */
export function fallbackWorkers(
  candidates: readonly Worker[],
  chosen: Worker,
  count: number,
  runnerUp?: Worker,
): Worker[] {
  const out: Worker[] = [];
  if (count <= 0) return out;
  // One entry per endpoint: the data-parallel ranks of one server share theirs (a retry on the chosen
  // endpoint, or twice on another, is no fallback).
  const used = new Set<string>([chosen.endpoint]);
  // A request pinned to a data-parallel rank keeps its `X-data-parallel-rank` on every retry: only
  // that rank of another server can take it (vLLM refuses a rank it does not have; a server of one
  // rank has rank 0).
  const takes = (w: Worker): boolean => chosen.dpRank === undefined || (w.dpRank ?? 0) === chosen.dpRank;
  if (
    runnerUp !== undefined &&
    !used.has(runnerUp.endpoint) &&
    takes(runnerUp) &&
    candidates.includes(runnerUp)
  ) {
    out.push(runnerUp);
    used.add(runnerUp.endpoint);
  }
  const left: number[] = [];
  for (let i = 0; i < candidates.length; i++) {
    const w = candidates[i] as Worker;
    if (!used.has(w.endpoint) && takes(w)) left.push(i);
  }
  while (out.length < count && left.length > 0) {
    const best = leastLoaded(candidates, left);
    const w = candidates[best] as Worker;
    left.splice(left.indexOf(best), 1);
    if (used.has(w.endpoint)) continue;
    used.add(w.endpoint);
    out.push(w);
  }
  return out.slice(0, count);
}

/**
 * `x-gateway-destination-endpoint`: the chosen endpoint, then the fallbacks, comma-separated, as the
 * endpoint-picker protocol writes it. With `slots` more entries than fallbacks (`--fallback-endpoints`
 * asked for more than the request may name: a body named for its worker, too few other candidates),
 * the chosen endpoint fills the rest, so a retry walks no further than the router's own list: past its
 * end, Envoy's `fallback_policy` would pick any host of the cluster, one the router has cordoned, put
 * to sleep or taken out, or, for a named body, another worker than the one it names.
 */
export function destinationList(
  chosen: Worker,
  fallbacks: readonly Worker[],
  slots = fallbacks.length,
): string {
  let out = chosen.endpoint;
  for (const w of fallbacks) out += `,${w.endpoint}`;
  for (let i = fallbacks.length; i < slots; i++) out += `,${chosen.endpoint}`;
  return out;
}
