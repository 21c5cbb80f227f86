/**
 * The cost model behind cache_aware's default mode (`--cache-aware-mode cost`): send a request to the
 * worker where it is predicted to get its first token soonest, counting what the choice costs the
 * requests after it. Pure: it reads the candidates, the prefix sources and the per-worker signals it is
 * handed; no counters, timers or logging.
 *
 * A cache hit is worth the prefill time it saves; a queue costs the time it makes a request wait. Per
 * candidate w, with the learned estimates it is handed (load/timing-estimates.ts `scoringOf`: the router
 * hands every worker its role's fleet estimate, fitted on all their responses, times the worker's pace,
 * 1 unless its first tokens come over 1.15x slower or faster than the fleet's for the same work: mixed
 * hardware), blended load (load/load-board.ts) and this router's queued prefills
 * (load/prefill-backlog.ts):
 *
 *   uncached_w  = promptTokens - cachedTokens_w          (prefix-source.ts: exact first, radix fallback)
 *   queued_w    = uncached tokens of the requests this router sent to w whose first token has not
 *                 arrived yet, over queuedRequests_w requests
 *   waiting_w   = the worker's scraped queue that this router did not put there (load-board.ts
 *                 `waitingElsewhere`: another replica's, a batch job's); 0 without a fresh sample
 *   running_w   = max(0, ahead_w - queuedRequests_w - waiting_w)   (the rest: sequences decoding)
 *   wait_w      = queued_w * prefillMsPerToken_w + waiting_w * waitMsPerRequest_w
 *   prefill_w   = ttftFloorMs_w + uncached_w * prefillMsPerToken_w
 *   predicted_w = wait_w + prefill_w                      (the predicted time to first token)
 *
 * Prefills queued ahead count in tokens, not requests: ten cache hits ahead cost less than one long
 * miss, so a worker that holds a prefix keeps the requests that share it until the prefill work it
 * already has outweighs the saving. A queue of unknown size (someone else's) costs a learned wait per
 * request. Sequences already running do not queue ahead of a new request's prefill: a continuously
 * batched engine (vLLM, and the simulator) schedules a new prefill next to them, so they enter only
 * through the decode term of the score below. Pricing them as a queue (as this model did until
 * 2026-12) made one more decoding request on the worker holding a prompt outweigh the whole prefill
 * its cache saves, and since a second router replica sees the first one's requests only as scraped
 * counts, two replicas gave up affinity more often than one (multi-turn, exact KV events, 3 runs
 * each: hit rate 0.798 -> 0.840 with two replicas, 0.844 -> 0.858 with one; bench/routing-bench.ts).
 *
 * The choice is by score, the prediction plus what this request does to the others:
 *
 *   score_w = predicted_w
 *           + contention * uncached_w * prefillMsPerToken_w     (recomputed prompt delays those behind)
 *           + costRecomputeWeight * fill_w * uncached_w * prefillMsPerToken_w   (and evicts others)
 *           + ahead_w * interChunkMs_w * costDecodeWeight * seqs (each sequence slows its batch)
 *           + out * interChunkMs_w                            (its own decode at this worker's pace)
 *
 * `out` is the request's `max_tokens` up to OWN_DECODE_MAX_TOKENS (64 when it sets none; 0 in a
 * prefill pool, whose leg makes one token, and for requests that are not inference). On alike
 * workers the term is the same everywhere and changes no choice; on mixed hardware it is what staying
 * on a slow worker costs the request after its first token, which the prediction (a time to first
 * token) does not see: with the pace alone, a conversation held by a worker three times slower kept
 * its follow-ups there to the last round, and the pass waited on it (multi-turn, 1 of 8 workers 3x
 * slower: 0.93x the fleet estimate's output tokens/s; docs/benchmarks.md, Analysis, 2026-12-07).
 *
 * `ahead_w` counts sequences, as vLLM's scheduler counts requests: a request with parallel sampling
 * (`n`) or a batched completions prompt runs `seqs` of them (request/inference-request.ts
 * `requestSequences`; its load guard weighs that many, and so does its entry in the prefill backlog).
 *
 * `contention` is the fewest queued prefills on any candidate: while some worker has none, the fleet
 * has idle prefill capacity and recomputing a prompt elsewhere delays nobody (work-conserving); once
 * every worker has a queue, each recomputed token delays the requests queued behind it, and a cache hit
 * is worth correspondingly more. `costDecodeWeight` (default 0.25) prices the decode batch: a
 * continuously batched engine runs one step per token for everything it holds (queued prefills soon
 * decode too, so `ahead_w` here is everything ahead, blended), and each sequence added to a busy worker
 * slows every step of its batch a little; without this term a fleet whose time to first token
 * is all prefill would learn that decoding requests are free and pile onto the worker with the cache.
 *
 * `fill_w` is how full the worker's prefix cache is, in [0, 1] (cache-aware.ts: the tokens its KV
 * events show it holding when it publishes them, else this router's picture of it, over the capacity
 * the worker reports; 0 when unknown). A prompt recomputed on a full cache
 * evicts about as many tokens of other cached contexts, which their next requests recompute in turn;
 * on a cache with room it evicts nothing. Without the term, a holder's queue sent its prompt to an
 * idle worker whose cache was full, and the contexts it displaced missed next (eviction-pressure, KV
 * events, 3 interleaved runs each, weight 1 vs 0: hit rate 54.0% -> 55.6% one router, 44.1% -> 50.3%
 * two replicas; approximate tree 52.1% -> 57.5%; shared-prefix 86.3% -> 87.9%; multi-turn, chat,
 * hot-burst, long-prompt, external-load within their run-to-run spread). A constant weight (no fill)
 * also took the idle workers' first prompts away in hot-burst and chat (max/mean 1.36 and 1.67).
 * With KV events the fill is what the events show the worker holding (since 2026-12-03; before, the
 * picture alone). A replica's picture holds only the prompts it routed itself, and its
 * characters-per-token rule read caches tokenized at ~1.8 characters per token as under half full
 * (decision traces, eviction-pressure: mean fill of the chosen worker on misses 0.59 with one
 * router, 0.47 with two). Measured (bench/routing-ab.ts --kv-events, events vs picture, interleaved):
 * eviction-pressure two replicas hit 56.1% vs 54.4% and 57.2% vs 55.8%, output tokens/s +2.4% and
 * +3.5% (seeds 1 and 2, 3 runs each); one router 58.9% vs 58.6% and 62.1% vs 63.7%, +1.6% and
 * -3.8% (its runs spread 1,515-1,942 tok/s); shared-prefix, multi-turn, chat, hot-burst,
 * external-load and long-prompt +0.1% to +3.9% tok/s, hit rates equal or higher (2 runs each).
 * Without events, the picture counts over this router's share of the worker's load (since
 * 2026-12-04, `cacheFillOwnShare`): an LRU cache fed by two replicas holds the other's prompts too, so
 * a replica's picture of half the capacity is a full cache. Two approximate replicas, eviction-pressure
 * (bench/routing-ab.ts --kv-events, off vs on, interleaved): hit 38.8% -> 39.6%, 1,098 -> 1,142 tok/s
 * (2 runs); 40.3% -> 44.1%, 1,168 -> 1,206 (3 runs); the events' own fill read 44.6% (an oracle run).
 * Seed 2 (4 runs): 45.2% -> 43.0%, 1,251 -> 1,206. The replicas benchmark after it read 38.3% (runs
 * 35.9-41.2) against 41.5% the run before. So no effect measurable above the runs' spread; kept
 * because reading a cache that other traffic fills as half empty is wrong (external-load, one
 * router: 1.29x -> 1.36x round robin across two routing runs, 1.01x in its A/B).
 * Trimming the picture itself to that share (so it forgets sooner) was worse: 34.0%, 1,077 tok/s, as
 * prompts both replicas send a worker are kept fresh in its cache by the other's hits.
 *
 * The lowest score wins; candidates within 1e-6 ms tie and are split by (load, processed, index) as
 * every policy does (tie-break.ts), so identical idle workers still spread. No threshold decides
 * between "cache" and "load": a 20-token prompt saves ~1 ms of prefill and so follows the shortest
 * queue, while a 200 KB document shared by many requests saves seconds and is worth a long one.
 *
 * One exception (prefix-home.ts): when the lowest score is a worker that does not hold the prompt's
 * opening (~64 tokens: nobody holds it yet, or its one holder was filtered or is too busy), the request
 * goes to the prompt's rendezvous home among the unfiltered candidates whose score is within
 * `prefixHomeMargin` x its prefill time of the lowest: the worker every router replica picks for that
 * opening, so replicas that share nothing seed a new prefix, and spill a busy one, on the same worker.
 * The margin is `prefixHomeMarginAlone` while the workers' own counts show no load from elsewhere on
 * the candidates (no other replica or client to agree with), `prefixHomeMargin` once they do
 * (signals.foreignShare, prefix-home.ts `homeMargin`), and is scaled by the share of recent prompts
 * whose opening was seen shortly before (prefix-reuse.ts): traffic that never reuses a prefix does
 * not pay for agreeing on one.
 *
 * Roles (P/D): a prefill pool scores by predicted prefill completion (the formula above: its response is
 * the first token; the legs the router runs itself feed its backlog and estimates, pd-dispatcher.ts
 * `prefillStarted`); a decode pool receives the KV cache from the prefill worker, so its prefix cache is
 * irrelevant and it scores by predicted wait alone (uncached = 0), except for a request its decode
 * worker prefills itself (`input.prefillHere`: no prefill leg, pd-dispatcher.ts `localReason`), scored
 * with its prefill and the decode workers' prefix caches as in a regular pool.
 *
 * Filters, before scoring (a filtered candidate is skipped while at least one candidate passes; when
 * none passes they are all scored: a request is never refused because the fleet is busy):
 * - LoRA (lora-affinity.ts), first: a request for a LoRA adapter skips the workers whose adapter
 *   slots are all taken by other adapters (it would wait there until one drains) while any candidate
 *   has the adapter active or a free slot; a free slot adds `loraLoadMs` to the prediction (the
 *   adapter is loaded before the prefill), so a worker already running the adapter wins unless its
 *   queue costs more than the load; so does a worker with no LoRA opinion (no fresh sample) while
 *   others have one. The filters below apply among the candidates it keeps, and their counts (the
 *   mean load, the idle worker, the saturated share, the contention) are taken over those alone.
 * - overload: a FRESH scraped sample shows more than `overloadWaiting` queued requests or KV-cache
 *   usage above `overloadKvUsage`. Defaults 8 waiting and 0.9 usage, near the SGLang gateway's (8
 *   waiting, 0.8 usage); vLLM preempts sequences as its KV cache fills, so 0.9 is where a worker stops
 *   being a good place to add work. It singles out outliers: when fewer than half the candidates pass
 *   it (a saturated fleet, where a busy vLLM's KV cache reads near full on every worker), it is
 *   ignored and every candidate is scored. Otherwise the one or two workers that happened to read
 *   below the thresholds at their last scrape got every request until the next one: measured on
 *   eviction-pressure (caches room for two contexts, so two running requests read as full), 7 of 8
 *   workers were filtered in 12% of decisions, and ignoring the filter there raised the hit rate
 *   from 43% to 49.5% and output tokens/s by 15% (docs/benchmarks.md, Analysis).
 * - imbalance: everything ahead (blended; times the worker's pace, so on mixed hardware a fast worker
 *   may hold more requests than a slow one before it counts as busier) above both `costBalanceRel` x the candidates' mean and the mean +
 *   `costBalanceAbs` (defaults 1.5 and 8, the reference router's relative rule with an absolute floor
 *   scaled to per-worker concurrency). The score keeps affinity within that band; the band keeps one
 *   hot prefix (one system prompt shared by every user, a burst on one document) from piling onto one
 *   worker while the others idle, which no per-request prediction sees coming. The floor was 4 until
 *   2026-12-02: at 8 requests per worker (64 on 8) a holder was skipped from 12 requests ahead, and
 *   every skip reseeded a prefix elsewhere. At 8 (3 interleaved runs each, bench/routing-bench.ts):
 *   shared-prefix hit rate 81.2% -> 86.7%; eviction-pressure 50.9% -> 53.8% (approximate tree),
 *   48.2% -> 54.7% (KV events), 42.2% -> 45.1% with two replicas; external-load TTFT p50 71 -> 49 ms;
 *   long-prompt, hot-burst, chat and multi-turn unchanged within their spread (hot-burst's burst of
 *   200 still spreads: there the relative rule, 1.5x a mean of 25, is the wider one).
 * - idle queue (`costIdleQueue`, default 2; 0 = off): while some candidate has nothing at all ahead
 *   (no request queued or running), a candidate with at least that many prefills queued (this
 *   router's not yet at their first token, plus the scraped queue of others) is skipped. A worker
 *   with nothing to do is prefill capacity going to waste, and the band above cannot see a burst
 *   coming: when 200 requests on one new 8,192-token prefix arrive at once, each holder's score stays
 *   ~400 ms below a non-holder's (the non-holder's prefill plus what it displaces from a cache full of
 *   older contexts), and the mean rises only as the holders fill, so the first holders grew far past
 *   the final mean before the last workers were seeded (per worker over 2 runs: 66-68 requests on
 *   four, 33 on the other four; max/mean 1.36). With the rule every worker is seeded within the
 *   first 16 requests, then the score spreads the rest evenly over holders that all hold the prefix.
 *   Sequences decoding do not count (they do not delay a prefill; see above), so a holder busy
 *   decoding keeps its prompts. Measured (2 interleaved runs per variant, bench/routing-bench.ts,
 *   2026-12-02): the band's margin (8) as the limit instead took hot-burst from 0.89x to 0.92-0.98x
 *   round robin's output tokens/s (max/mean 1.00; the last worker was seeded only at the 64th
 *   request); a limit of 3 took it to 0.99x, eviction-pressure +2.7%, other workloads within their
 *   spread. Measuring the margin from the least loaded worker always (not only when one is idle)
 *   cost shared-prefix and eviction-pressure 4% each.
 *   The limit is 2, not 3, since 2026-12-03: with 3, four questions on each of four 220 KB documents
 *   arriving at once (the long-prompt workload, 8 workers) put a document's first three questions on
 *   one worker and its fourth on an idle one (max/mean processed 1.5); with 2 the third question
 *   seeds an idle worker and the fourth follows it there as a hit, so each document is computed on
 *   two workers, two questions each (test/unit/routing/cost-model.test.ts), at the same throughput.
 *   Elsewhere neutral within spread (bench/routing-ab.ts, 2 interleaved runs per variant, seeds 1
 *   and 2, output tokens/s vs round robin, 3 -> 2): hot-burst 1.00x -> 1.06x and 0.98x -> 1.00x,
 *   multi-turn 1.08x -> 1.11x and 1.08x -> 1.08x, shared-prefix 1.78x -> 1.81x and 1.90x -> 1.87x,
 *   chat 1.04x -> 1.05x, eviction-pressure 2.14x -> 2.13x, external-load 1.34x -> 1.33x.
 */
import type { LoadView } from '../load/load-board.js';
import type { Backlog } from '../load/prefill-backlog.js';
import type { WorkerEstimates } from '../load/timing-estimates.js';
import type { Role } from '../workers/role.js';
import type { Worker } from '../workers/worker.js';
import type { SelectionInput } from './policy.js';
import { resolvePrefix, type PrefixSource } from './prefix-source.js';
import {
  DEFAULT_PREFIX_HOME_OPTIONS,
  homeApplies,
  homeKeyHash,
  homeMargin,
  keyHolders,
  prefixHome,
} from './prefix-home.js';
import { leastLoaded } from './tie-break.js';
import type { AdapterState } from './lora-affinity.js';

/** What the cost model reads per worker (the composition root binds the scraper's board and clock). */
export interface WorkerSignals {
  load(worker: Worker): LoadView;
  timing(worker: Worker): WorkerEstimates;
  /** This router's prefills queued on the worker (none when not tracked). */
  backlog?(worker: Worker): Backlog;
  /** Share of the worker's recent load this router did not send, in [0, 1] (load-board.ts); 0 when absent. */
  foreignShare?(worker: Worker): number;
  /** LoRA adapter `model`'s state on the worker (lora-affinity.ts); undefined = no opinion. */
  adapter?(worker: Worker, model: string): AdapterState | undefined;
}

export interface CostModelOptions {
  /** Skip a worker whose scraped queue is longer than this while others are not. Default 8. */
  overloadWaiting: number;
  /** Skip a worker whose scraped KV-cache usage is above this while others are not. Default 0.9. */
  overloadKvUsage: number;
  /** Characters per token when no source knows the prompt's token count. Default 4. */
  charsPerToken: number;
  /** Skip a worker whose load is above this multiple of the mean (and the mean + costBalanceAbs). Default 1.5. */
  costBalanceRel: number;
  /** ... and above the mean + this many requests. Default 8. */
  costBalanceAbs: number;
  /** While a candidate has nothing ahead, skip one with at least this many prefills queued (see the header); 0 = off. Default 2. */
  costIdleQueue: number;
  /** Fraction of a step each request ahead adds to the score (decode batch slowdown). Default 0.25. */
  costDecodeWeight: number;
  /** Weight of recomputed tokens x the worker's cache fill in the score (the contexts they displace). Default 1. */
  costRecomputeWeight: number;
  /** Prefix home (prefix-home.ts): extra score a prompt's home may cost, x its prefill. Default 3; 0 = off. */
  prefixHomeMargin: number;
  /** Prefix home: the margin while no load from elsewhere is seen on the candidates. Default 0.5. */
  prefixHomeMarginAlone: number;
  /** Prefix home: the most the margin may be when every candidate's cache is known from KV events. Default 1. */
  prefixHomeMarginExact: number;
  /** Prefix home: characters of the prompt's start that key its home. Default 256. */
  prefixHomeKeyChars: number;
  /** Predicted time to load a LoRA adapter into a free slot (lora-affinity.ts). Default 50. */
  loraLoadMs: number;
}

export const DEFAULT_COST_MODEL_OPTIONS: Readonly<CostModelOptions> = Object.freeze({
  overloadWaiting: 8,
  overloadKvUsage: 0.9,
  charsPerToken: 4,
  costBalanceRel: 1.5,
  costBalanceAbs: 8,
  costIdleQueue: 2,
  costDecodeWeight: 0.25,
  costRecomputeWeight: 1,
  prefixHomeMargin: DEFAULT_PREFIX_HOME_OPTIONS.margin,
  prefixHomeMarginAlone: DEFAULT_PREFIX_HOME_OPTIONS.marginAlone,
  prefixHomeMarginExact: DEFAULT_PREFIX_HOME_OPTIONS.marginExact,
  prefixHomeKeyChars: DEFAULT_PREFIX_HOME_OPTIONS.keyChars,
  loraLoadMs: 50,
});

/** One candidate's prediction. */
export interface CostScore {
  readonly worker: Worker;
  /** Predicted time to first token. */
  readonly predictedMs: number;
  /** What the choice is ranked by: the prediction plus its cost to the others (see the header). */
  readonly scoreMs: number;
  readonly waitMs: number;
  /** Fixed part of the first token (the learned floor) + recomputeMs. */
  readonly prefillMs: number;
  /** The worker's time for this request's uncached tokens (what contention weighs). */
  readonly recomputeMs: number;
  /** The score's displacement term: costRecomputeWeight x the worker's cache fill x recomputeMs. */
  readonly displaceMs: number;
  /** Requests queued ahead that this router did not queue (scraped `waitingElsewhere`): priced per request. */
  readonly ahead: number;
  /** Requests running (decoding) on the worker: in the decode term only. */
  readonly running: number;
  /** Uncached tokens of this router's prefills queued on the worker. */
  readonly queuedTokens: number;
  readonly cachedTokens: number;
  readonly uncachedTokens: number;
  readonly loadSource: LoadView['source'];
  /** Over the overload thresholds, the imbalance band or the idle queue (which one: `filterOf`). */
  readonly overloaded: boolean;
  /** The request's LoRA adapter on this worker (lora-affinity.ts), when there is an opinion. */
  readonly adapter?: AdapterState;
  /** Included in prefillMs: the adapter's load into a free slot (`loraLoadMs`), else 0. */
  readonly adapterLoadMs: number;
  /** Skipped by the LoRA filter (every adapter slot taken by others, while another candidate has room). */
  readonly loraSkipped: boolean;
}

/** The filter that skipped a candidate (see the header: LoRA, overload, imbalance, the idle queue). */
export type CostFilter = 'lora' | 'overload' | 'imbalance' | 'idle_queue';

/** The inputs of one decision (decision header, debug log, timing feedback). */
export interface CostInputs {
  readonly promptTokens: number;
  readonly chosen: CostScore;
  /** The best other candidate that was scored, if any. */
  readonly runnerUp?: CostScore;
  /** Candidates skipped by the filters. */
  readonly skippedOverloaded: number;
  /** Of the others, candidates skipped because every adapter slot there is taken (lora-affinity.ts). */
  readonly skippedLora?: number;
  /** Candidates over the overload thresholds that were scored anyway (fewer than half passed). */
  readonly saturated?: number;
  /** Fewest queued prefills on any candidate (the weight of recomputed tokens). */
  readonly contention: number;
  /** The largest cached share of the prompt among the candidates, in [0, 1]. */
  readonly bestMatchRate: number;
  readonly maxCachedTokens: number;
  /** The prefix-home rule (prefix-home.ts) chose the worker: the best-scored one lacked the prompt's opening. */
  readonly home?: boolean;
  /** The margin the prefix-home rule ran with (x the prefill), when it ran. */
  readonly homeMargin?: number;
  /** The best-scored candidate holding the most of the prompt, when it was not chosen (why the cache lost). */
  readonly holder?: CostScore;
  /** The filter that skipped that holder, when one did (else its score lost). */
  readonly holderFilter?: CostFilter;
}

const TIE_MS = 1e-6;
const NO_BACKLOG: Backlog = Object.freeze({ requests: 0, tokens: 0 });

export function scoreCost(
  input: SelectionInput,
  role: Role,
  sources: readonly PrefixSource[],
  signals: WorkerSignals,
  options: Readonly<CostModelOptions>,
  /** Multiplies `prefixHomeMargin` (prefix-reuse.ts: the share of recent prompts that reused an opening). */
  homeMarginScale = 1,
  /** How full the worker's prefix cache is, in [0, 1] (see `costRecomputeWeight`); absent = 0. */
  cacheFill?: (worker: Worker) => number,
  /** Characters per token for this request's model (load/chars-per-token.ts); default `options.charsPerToken`. */
  charsPerToken: number = options.charsPerToken,
): CostInputs {
  const workers = input.workers;
  const usePrefix = (role !== 'decode' || input.prefillHere === true) && input.text.length > 0;
  const prefix = usePrefix ? resolvePrefix(sources, input, workers, charsPerToken) : undefined;
  const promptTokens = prefix?.promptTokens ?? 0;

  const c = new Array<Candidate>(workers.length);
  let maxCached = 0;
  let contention = Infinity;
  let sumAhead = 0;
  let anyIdle = false; // a kept candidate with nothing queued or running
  let hot = 0; // kept candidates over the overload thresholds
  let kept = 0; // candidates the LoRA filter keeps (all of them without it)
  // LoRA first (lora-affinity.ts): full workers are out while any other candidate remains (never all
  // of them), and the filters below count only the candidates it keeps.
  const adapterOf = input.model !== '' ? signals.adapter : undefined;
  let adapters: (AdapterState | undefined)[] | undefined; // allocated only when some worker has an opinion
  let loraFull = 0;
  for (let i = 0; adapterOf !== undefined && i < workers.length; i++) {
    const a = adapterOf(workers[i] as Worker, input.model);
    if (a === undefined) continue;
    adapters ??= new Array<AdapterState | undefined>(workers.length);
    adapters[i] = a;
    if (a === 'full') loraFull += 1;
  }
  const anyState = adapters !== undefined; // some candidate has an opinion: the request names an adapter
  const loraOut = loraFull > 0 && loraFull < workers.length;
  for (let i = 0; i < workers.length; i++) {
    const worker = workers[i] as Worker;
    const load = signals.load(worker);
    const est = signals.timing(worker);
    const queued = signals.backlog?.(worker) ?? NO_BACKLOG;
    const cachedTokens = prefix ? (prefix.cached[i] as number) : 0;
    if (cachedTokens > maxCached) maxCached = cachedTokens;
    const adapter = adapters?.[i];
    const x = candidate(
      worker,
      load,
      est,
      queued,
      prefix ? promptTokens : 0,
      cachedTokens,
      options,
      adapter,
      anyState,
      input.sequences ?? 1,
      ownDecodeTokens(input.outputTokens),
    );
    if (cacheFill !== undefined && options.costRecomputeWeight > 0 && x.recomputeMs > 0) {
      x.displaceMs = options.costRecomputeWeight * cacheFill(worker) * x.recomputeMs;
    }
    c[i] = x;
    if (loraOut && adapter === 'full') {
      x.loraSkipped = true;
      continue;
    }
    kept += 1;
    if (queued.requests < contention) contention = queued.requests;
    sumAhead += x.totalAhead;
    if (load.ahead <= 0) anyIdle = true;
    if (x.overloaded) hot += 1;
  }
  if (!Number.isFinite(contention)) contention = 0;
  const mean = sumAhead / Math.max(1, kept);
  const cap = Math.max(mean * options.costBalanceRel, mean + options.costBalanceAbs);
  const idleQueue = anyIdle && options.costIdleQueue > 0 ? options.costIdleQueue : Infinity;
  // The overload filter singles out outliers; a saturated fleet is scored whole (see the header).
  const saturated = hot * 2 > kept ? hot : 0;
  if (saturated > 0) for (const x of c) x.overloaded = false;
  let anyFit = false;
  for (const x of c) {
    if (x.totalAhead > cap || x.queuedPrefills >= idleQueue) x.overloaded = true;
    if (!x.loraSkipped && !x.overloaded) anyFit = true;
    x.scoreMs = x.predictedMs + contention * x.recomputeMs + x.displaceMs + x.decodeMs + x.ownDecodeMs;
  }
  const out = (x: Candidate): boolean => x.loraSkipped || (anyFit && x.overloaded);

  let best = Infinity;
  let skipped = 0;
  for (const x of c) {
    if (x.loraSkipped) continue;
    if (anyFit && x.overloaded) skipped += 1;
    else if (x.scoreMs < best) best = x.scoreMs;
  }
  const tied: number[] = [];
  for (let i = 0; i < c.length; i++) {
    const x = c[i] as Candidate;
    if (!out(x) && x.scoreMs <= best + TIE_MS) tied.push(i);
  }
  let chosenIndex = tied.length === 1 ? (tied[0] as number) : leastLoaded(workers, tied);
  // The pick does not hold the prompt's opening: seed or spill it where every replica would (prefix-home.ts).
  const homeOptions = {
    margin: options.prefixHomeMargin,
    marginAlone: options.prefixHomeMarginAlone,
    marginExact: options.prefixHomeMarginExact,
    keyChars: options.prefixHomeKeyChars,
  };
  let home = false;
  let margin: number | undefined;
  // A batch's cached tokens are summed over its prompts (prefix-source.ts): held per prompt.
  const prompts = input.prompts?.length ?? 1;
  if (
    usePrefix &&
    homeApplies(
      input.text.length,
      (c[chosenIndex] as Candidate).cachedTokens,
      keyHolders(c, charsPerToken, homeOptions, prompts),
      charsPerToken,
      homeOptions,
      prompts,
    )
  ) {
    for (const x of c) x.eligible = !out(x);
    const bestScore = (c[chosenIndex] as Candidate).scoreMs;
    margin = homeMargin(homeOptions, meanForeignShare(signals, workers), prefix?.exact) * homeMarginScale;
    const marginMs = margin * (c[chosenIndex] as Candidate).recomputeMs;
    const at = prefixHome(homeKeyHash(input.text, homeOptions.keyChars), c, bestScore, marginMs);
    if (at !== undefined) {
      chosenIndex = at;
      home = true;
    }
  }
  const chosen = c[chosenIndex] as Candidate;
  let holder: Candidate | undefined;
  if (maxCached > chosen.cachedTokens) {
    for (const x of c) {
      if (x.cachedTokens === maxCached && (holder === undefined || x.scoreMs < holder.scoreMs)) holder = x;
    }
  }
  let runnerUp: Candidate | undefined;
  for (let i = 0; i < c.length; i++) {
    const x = c[i] as Candidate;
    if (i === chosenIndex || out(x)) continue;
    if (runnerUp === undefined || x.scoreMs < runnerUp.scoreMs) runnerUp = x;
  }
  return {
    promptTokens,
    chosen,
    ...(runnerUp ? { runnerUp } : {}),
    skippedOverloaded: skipped,
    ...(loraOut ? { skippedLora: loraFull } : {}),
    ...(saturated > 0 ? { saturated } : {}),
    contention,
    bestMatchRate: promptTokens > 0 ? maxCached / promptTokens : 0,
    maxCachedTokens: maxCached,
    ...(home ? { home } : {}),
    ...(margin !== undefined ? { homeMargin: margin } : {}),
    ...(holder ? { holder } : {}),
    ...(holder && out(holder) ? { holderFilter: filterOf(holder, cap, idleQueue) } : {}),
  };
}

/** Which filter skipped a candidate that `out` took out (the first that applies, in this order). */
function filterOf(x: Candidate, cap: number, idleQueue: number): CostFilter {
  if (x.loraSkipped) return 'lora';
  if (x.totalAhead > cap) return 'imbalance';
  if (x.queuedPrefills >= idleQueue) return 'idle_queue';
  return 'overload';
}

/** A CostScore while it is being built (filters and the score are set once every candidate is known). */
interface Candidate extends CostScore {
  scoreMs: number;
  overloaded: boolean;
  /** Everything ahead (blended) times the worker's pace (1 on alike workers), for the imbalance filter. */
  readonly totalAhead: number;
  /** Prefills queued ahead: this router's not yet at their first token + the scraped queue of others. */
  readonly queuedPrefills: number;
  /** The decode-batch term of the score. */
  readonly decodeMs: number;
  /** The request's own decode at this worker's step time (the same on every alike worker). */
  readonly ownDecodeMs: number;
  displaceMs: number;
  /** Stable across replicas (the worker's URL): the prefix-home rule's label. */
  readonly label: string;
  /** Not skipped by a filter (set for the prefix-home rule). */
  eligible: boolean;
  /** Skipped by the LoRA filter (every adapter slot taken, while another candidate has room). */
  loraSkipped: boolean;
}

function candidate(
  worker: Worker,
  load: LoadView,
  est: WorkerEstimates,
  queued: Backlog,
  promptTokens: number,
  cachedTokens: number,
  options: Readonly<CostModelOptions>,
  adapter: AdapterState | undefined,
  /** Some candidate has an adapter state: one without (no fresh sample) may have to load it too. */
  anyState: boolean,
  /** The sequences the request adds to the chosen worker's batch (parallel sampling, batched prompts). */
  sequences: number,
  /** The output tokens the request is expected to decode here (ownDecodeTokens). */
  outputTokens: number,
): Candidate {
  const uncachedTokens = Math.max(0, promptTokens - cachedTokens);
  const others = Math.max(0, load.ahead - queued.requests);
  const ahead = Math.min(others, load.waitingElsewhere ?? 0);
  const waitMs = queued.tokens * est.prefillMsPerToken + ahead * est.waitMsPerRequest;
  const recomputeMs = uncachedTokens * est.prefillMsPerToken;
  const adapterLoadMs = adapter === 'active' || (adapter === undefined && !anyState) ? 0 : options.loraLoadMs;
  const prefillMs = est.ttftFloorMs + recomputeMs + adapterLoadMs;
  const overloaded =
    load.source === 'scraped' &&
    ((load.waiting ?? 0) > options.overloadWaiting || (load.kvUsage ?? 0) > options.overloadKvUsage);
  return {
    worker,
    predictedMs: waitMs + prefillMs,
    scoreMs: 0,
    waitMs,
    prefillMs,
    ahead,
    running: others - ahead,
    queuedTokens: queued.tokens,
    cachedTokens,
    uncachedTokens,
    loadSource: load.source,
    overloaded,
    // In time, not requests: a worker at twice the pace holds its requests twice as long.
    totalAhead: load.ahead * est.pace,
    queuedPrefills: queued.requests + ahead,
    recomputeMs,
    decodeMs: load.ahead * est.interChunkMs * options.costDecodeWeight * sequences,
    ownDecodeMs: outputTokens * est.interChunkMs,
    displaceMs: 0,
    label: worker.key,
    eligible: true,
    loraSkipped: false,
    ...(adapter === undefined ? {} : { adapter }),
    adapterLoadMs,
  };
}

/** What the own-decode term counts when a request sets no `max_tokens` (it decodes something). */
export const OWN_DECODE_DEFAULT_TOKENS = 64;
/** The most it counts: `max_tokens` is a bound, and long answers are rarer than long bounds. */
export const OWN_DECODE_MAX_TOKENS = 256;

/** Output tokens of the own-decode term: `max_tokens` up to OWN_DECODE_MAX_TOKENS; 64 unset; 0 unknown. */
function ownDecodeTokens(outputTokens: number | undefined): number {
  if (outputTokens === undefined) return 0;
  return outputTokens > 0 ? Math.min(outputTokens, OWN_DECODE_MAX_TOKENS) : OWN_DECODE_DEFAULT_TOKENS;
}

/** Mean over the candidates of the share of their load this router did not send (0 without the signal). */
function meanForeignShare(signals: WorkerSignals, workers: readonly Worker[]): number {
  const share = signals.foreignShare;
  if (share === undefined || workers.length === 0) return 0;
  let sum = 0;
  for (const w of workers) sum += share(w);
  return sum / workers.length;
}

/**
 * Fewest cached tokens that make a hit: one KV block at vLLM's default block size (vLLM caches whole
 * blocks, so a shorter match, such as a chat's role marker, saves nothing).
 */
export const MIN_HIT_TOKENS = 16;

/**
 * The decision's branch, in the names cache_aware always used: `cache_hit` when the chosen worker
 * holds the longest cached prefix, `imbalance` when another held more but load outweighed it,
 * `low_match` when no candidate holds a block's worth of the prompt (MIN_HIT_TOKENS).
 */
export function costBranch(c: CostInputs): 'cache_hit' | 'imbalance' | 'low_match' {
  if (c.maxCachedTokens < MIN_HIT_TOKENS) return 'low_match';
  return c.chosen.cachedTokens >= c.maxCachedTokens ? 'cache_hit' : 'imbalance';
}

/**
 * `predicted_ms=..; wait_ms=..; ahead=..; running=..; uncached=../..; runner_up=..` for the decision
 * header, and `holder=..; holder_score_ms=..` when the worker holding most of the prompt lost, with
 * `holder_filtered=overload|imbalance|idle_queue|lora` when a filter skipped it rather than its score.
 */
export function describeCost(c: CostInputs): string {
  const s = c.chosen;
  const r = c.runnerUp;
  const parts = [
    `predicted_ms=${s.predictedMs.toFixed(1)}`,
    `score_ms=${s.scoreMs.toFixed(1)}`,
    `wait_ms=${s.waitMs.toFixed(1)}`,
    `ahead=${round2(s.ahead)}`,
    `running=${round2(s.running)}`,
    `queued_tokens=${s.queuedTokens}`,
    `load=${s.loadSource}`,
    `uncached=${s.uncachedTokens}/${c.promptTokens}`,
  ];
  if (c.skippedOverloaded > 0) parts.push(`overloaded=${c.skippedOverloaded}`);
  if (s.adapter !== undefined) parts.push(`lora=${s.adapter}`);
  if (c.skippedLora !== undefined) parts.push(`lora_full=${c.skippedLora}`);
  if (c.saturated !== undefined) parts.push(`saturated=${c.saturated}`);
  if (c.contention > 0) parts.push(`contention=${c.contention}`);
  if (s.displaceMs > 0) parts.push(`displace_ms=${s.displaceMs.toFixed(1)}`);
  if (c.home === true) parts.push('home=1');
  if (c.homeMargin !== undefined) parts.push(`home_margin=${round2(c.homeMargin)}`);
  if (r) {
    parts.push(
      `runner_up=${r.worker.key}`,
      `runner_up_ms=${r.predictedMs.toFixed(1)}`,
      `runner_up_score_ms=${r.scoreMs.toFixed(1)}`,
      `runner_up_uncached=${r.uncachedTokens}`,
    );
  }
  const h = c.holder;
  if (h) {
    parts.push(
      `holder=${h.worker.key}`,
      `holder_score_ms=${h.scoreMs.toFixed(1)}`,
      `holder_wait_ms=${h.waitMs.toFixed(1)}`,
      `holder_ahead=${round2(h.ahead)}`,
      `holder_running=${round2(h.running)}`,
      `holder_uncached=${h.uncachedTokens}`,
    );
    if (c.holderFilter !== undefined) parts.push(`holder_filtered=${c.holderFilter}`);
  }
  return parts.join('; ');
}

function round2(n: number): number {
  return Math.round(n * 100) / 100;
}
