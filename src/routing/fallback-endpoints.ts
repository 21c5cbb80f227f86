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
  if (runnerUp !== undefined && !used.has(runnerUp.endpoint) && candidates.includes(runnerUp)) {
    out.push(runnerUp);
    used.add(runnerUp.endpoint);
  }
  const left: number[] = [];
  for (let i = 0; i < candidates.length; i++) {
    const w = candidates[i] as Worker;
    if (!used.has(w.endpoint)) left.push(i);
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

/** The destination header's value: the chosen endpoint, then the fallbacks'. */
export function destinationList(chosen: Worker, fallbacks: readonly Worker[]): string {
  if (fallbacks.length === 0) return chosen.endpoint;
  let out = chosen.endpoint;
  for (const w of fallbacks) out += `,${w.endpoint}`;
  return out;
}
