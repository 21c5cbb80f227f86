/**
 * One cell of the P/D benchmark (bench/pd-bench.ts): a front door (this router through Envoy, or the
 * reference router) over one connector's fleet at one client concurrency, summarised from the
 * driver's per-request results (pure). TTFT percentiles and output tokens are over the completed
 * requests; output tokens/s divides them by the cell's wall time (first send to last response), so a
 * front door that fails requests loses throughput, it does not gain it. The front door's CPU per
 * request is what a loaded machine turns into latency, so it is reported next to the latencies.
 */
import type { KvConnector } from '../src/pd/kv-transfer.js';
import type { RunResult } from './drivers.js';
import { percentile, round } from './stats.js';

export type PdFrontDoor = 'router' | 'vllm-router';

export interface PdCellKey {
  /** Variant label (bench/pd-fleet.ts), e.g. `mooncake`. */
  readonly variant: string;
  readonly connector: KvConnector;
  readonly legs: 'sequential' | 'overlapped' | 'concurrent';
  readonly frontDoor: PdFrontDoor;
  readonly concurrency: number;
}

export interface PdCell extends PdCellKey {
  /** Requests sent. */
  readonly requests: number;
  readonly completed: number;
  readonly errors: number;
  readonly ttftP50Ms: number;
  readonly ttftP90Ms: number;
  readonly outputTokens: number;
  readonly outputTokPerSec: number;
  readonly wallMs: number;
  /**
   * CPU time of the front door's processes per request sent, ms (/proc utime + stime over the cell):
   * this router + its Envoy, or the peer's process. Simulators and client are not included.
   */
  readonly frontDoorCpuMsPerRequest: number;
  /** The first error's text, when any request failed. */
  readonly firstError?: string;
}

export function summarisePdCell(key: PdCellKey, run: RunResult, frontDoorCpuMs: number): PdCell {
  const results = run.results.filter((r) => r !== undefined);
  const ok = results.filter((r) => r.error === undefined);
  const ttfts = ok.flatMap((r) => (r.ttftMs === undefined ? [] : [r.ttftMs]));
  const outputTokens = ok.reduce((n, r) => n + r.outputTokens, 0);
  const firstError = results.find((r) => r.error !== undefined)?.error;
  return {
    ...key,
    requests: results.length,
    completed: ok.length,
    errors: results.length - ok.length,
    ttftP50Ms: round(percentile(ttfts, 50)),
    ttftP90Ms: round(percentile(ttfts, 90)),
    outputTokens,
    outputTokPerSec: run.wallMs > 0 ? round(outputTokens / (run.wallMs / 1000)) : NaN,
    wallMs: round(run.wallMs),
    frontDoorCpuMsPerRequest: results.length > 0 ? round(frontDoorCpuMs / results.length) : NaN,
    ...(firstError === undefined ? {} : { firstError: firstError.slice(0, 300) }),
  };
}
