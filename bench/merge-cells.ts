/**
 * Merging repeated runs of one routing cell (`--repeats=N`): the same workload and variant measured
 * N times in one benchmark run, interleaved with the other variants (run 1 of every variant, then
 * run 2, ...), so that every variant meets the same machine conditions.
 *
 * Why: on this 2-core host, one cell of the eviction-pressure workload (384 requests) moves its hit
 * rate by 5-10 points from run to run (routers, Envoy, eight simulators and the client share the
 * cores, and the order in which KV events and requests meet changes with the load). A ratio of two
 * such cells against a 0.97 target said more about the noise than about the routing.
 *
 * Rates, latencies and spreads: the mean of the runs (a mean of percentiles, not a percentile of the
 * pooled requests: each run is a whole experiment). Counts (requests, errors, tokens, wall time,
 * processed requests, decisions, KV-event counters): the sums. `runs` keeps each run's hit rate and
 * output tokens/s, so the reports can show the spread.
 */
import type { RoutingCell } from './routing-bench.js';

import { mean } from './stats.js';

function sumRecords<K extends string>(
  records: ReadonlyArray<Readonly<Record<K, number>> | undefined>,
): Record<K, number> | undefined {
  const present = records.filter((r): r is Readonly<Record<K, number>> => r !== undefined);
  if (present.length === 0) return undefined;
  const out = {} as Record<K, number>;
  for (const r of present) for (const k of Object.keys(r) as K[]) out[k] = (out[k] ?? 0) + r[k];
  return out;
}

/** One cell from `runs` (same workload and policy; at least one). A single run is returned as is. */
export function mergeRuns(runs: readonly RoutingCell[]): RoutingCell {
  const first = runs[0];
  if (first === undefined) throw new RangeError('mergeRuns: no runs');
  if (runs.length === 1) return first;
  for (const r of runs) {
    if (r.workload !== first.workload || r.policy !== first.policy) {
      throw new RangeError(`mergeRuns: ${r.workload}/${r.policy} is not ${first.workload}/${first.policy}`);
    }
  }
  const avg = (f: (c: RoutingCell) => number): number => mean(runs.map(f));
  const sum = (f: (c: RoutingCell) => number): number => runs.reduce((n, c) => n + f(c), 0);
  const branches = sumRecords(runs.map((r) => r.branches));
  const kvEvents = sumRecords(runs.map((r) => r.kvEvents));
  const cacheReports = sumRecords(runs.map((r) => r.cacheReports));
  const firstError = runs.find((r) => r.firstError !== undefined)?.firstError;
  return {
    workload: first.workload,
    policy: first.policy,
    requests: sum((c) => c.requests),
    completed: sum((c) => c.completed),
    errors: sum((c) => c.errors),
    ...(firstError !== undefined ? { firstError } : {}),
    hitRate: avg((c) => c.hitRate),
    ttftP50Ms: avg((c) => c.ttftP50Ms),
    ttftP90Ms: avg((c) => c.ttftP90Ms),
    ttftP99Ms: avg((c) => c.ttftP99Ms),
    itlP50Ms: avg((c) => c.itlP50Ms),
    outputTokens: sum((c) => c.outputTokens),
    outputTokPerSec: avg((c) => c.outputTokPerSec),
    wallMs: sum((c) => c.wallMs),
    processedPerWorker: first.processedPerWorker.map((_, i) => sum((c) => c.processedPerWorker[i] ?? 0)),
    maxOverMeanProcessed: avg((c) => c.maxOverMeanProcessed),
    inFlightCv: avg((c) => c.inFlightCv),
    ...(runs.every((c) => c.routerCpuUsPerRequest !== undefined)
      ? { routerCpuUsPerRequest: Math.round(avg((c) => c.routerCpuUsPerRequest as number)) }
      : {}),
    ...(runs.every((c) => c.stealFraction !== undefined)
      ? { stealFraction: avg((c) => c.stealFraction as number) }
      : {}),
    ...(branches !== undefined ? { branches } : {}),
    ...(cacheReports !== undefined ? { cacheReports } : {}),
    ...(kvEvents !== undefined ? { kvEvents: kvEvents as NonNullable<RoutingCell['kvEvents']> } : {}),
    runs: { hitRate: runs.map((c) => c.hitRate), outputTokPerSec: runs.map((c) => c.outputTokPerSec) },
  };
}
