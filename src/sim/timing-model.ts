/**
 * Latency model of the simulated vLLM engine (pure functions, no timers).
 *
 * - Time to first token: `ttft = overheadMs + uncachedPromptTokens * prefillMsPerToken`.
 *   Cached prefix tokens cost nothing, which is what makes prefix-affinity routing measurable.
 *   A decode worker that receives its KV cache from a prefill worker (P/D) has no tokens to compute
 *   but pays a transfer: `ttft = overheadMs + promptTokens * kvTransferMsPerToken`.
 * - Inter-token latency: one engine step emits one token for every running sequence (continuous
 *   batching); a step takes `baseItlMs * (1 + itlGrowthPerSeq * (running - 1))`, so a busier worker
 *   decodes more slowly, which is what makes load balancing measurable.
 * - At most `maxRunningSeqs` sequences run at once; later requests wait FIFO for a slot before their
 *   prefill starts (see run-queue.ts).
 * - Prefill compute: with `prefillLanes` 0 (default) every prefill runs independently, so prefill
 *   costs latency but never capacity. With N > 0 a worker has N prefill lanes (think: the GPU's
 *   compute for prefill) and prefills queue FIFO on the lane that frees first, so a worker's prefill
 *   THROUGHPUT is bounded: N / (overhead + uncached tokens x per-token time) per ms. This is what
 *   makes cache hits raise throughput (not just lower TTFT) and what makes a prefill hotspot hurt,
 *   as on a real GPU where a long prefill delays every other prefill. Benchmarks use 1.
 * - Prefill and decode on one engine: with `maxNumBatchedTokens` > 0 (vLLM's step token budget; needs
 *   prefill lanes) a decode step taken while prefill compute is booked on the worker carries up to
 *   that many prefill tokens and lasts `min(booked compute, budget x prefillMsPerToken)` longer, so an
 *   uncached prompt stalls every sequence decoding on its worker, as chunked prefill does in vLLM. 0
 *   (default) keeps decode independent of prefill. Benchmarks use 2048 (vLLM's default budget for the
 *   OpenAI server on GPUs under 70 GiB).
 * - Every duration is multiplied by `timeScale`; timeScale 0 means "no delays at all".
 *
 * Defaults are loosely a small model on one GPU: 5 ms overhead, 0.05 ms per prefill token (20k tok/s),
 * 10 ms per step (100 tok/s per sequence), +2% step time per extra running sequence (64 running ->
 * 2.26x slower steps), 64 running sequences, 0.005 ms per transferred KV token (10x cheaper than
 * recomputing it).
 */

export interface TimingModel {
  /** Fixed per-request cost before the first token, ms. Default 5. */
  overheadMs: number;
  /** Prefill cost per uncached prompt token, ms. Default 0.05. */
  prefillMsPerToken: number;
  /** Step time with a single running sequence, ms. Default 10. */
  baseItlMs: number;
  /** Relative step-time growth per additional running sequence. Default 0.02. */
  itlGrowthPerSeq: number;
  /** Concurrently running sequences; more requests wait FIFO. Default 64. */
  maxRunningSeqs: number;
  /** P/D decode: KV transfer cost per prompt token, ms. Default 0.005. */
  kvTransferMsPerToken: number;
  /** Prefills that compute at once; more queue FIFO. 0 = unbounded (each prefill independent). Default 0. */
  prefillLanes: number;
  /**
   * vLLM's `--max-num-batched-tokens`, the token budget of one engine step that prefill chunks share
   * with the decoding sequences (needs prefillLanes > 0): while a prefill computes, every decode step
   * also carries up to this many of its tokens and lasts that much longer. 0 = prefill never delays a
   * decode step (prefill on hardware of its own). Default 0.
   */
  maxNumBatchedTokens: number;
}

export const DEFAULT_TIMING_MODEL: Readonly<TimingModel> = Object.freeze({
  overheadMs: 5,
  prefillMsPerToken: 0.05,
  baseItlMs: 10,
  itlGrowthPerSeq: 0.02,
  maxRunningSeqs: 64,
  kvTransferMsPerToken: 0.005,
  prefillLanes: 0,
  maxNumBatchedTokens: 0,
});

/** Merges overrides onto the defaults and validates them. */
export function resolveTimingModel(overrides: Partial<TimingModel> = {}): Readonly<TimingModel> {
  const t = { ...DEFAULT_TIMING_MODEL, ...overrides };
  for (const [k, v] of Object.entries(t)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new RangeError(`timing ${k} must be a finite number >= 0`);
    }
  }
  if (!Number.isInteger(t.maxRunningSeqs) || t.maxRunningSeqs < 1) {
    throw new RangeError('timing maxRunningSeqs must be a positive integer');
  }
  if (!Number.isInteger(t.prefillLanes)) {
    throw new RangeError('timing prefillLanes must be an integer >= 0');
  }
  if (!Number.isInteger(t.maxNumBatchedTokens)) {
    throw new RangeError('timing maxNumBatchedTokens must be an integer >= 0');
  }
  return Object.freeze(t);
}

/** Time to first token for a locally computed prefill. */
export function prefillTtftMs(t: Readonly<TimingModel>, uncachedTokens: number, timeScale: number): number {
  return t.overheadMs * timeScale + prefillComputeMs(t, uncachedTokens, timeScale);
}

/** The compute part of `prefillTtftMs`: the uncached tokens alone (what a shared step carries). */
export function prefillComputeMs(
  t: Readonly<TimingModel>,
  uncachedTokens: number,
  timeScale: number,
): number {
  return Math.max(0, uncachedTokens) * t.prefillMsPerToken * timeScale;
}

/** Time to first token for a P/D decode whose KV cache is transferred from a prefill worker. */
export function transferTtftMs(t: Readonly<TimingModel>, promptTokens: number, timeScale: number): number {
  return (t.overheadMs + Math.max(0, promptTokens) * t.kvTransferMsPerToken) * timeScale;
}

/** Duration of one decode step (one token for every running sequence) with `running` sequences. */
export function interTokenMs(t: Readonly<TimingModel>, running: number, timeScale: number): number {
  return t.baseItlMs * (1 + t.itlGrowthPerSeq * Math.max(0, running - 1)) * timeScale;
}

/**
 * How much longer a decode step lasts while prefill compute is still booked `prefillAheadMs` (scaled)
 * on the worker: the prefill chunk it carries, at most `maxNumBatchedTokens` tokens' worth.
 */
export function prefillChunkMs(t: Readonly<TimingModel>, prefillAheadMs: number, timeScale: number): number {
  if (t.maxNumBatchedTokens === 0 || prefillAheadMs <= 0) return 0;
  return Math.min(prefillAheadMs, t.maxNumBatchedTokens * t.prefillMsPerToken * timeScale);
}
