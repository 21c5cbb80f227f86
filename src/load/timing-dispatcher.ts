/**
 * Feeds TimingEstimates from the responses the router already relays (no extra requests): a Dispatcher
 * wrapper, like health-dispatcher.ts, that watches each STREAMED response's body chunks.
 *
 * - TTFT sample: clock at the dispatch (after the policy chose and the guard was taken; for P/D after
 *   the prefill leg, so a decode worker's TTFT is its own) -> the first body chunk of a 2xx response
 *   with a token (first-token.ts: the first non-empty one, past a /v1/responses stream's opening
 *   events). Features: the tokens to prefill (own uncached + queued ahead) and other requests ahead
 *   the cost model used for this decision (`decision.cost`); for other policies, the whole prompt at ~4
 *   chars per token and the worker's other in-flight requests.
 * - Prefill backlog (cost mode, prefill-computing roles): the request's uncached tokens are queued on
 *   its worker from the dispatch to its first response byte, or its end; a non-streamed response shows
 *   no first byte, so its entry expires when the cost model predicted its prefill to end.
 * - Inter-chunk sample, when the response ended normally after >= 3 chunks: (last - first) / (chunks - 1).
 *   (Envoy may coalesce SSE events into one chunk; the figure is the engine's step time as the router
 *   sees it, which is what a wait estimate needs.)
 * - Characters per token (with a CharsPerToken learner, load/chars-per-token.ts): the first
 *   `usage.prompt_tokens` a watched 2xx response carries (load/usage-tokens.ts), against the request's
 *   routing-text characters.
 * - Cache reports (a dispatch with `cacheFeedback`, routing/cache-report.ts): the same usage's
 *   `prompt_tokens_details.cached_tokens` goes back to the policy, which checks its prefix tree. vLLM
 *   writes the details only when something was cached, so once a worker has sent them, a usage
 *   object that visibly ends without them reports 0 (usage-tokens.ts `usageShowsNoCached`).
 * - Whole-response sample (a non-streamed 2xx response of one sequence): clock at the dispatch -> the
 *   body chunk carrying its `usage.completion_tokens` (`output_tokens` for the Responses and Messages
 *   APIs), with the features above and that many tokens less one as its decode steps
 *   (TimingEstimates.recordWhole). Such a response arrives in one piece when its last token is out, so
 *   it says nothing of the first token on its own; the estimates' fit separates prefill, waiting and
 *   decoding over many of them. One in N of them per worker (the same `--response-body-sample`, its
 *   own count and cap) is watched, for that and for the usage learners: a non-streamed body always
 *   carries its usage, a stream only when the client asked (`stream_options.include_usage`).
 *
 * Watched share (`--response-body-sample N`): the chunks of a response cost one ext_proc message each
 * way (issue 15), and a request whose routing reads none of them lets Envoy skip its body
 * (extproc/response-body-mode.ts). Of the streamed 2xx responses of each worker, every Nth (the first
 * included, so a new worker is sampled at once) is watched anyway, for the samples above; N = 1
 * watches every response (no skipping). Default 8: the estimates are averages over many responses
 * (EWMA alpha 0.1, RLS forgetting 0.98, i.e. the last ~10-50 samples), which one streamed response
 * in eight on each worker still refreshes within seconds at any load worth routing; while a
 * non-streamed request's messages drop from 4 to 3 each way and a 64-chunk stream's from ~67 to 3
 * (~11 on average with the watched share).
 * At most `--response-body-watch-max` sampled responses (default 4) are watched at a time per worker:
 * their cost grows with the streams in flight, the estimates' need does not. A worker streaming 256
 * responses at once (vLLM's default batch) would otherwise have 32 watched at a time, each chunk a
 * message each way, where 4 still give a TTFT sample per response and an inter-chunk sample per
 * response end, many per second. Below 32 streams per worker (8 x 4) the cap never binds.
 * Streamed responses with at least WATCH_UNCACHED_TOKENS uncached prompt tokens are always watched
 * to their first byte (the backlog needs their real prefill end). A skipped streamed response ends its
 * prefill-backlog entry at the cost model's predicted end of its prefill (queue ahead + its own
 * uncached tokens, without the TTFT floor), as a non-streamed response does.
 */
import type {
  Cancellation,
  ChunkRewrite,
  Dispatch,
  Dispatcher,
  RequestEnd,
  RouteRequest,
} from '../extproc/dispatch.js';
import { tokensFromChars, DEFAULT_CHARS_PER_TOKEN } from '../routing/prefix-source.js';
import type { Decision } from '../routing/policy.js';
import type { Worker } from '../workers/worker.js';
import type { PrefillBacklog } from './prefill-backlog.js';
import type { TimingEstimates, TtftFeatures } from './timing-estimates.js';
import type { CharsPerToken } from './chars-per-token.js';
import {
  cachedTokensIn,
  completionTokensIn,
  inputTokensIn,
  outputTokensIn,
  promptTokensIn,
  usageShowsNoCached,
} from './usage-tokens.js';
import { firstTokenWatch } from './first-token.js';

interface Learners {
  readonly timing: TimingEstimates;
  readonly backlog?: PrefillBacklog;
  readonly clock: () => number;
  readonly sampler: ResponseSampler;
  /** Learns characters per token from the watched responses' `usage.prompt_tokens` (chars-per-token.ts). */
  readonly charsPerToken?: CharsPerToken;
  /** Non-streamed responses watched for their duration and usage (one in N per worker, as the streamed share). */
  readonly usageSampler: ResponseSampler;
  /** Workers seen sending `cached_tokens` (`--enable-prompt-tokens-details`): their usage without it is 0. */
  readonly reportsCached: WeakSet<Worker>;
}

/**
 * A streamed response whose request had at least this many uncached prompt tokens is always watched
 * to its first byte. Its prefill is what holds up the requests queued behind it on that worker, so
 * its backlog entry must end when the prefill really ends: ended at a prediction instead, the TTFT
 * samples of the requests behind it lost the queue they waited for, the fit moved that wait into its
 * floor and its cost per token fell to 0, and recomputing a prompt looked free. Measured with exact
 * token counts (KV events) on shared-prefix, one run each: hit rate 53% / 46% with 1 in 8 watched,
 * 76% watching every response. Below it, a request (a cache hit, a short prompt) adds ~50 ms of
 * prefill or less at the default prior (0.05 ms per token): within the wait estimates' noise.
 */
export const WATCH_UNCACHED_TOKENS = 1024;

/** Default of `--response-body-sample`: watch one streamed response in this many per worker. */
export const DEFAULT_RESPONSE_BODY_SAMPLE = 8;

/** Default of `--response-body-watch-max`: sampled responses watched at a time per worker. */
export const DEFAULT_RESPONSE_BODY_WATCH_MAX = 4;

/**
 * Every Nth streamed response of each worker is watched (the first included), at most `maxWatching`
 * of them at a time per worker (a response met while the worker is at the cap is not watched and not
 * counted, so the next one after a release is). Every response is watched, with no cap, when N = 1.
 */
export class ResponseSampler {
  private readonly seen = new WeakMap<Worker, number>();
  private readonly watching = new WeakMap<Worker, number>();

  constructor(
    readonly every: number,
    readonly maxWatching: number = DEFAULT_RESPONSE_BODY_WATCH_MAX,
  ) {
    if (!Number.isSafeInteger(every) || every < 1) throw new RangeError('sample interval must be >= 1');
    if (!Number.isSafeInteger(maxWatching) || maxWatching < 1)
      throw new RangeError('watched responses per worker must be >= 1');
  }

  /**
   * Counts one streamed response of `worker`; true when it is one to watch, which the caller then
   * hands back with `release` when it ends.
   */
  take(worker: Worker): boolean {
    if (this.every === 1) return true;
    const watching = this.watching.get(worker) ?? 0;
    if (watching >= this.maxWatching) return false;
    const n = this.seen.get(worker) ?? 0;
    this.seen.set(worker, n + 1 === this.every ? 0 : n + 1);
    if (n !== 0) return false;
    this.watching.set(worker, watching + 1);
    return true;
  }

  /** A response `take` chose has ended. */
  release(worker: Worker): void {
    const watching = this.watching.get(worker) ?? 0;
    if (watching > 0) this.watching.set(worker, watching - 1);
  }

  /** Sampled responses of `worker` being watched now. */
  watchingOf(worker: Worker): number {
    return this.watching.get(worker) ?? 0;
  }
}

export function withTiming(
  inner: Dispatcher,
  timing: TimingEstimates,
  clock: () => number,
  backlog?: PrefillBacklog,
  sampleEvery: number = DEFAULT_RESPONSE_BODY_SAMPLE,
  watchMax: number = DEFAULT_RESPONSE_BODY_WATCH_MAX,
  charsPerToken?: CharsPerToken,
): Dispatcher {
  const sampler = new ResponseSampler(sampleEvery, watchMax);
  const l: Learners = {
    timing,
    clock,
    sampler,
    ...(backlog ? { backlog } : {}),
    usageSampler: new ResponseSampler(sampleEvery, watchMax),
    reportsCached: new WeakSet(),
    ...(charsPerToken ? { charsPerToken } : {}),
  };
  return {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      const d = inner.dispatch(req, cancel);
      return d instanceof Promise
        ? d.then((x) => timed(queued(x, req, l), req, l))
        : timed(queued(d, req, l), req, l);
    },
    // A request taken over at its response headers (a fallback endpoint served it): nothing to learn
    // (its clock would start at the response, and the body is gone), nothing queued (no cost decision).
    adopt(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined {
      return inner.adopt?.(req, from, endpoint);
    },
  };
}

/**
 * The first `usage.prompt_tokens` a watched 2xx response shows (per chunk until then: one buffer
 * search) feeds `l.charsPerToken`, against the request's routing-text characters, and, with the
 * `usage.prompt_tokens_details.cached_tokens` beside it, the policy's check of its cache picture
 * (`d.cacheFeedback`, routing/cache-report.ts).
 */
function usageLearner(
  d: Dispatch,
  req: RouteRequest,
  l: Learners,
): ((status: number, chunk: Buffer) => void) | undefined {
  const learner = l.charsPerToken;
  const feedback = d.cacheFeedback;
  const inference = req.inference;
  if ((learner === undefined && feedback === undefined) || inference === undefined) return undefined;
  // A continued response's prompt holds stored turns the routing text does not: nothing to learn.
  if (inference.previousResponseId !== undefined) return undefined;
  // The Responses and the Messages API say `input_tokens` (a Messages stream: in message_start).
  const tokensIn =
    inference.kind === 'responses' || inference.kind === 'messages' ? inputTokensIn : promptTokensIn;
  let done = false;
  return (status, chunk) => {
    if (done || status < 200 || status >= 300) return;
    const tokens = tokensIn(chunk);
    if (tokens === undefined) return;
    done = true;
    learner?.observe(inference.model, inference.text.length, tokens);
    if (feedback !== undefined) {
      const cached = cachedTokensIn(chunk);
      if (cached !== undefined) {
        l.reportsCached.add(d.worker);
        feedback.observe(tokens, cached);
      } else if (l.reportsCached.has(d.worker) && usageShowsNoCached(chunk)) {
        // vLLM writes the details only when something was cached: a worker that sends them read a miss.
        feedback.observe(tokens, 0);
      }
    }
  };
}

/**
 * A non-streamed response, one in N per worker watched (its body is one or two chunks): its duration
 * (dispatch -> the body chunk that carries its usage) with its generated tokens is one `recordWhole`
 * sample; the same usage feeds the usage learners.
 */
function whole(d: Dispatch, req: RouteRequest, l: Learners): Dispatch {
  const learn = usageLearner(d, req, l);
  const usageSampler = l.usageSampler;
  const inference = req.inference;
  // Several sequences decode side by side: their tokens are not one sequence's steps.
  const timed = inference !== undefined && (inference.sequences ?? 1) === 1;
  if (learn === undefined && !timed) return d;
  const generated =
    inference?.kind === 'responses' || inference?.kind === 'messages' ? outputTokensIn : completionTokensIn;
  const features = timed ? featuresOf(d, req) : undefined;
  const started = l.clock();
  let status = 0;
  let sampled: boolean | undefined;
  let finished = false;
  let recorded = false;
  return {
    ...d,
    watchResponseBody(s: number): boolean {
      if (d.watchResponseBody?.(s) ?? true) return true;
      if (sampled === undefined) sampled = !finished && usageSampler.take(d.worker);
      return sampled;
    },
    onResponseStart(s: number, bodyWatched: boolean): void {
      status = s;
      d.onResponseStart?.(s, bodyWatched);
    },
    transformResponseChunk(chunk: Buffer, endOfStream: boolean): ChunkRewrite {
      const out = d.transformResponseChunk?.(chunk, endOfStream);
      learn?.(status, chunk);
      if (features !== undefined && !recorded && status >= 200 && status < 300 && chunk.length > 0) {
        const tokens = generated(chunk);
        if (tokens !== undefined) {
          recorded = true;
          const now = l.clock();
          l.timing.recordWhole(d.worker, now - started, features, Math.max(0, tokens - 1), now);
        }
      }
      return out;
    },
    finish(end: RequestEnd): void {
      const firstEnd = !finished;
      finished = true;
      if (firstEnd && sampled === true) usageSampler.release(d.worker);
      d.finish(end);
    },
  };
}

/** Queues the request's prefill on its worker's backlog until its first byte or its end. */
function queued(d: Dispatch, req: RouteRequest, l: Learners): Dispatch {
  const cost = d.decision.cost;
  // A decode leg's prompt arrives by KV transfer; a request its decode worker serves whole prefills there.
  if (l.backlog === undefined || cost === undefined || (d.worker.role === 'decode' && !req.prefillHere))
    return d;
  const backlog = l.backlog;
  const worker = d.worker;
  const now = l.clock();
  const streamed = req.inference?.stream === true;
  // When no first byte will be seen (a non-streamed or an unwatched streamed response), the entry ends
  // when its prefill is predicted to end: after the prefills queued ahead (waitMs) and its own
  // (recomputeMs), WITHOUT the learned TTFT floor. With the floor, the estimates fed on themselves:
  // entries that outlived their prefill inflated the queued tokens of the sampled responses' TTFT
  // features, the fit answered with a smaller cost per token and a larger floor, and the longer
  // predictions kept the entries even longer. Measured with exact token counts (KV events,
  // shared-prefix): the cost per token fell to 0 and 20k phantom tokens sat queued per worker, so
  // recomputing a 4,800-token prompt looked free and the hit rate fell (53% vs 76% watching all).
  const prefillEnd = now + cost.chosen.waitMs + cost.chosen.recomputeMs;
  // Streamed: ended by the first byte; the deadline only guards against a lost end.
  const deadline = streamed ? now + 10 * cost.chosen.predictedMs + 10_000 : prefillEnd;
  const sequences = req.inference?.sequences ?? 1;
  let entry = backlog.add(worker, cost.chosen.uncachedTokens, deadline, sequences);
  let queued = true;
  const firstToken = firstTokenWatch(req.inference?.kind);
  const done = (): void => {
    queued = false;
    backlog.done(worker, entry);
  };
  return {
    ...d,
    onResponseStart(status: number, bodyWatched: boolean): void {
      if (queued && streamed && !bodyWatched) {
        // No first byte will be seen: end at the predicted end of its prefill, as a non-streamed response.
        backlog.done(worker, entry);
        entry = backlog.add(worker, entry.tokens, prefillEnd, sequences);
      }
      d.onResponseStart?.(status, bodyWatched);
    },
    transformResponseChunk(chunk: Buffer, endOfStream: boolean): ChunkRewrite {
      if (queued && chunk.length > 0 && firstToken(chunk)) done(); // one boolean test after the first
      return d.transformResponseChunk?.(chunk, endOfStream);
    },
    finish(end: RequestEnd): void {
      if (queued) done();
      d.finish(end);
    },
  };
}

/**
 * What a response's timing is fitted against: the tokens to prefill and the requests ahead the cost
 * model used for its decision; for other policies, the whole prompt at ~4 chars per token and the
 * worker's other in-flight requests.
 */
function featuresOf(d: Dispatch, req: RouteRequest): TtftFeatures {
  const cost = d.decision.cost;
  if (cost !== undefined)
    return { prefillTokens: cost.chosen.uncachedTokens + cost.chosen.queuedTokens, ahead: cost.chosen.ahead };
  return {
    prefillTokens: tokensFromChars(req.inference?.text.length ?? 0, DEFAULT_CHARS_PER_TOKEN),
    ahead: Math.max(0, d.worker.load - (req.inference?.sequences ?? 1)),
  };
}

function timed(d: Dispatch, req: RouteRequest, l: Learners): Dispatch {
  const { timing, clock } = l;
  if (req.inference?.stream !== true) return whole(d, req, l);
  const learn = usageLearner(d, req, l);
  const cost = d.decision.cost;
  const features = featuresOf(d, req);
  // A /v1/responses stream opens with events sent before the first token (first-token.ts).
  const firstToken = firstTokenWatch(req.inference?.kind);
  const started = clock();
  let status = 0;
  let chunks = 0;
  let first = 0;
  let last = 0;
  let finished = false;
  let sampled: boolean | undefined; // the sampler's answer; a response it chose is handed back at the end
  return {
    ...d,
    watchResponseBody(s: number): boolean {
      // The inner dispatch's own needs first; then a prefill big enough to hold up the requests
      // queued behind it (its backlog entry must end at its real first byte); otherwise only the
      // sampled share.
      if (d.watchResponseBody?.(s) ?? true) return true;
      if (cost !== undefined && cost.chosen.uncachedTokens >= WATCH_UNCACHED_TOKENS) return true;
      if (sampled === undefined) sampled = !finished && l.sampler.take(d.worker);
      return sampled;
    },
    onResponseStart(s: number, bodyWatched: boolean): void {
      status = s;
      d.onResponseStart?.(s, bodyWatched);
    },
    transformResponseChunk(chunk: Buffer, endOfStream: boolean): ChunkRewrite {
      const out = d.transformResponseChunk?.(chunk, endOfStream);
      if (chunk.length > 0 && status >= 200 && status < 300) {
        if (chunks > 0 || firstToken(chunk)) {
          const now = clock();
          if (chunks === 0) {
            first = now;
            timing.recordTtft(d.worker, now - started, features, now);
          }
          last = now;
          chunks += 1;
        }
        learn?.(status, chunk);
      }
      return out;
    },
    finish(end: RequestEnd): void {
      const firstEnd = !finished;
      finished = true;
      // The watch slot first: a throwing inner finish must not keep it taken for good.
      if (firstEnd && sampled === true) l.sampler.release(d.worker);
      d.finish(end);
      if (!firstEnd) return;
      // A response of several sequences interleaves their chunks: its gaps are not one step's time.
      if (end.kind === 'response' && chunks >= 3 && (req.inference?.sequences ?? 1) === 1)
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
      if (ok) timing.recordTtft(worker, durationMs, features, clock());
    };
  };
}
