/**
 * Feeds TimingEstimates from the responses the router already relays (no extra requests): a Dispatcher
 * wrapper, like health-dispatcher.ts, that watches each STREAMED response's body chunks.
 *
 * - TTFT sample: clock at the dispatch (after the policy chose and the guard was taken; for P/D after
 *   the prefill leg, so a decode worker's TTFT is its own) -> first non-empty body chunk of a 2xx
 *   response. Features: the uncached tokens and requests ahead the cost model used for this decision
 *   (`decision.cost`); for other policies, the whole prompt at ~4 chars per token and the worker's other
 *   in-flight requests.
 * - Inter-chunk sample, when the response ended normally after >= 3 chunks: (last - first) / (chunks - 1).
 *   (Envoy may coalesce SSE events into one chunk; the figure is the engine's step time as the router
 *   sees it, which is what a wait estimate needs.)
 * Non-streamed responses arrive in one piece at the end: they say nothing about the first token and are
 * not sampled.
 */
import type { Cancellation, Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../extproc/dispatch.js';
import { tokensFromChars, DEFAULT_CHARS_PER_TOKEN } from '../routing/prefix-source.js';
import type { TimingEstimates, TtftFeatures } from './timing-estimates.js';

export function withTiming(inner: Dispatcher, timing: TimingEstimates, clock: () => number): Dispatcher {
  return {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      const d = inner.dispatch(req, cancel);
      return d instanceof Promise
        ? d.then((x) => timed(x, req, timing, clock))
        : timed(d, req, timing, clock);
    },
  };
}

function timed(d: Dispatch, req: RouteRequest, timing: TimingEstimates, clock: () => number): Dispatch {
  if (req.inference?.stream !== true) return d;
  const cost = d.decision.cost;
  const features: TtftFeatures = cost
    ? { uncachedTokens: cost.chosen.uncachedTokens, ahead: cost.chosen.ahead }
    : {
        uncachedTokens: tokensFromChars(req.inference.text.length, DEFAULT_CHARS_PER_TOKEN),
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
