/**
 * The cost model behind cache_aware's default mode (`--cache-aware-mode cost`): send a request to the
 * worker where it is predicted to get its first token soonest. Pure: it reads the candidates, the
 * prefix sources and the per-worker signals it is handed; no counters, timers or logging.
 *
 * A cache hit is worth the prefill time it saves; a queue costs the time it makes a request wait. Per
 * candidate w, with its learned estimates (load/timing-estimates.ts) and blended load
 * (load/load-board.ts):
 *
 *   uncached_w  = promptTokens - cachedTokens_w          (prefix-source.ts: exact first, radix fallback)
 *   wait_w      = ahead_w * waitMsPerRequest_w            (queued + running ahead: scraped + local)
 *   prefill_w   = ttftFloorMs_w + uncached_w * prefillMsPerToken_w
 *   predicted_w = wait_w + prefill_w
 *
 * The lowest predicted wins; candidates within 1e-6 ms of it tie and are split by (load, processed,
 * index) as every policy does (tie-break.ts), so identical idle workers still spread. No threshold
 * decides between "cache" and "load": a 20-token prompt saves ~1 ms of prefill and so follows the
 * shortest queue, while a 200 KB document shared by many requests saves seconds and is worth a long one,
 * with the same settings.
 *
 * Roles (P/D): a prefill pool scores by predicted prefill completion (the formula above: its response is
 * the first token); a decode pool receives the KV cache from the prefill worker, so its prefix cache is
 * irrelevant and it scores by predicted wait alone (uncached = 0).
 *
 * Overload filter, before scoring: a candidate whose FRESH scraped sample shows more than
 * `overloadWaiting` queued requests or KV-cache usage above `overloadKvUsage` is skipped while at least
 * one candidate is below both; when every candidate is overloaded they are all scored (a request is
 * never refused because the fleet is busy). Defaults 8 waiting and 0.9 usage, near the SGLang gateway's
 * (8 waiting, 0.8 usage); vLLM preempts sequences as its KV cache fills, so 0.9 is where a worker stops
 * being a good place to add work.
 */
import type { LoadView } from '../load/load-board.js';
import type { WorkerEstimates } from '../load/timing-estimates.js';
import type { Role } from '../workers/role.js';
import type { Worker } from '../workers/worker.js';
import type { SelectionInput } from './policy.js';
import { resolvePrefix, type PrefixSource } from './prefix-source.js';
import { leastLoaded } from './tie-break.js';

/** What the cost model reads per worker (the composition root binds the scraper's board and clock). */
export interface WorkerSignals {
  load(worker: Worker): LoadView;
  timing(worker: Worker): WorkerEstimates;
}

export interface CostModelOptions {
  /** Skip a worker whose scraped queue is longer than this while others are not. Default 8. */
  overloadWaiting: number;
  /** Skip a worker whose scraped KV-cache usage is above this while others are not. Default 0.9. */
  overloadKvUsage: number;
  /** Characters per token when no source knows the prompt's token count. Default 4. */
  charsPerToken: number;
}

export const DEFAULT_COST_MODEL_OPTIONS: Readonly<CostModelOptions> = Object.freeze({
  overloadWaiting: 8,
  overloadKvUsage: 0.9,
  charsPerToken: 4,
});

/** One candidate's prediction. */
export interface CostScore {
  readonly worker: Worker;
  readonly predictedMs: number;
  readonly waitMs: number;
  readonly prefillMs: number;
  readonly ahead: number;
  readonly cachedTokens: number;
  readonly uncachedTokens: number;
  readonly loadSource: LoadView['source'];
  readonly overloaded: boolean;
}

/** The inputs of one decision (decision header, debug log, timing feedback). */
export interface CostInputs {
  readonly promptTokens: number;
  readonly chosen: CostScore;
  /** The best other candidate that was scored, if any. */
  readonly runnerUp?: CostScore;
  /** Candidates skipped by the overload filter. */
  readonly skippedOverloaded: number;
  /** The largest cached share of the prompt among the candidates, in [0, 1]. */
  readonly bestMatchRate: number;
  readonly maxCachedTokens: number;
}

const TIE_MS = 1e-6;

export function scoreCost(
  input: SelectionInput,
  role: Role,
  sources: readonly PrefixSource[],
  signals: WorkerSignals,
  options: Readonly<CostModelOptions>,
): CostInputs {
  const workers = input.workers;
  const usePrefix = role !== 'decode' && input.text.length > 0;
  const prefix = usePrefix ? resolvePrefix(sources, input, workers, options.charsPerToken) : undefined;
  const promptTokens = prefix?.promptTokens ?? 0;

  const scores: CostScore[] = new Array<CostScore>(workers.length);
  let anyFit = false;
  let maxCached = 0;
  for (let i = 0; i < workers.length; i++) {
    const worker = workers[i] as Worker;
    const load = signals.load(worker);
    const est = signals.timing(worker);
    const cachedTokens = prefix ? (prefix.cached[i] as number) : 0;
    if (cachedTokens > maxCached) maxCached = cachedTokens;
    const uncachedTokens = prefix ? Math.max(0, promptTokens - cachedTokens) : 0;
    const waitMs = load.ahead * est.waitMsPerRequest;
    const prefillMs = est.ttftFloorMs + uncachedTokens * est.prefillMsPerToken;
    const overloaded =
      load.source === 'scraped' &&
      ((load.waiting ?? 0) > options.overloadWaiting || (load.kvUsage ?? 0) > options.overloadKvUsage);
    if (!overloaded) anyFit = true;
    scores[i] = {
      worker,
      predictedMs: waitMs + prefillMs,
      waitMs,
      prefillMs,
      ahead: load.ahead,
      cachedTokens,
      uncachedTokens,
      loadSource: load.source,
      overloaded,
    };
  }

  let best = Infinity;
  let skipped = 0;
  for (const s of scores) {
    if (anyFit && s.overloaded) {
      skipped += 1;
      continue;
    }
    if (s.predictedMs < best) best = s.predictedMs;
  }
  const tied: number[] = [];
  for (let i = 0; i < scores.length; i++) {
    const s = scores[i] as CostScore;
    if (anyFit && s.overloaded) continue;
    if (s.predictedMs <= best + TIE_MS) tied.push(i);
  }
  const chosenIndex = tied.length === 1 ? (tied[0] as number) : leastLoaded(workers, tied);
  const chosen = scores[chosenIndex] as CostScore;
  let runnerUp: CostScore | undefined;
  for (let i = 0; i < scores.length; i++) {
    const s = scores[i] as CostScore;
    if (i === chosenIndex || (anyFit && s.overloaded)) continue;
    if (runnerUp === undefined || s.predictedMs < runnerUp.predictedMs) runnerUp = s;
  }
  return {
    promptTokens,
    chosen,
    ...(runnerUp ? { runnerUp } : {}),
    skippedOverloaded: skipped,
    bestMatchRate: promptTokens > 0 ? maxCached / promptTokens : 0,
    maxCachedTokens: maxCached,
  };
}

/**
 * The decision's branch, in the names cache_aware always used: `cache_hit` when the chosen worker
 * holds the longest cached prefix, `imbalance` when another held more but load outweighed it,
 * `low_match` when no candidate holds any of the prompt.
 */
export function costBranch(c: CostInputs): 'cache_hit' | 'imbalance' | 'low_match' {
  if (c.maxCachedTokens <= 0) return 'low_match';
  return c.chosen.cachedTokens >= c.maxCachedTokens ? 'cache_hit' : 'imbalance';
}

/** `predicted_ms=..; wait_ms=..; ahead=..; uncached=../..; runner_up=url@ms` for the decision header. */
export function describeCost(c: CostInputs): string {
  const s = c.chosen;
  const r = c.runnerUp;
  const parts = [
    `predicted_ms=${s.predictedMs.toFixed(1)}`,
    `wait_ms=${s.waitMs.toFixed(1)}`,
    `ahead=${round2(s.ahead)}`,
    `load=${s.loadSource}`,
    `uncached=${s.uncachedTokens}/${c.promptTokens}`,
  ];
  if (c.skippedOverloaded > 0) parts.push(`overloaded=${c.skippedOverloaded}`);
  if (r) {
    parts.push(
      `runner_up=${r.worker.url}`,
      `runner_up_ms=${r.predictedMs.toFixed(1)}`,
      `runner_up_uncached=${r.uncachedTokens}`,
    );
  }
  return parts.join('; ');
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}
