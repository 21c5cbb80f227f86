/**
 * Feeds TimingEstimates from the responses the router already relays (no extra requests): a Dispatcher
 * wrapper, like health-dispatcher.ts, that watches each STREAMED response's body chunks.
 *
 * - TTFT sample: clock at the dispatch (after the policy chose and the guard was taken; for P/D after
 *   the prefill leg, so a decode worker's TTFT is its own) -> first non-empty body chunk of a 2xx
 *   response. Features: the tokens to prefill (own uncached + queued ahead) and other requests ahead
 *   the cost model used for this decision (`decision.cost`); for other policies, the whole prompt at ~4
 *   chars per token and the worker's other in-flight requests.
 * - Prefill backlog (cost mode, prefill-computing roles): the request's uncached tokens are queued on
 *   its worker from the dispatch to its first response byte, or its end; a non-streamed response shows
 *   no first byte, so its entry expires when the cost model predicted its first token.
 * - Inter-chunk sample, when the response ended normally after >= 3 chunks: (last - first) / (chunks - 1).
 *   (Envoy may coalesce SSE events into one chunk; the figure is the engine's step time as the router
 *   sees it, which is what a wait estimate needs.)
 * Non-streamed responses arrive in one piece at the end: they say nothing about the first token and are
 * not sampled.
 */
import type { Cancellation, Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../extproc/dispatch.js';
import { tokensFromChars, DEFAULT_CHARS_PER_TOKEN } from '../routing/prefix-source.js';
import type { Decision } from '../routing/policy.js';
import type { Worker } from '../workers/worker.js';
import type { PrefillBacklog } from './prefill-backlog.js';
import type { TimingEstimates, TtftFeatures } from './timing-estimates.js';

interface Learners {
  readonly timing: TimingEstimates;
  readonly backlog?: PrefillBacklog;
  readonly clock: () => number;
}

export function withTiming(
  inner: Dispatcher,
  timing: TimingEstimates,
  clock: () => number,
  backlog?: PrefillBacklog,
): Dispatcher {
  const l: Learners = { timing, clock, ...(backlog ? { backlog } : {}) };
  return {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      const d = inner.dispatch(req, cancel);
      return d instanceof Promise
        ? d.then((x) => timed(queued(x, req, l), req, l))
        : timed(queued(d, req, l), req, l);
    },
  };
}

/** Queues the request's prefill on its worker's backlog until its first byte or its end. */
function queued(d: Dispatch, req: RouteRequest, l: Learners): Dispatch {
  const cost = d.decision.cost;
  if (l.backlog === undefined || cost === undefined || d.worker.role === 'decode') return d;
  const backlog = l.backlog;
  const worker = d.worker;
  const now = l.clock();
  const streamed = req.inference?.stream === true;
  // Streamed: ended by the first byte; the deadline only guards against a lost end.
  const deadline = now + (streamed ? 10 * cost.chosen.predictedMs + 10_000 : cost.chosen.predictedMs);
  const entry = backlog.add(worker, cost.chosen.uncachedTokens, deadline);
  let queued = true;
  const done = (): void => {
    queued = false;
    backlog.done(worker, entry);
  };
  return {
    ...d,
    transformResponseChunk(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
      if (queued && chunk.length > 0) done(); // per chunk: one boolean test after the first
      return d.transformResponseChunk?.(chunk, endOfStream);
    },
    finish(end: RequestEnd): void {
      if (queued) done();
      d.finish(end);
    },
  };
}

function timed(d: Dispatch, req: RouteRequest, l: Learners): Dispatch {
  const { timing, clock } = l;
  if (req.inference?.stream !== true) return d;
  const cost = d.decision.cost;
  const features: TtftFeatures = cost
    ? { prefillTokens: cost.chosen.uncachedTokens + cost.chosen.queuedTokens, ahead: cost.chosen.ahead }
    : {
        prefillTokens: tokensFromChars(req.inference.text.length, DEFAULT_CHARS_PER_TOKEN),
        ahead: Math.max(0, d.worker.load - 1),
      };
  const started = clock();
  let status = 0;
  let chunks = 0;
  let first = 0;
  let last = 0;
  let finished = false;
  return {
    ...d,
    onResponseStart(s: number): void {
      status = s;
      d.onResponseStart?.(s);
    },
    transformResponseChunk(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
      const out = d.transformResponseChunk?.(chunk, endOfStream);
      if (chunk.length > 0 && status >= 200 && status < 300) {
        const now = clock();
        if (chunks === 0) {
          first = now;
          timing.recordTtft(d.worker, now - started, features);
        }
        last = now;
        chunks += 1;
      }
      return out;
    },
    finish(end: RequestEnd): void {
      d.finish(end);
      if (finished) return;
      finished = true;
      if (end.kind === 'response' && chunks >= 3)
        timing.recordInterChunk(d.worker, (last - first) / (chunks - 1));
    },
  };
}

/**
 * The same learning for the P/D prefill legs the router runs itself (pd-dispatcher.ts `prefillStarted`):
 * a leg's duration is its prefill worker's time to first token, with the features its cost decision
 * used, and its uncached tokens are queued on that worker's backlog until the leg ends.
 */
export function prefillLegLearner(
  timing: TimingEstimates,
  backlog: PrefillBacklog,
  clock: () => number,
): (worker: Worker, decision: Decision) => ((ok: boolean, durationMs: number) => void) | undefined {
  return (worker, decision) => {
    const cost = decision.cost;
    if (cost === undefined) return undefined;
    const entry = backlog.add(
      worker,
      cost.chosen.uncachedTokens,
      clock() + 10 * cost.chosen.predictedMs + 10_000,
    );
    const features: TtftFeatures = {
      prefillTokens: cost.chosen.uncachedTokens + cost.chosen.queuedTokens,
      ahead: cost.chosen.ahead,
    };
    return (ok, durationMs) => {
      backlog.done(worker, entry);
      if (ok) timing.recordTtft(worker, durationMs, features);
    };
  };
}
