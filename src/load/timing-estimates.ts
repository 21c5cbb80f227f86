/**
 * Per-worker online estimates of response timing, learned from the responses the router already
 * streams through ext_proc (no extra requests). Pure: time and observations passed in; no timers,
 * metrics or logging. State is keyed by the Worker object, so it is per role and per registration
 * generation, like load and health.
 *
 * Observations (timing-dispatcher.ts feeds them):
 * - TTFT of a streamed response: routing decision -> first response body chunk, with the features the
 *   cost model used for that decision: uncached prompt tokens U and requests ahead A.
 * - Inter-chunk time of a streamed response: (last chunk - first chunk) / (chunks - 1).
 * - Duration of a non-streamed ("whole") response: routing decision -> its body, with the same
 *   features and its decode steps M (`usage.completion_tokens` - 1). It arrives in one piece when the
 *   last token is out, so it says nothing of the first token on its own; the fit below separates it.
 *
 * Estimates:
 * - `interChunkMs`: EWMA (alpha 0.1 per response) of the inter-chunk time: the engine's step time under
 *   its current batch.
 * - TTFT model `ttft = floorMs + prefillMsPerToken * U + waitMsPerRequest * A`, fitted by exponentially
 *   weighted recursive least squares (the three-coefficient generalisation of an EWMA: forgetting factor
 *   0.98, i.e. about the last 50 responses). The fit has a fourth coefficient, its decode step,
 *   whose feature is M: a whole response is one observation of `ttft + step * M`, a streamed first
 *   token one with M = 0 (it leaves the step alone). The published `interChunkMs` is the EWMA of
 *   the measured gaps once there are any, else the fit's step: the two are kept apart because a
 *   gap is what the router sees between chunks (Envoy may coalesce tokens), and the fit's step,
 *   pulled towards it, put the difference into the floor and the cost per token (measured through
 *   Envoy with half the requests streamed: 0.17 ms per token for 0.2). So a fleet whose clients never stream
 *   (batch jobs, many agent frameworks) is still learned: the prefill and wait costs from how the
 *   durations move with U and A, the step from how they move with M (where every response has the
 *   same length, the prior's weights split the constant: the step's, M times the floor's, takes it),
 *   and each worker's pace from its durations against the fleet's prediction.
 *   The priors are the starting coefficients AND a Gaussian prior around them (standard deviation = the prior value), so a worker with few or uninformative samples
 *   (every prompt the same size, never any queue) keeps its priors in the directions the data cannot
 *   see. The covariance is capped at the prior's (no wind-up while a direction is unexcited), and an
 *   observation is clipped to 2 x the current prediction + 200 ms, so one stalled response cannot wreck
 *   the fit (a worker truly that much slower is learned over a few responses instead of one).
 * - Coefficients are held at 0 or above, the cost per token at MIN_PREFILL_FRACTION of its prior or
 *   above, inside the fit (`fit`: an update that would cross a bound is made by the other
 *   coefficients), so what is published is what the fit predicts.
 *   The prefills queued ahead are a feature of their own (in
 *   tokens, at the prefill coefficient: load/prefill-backlog.ts), so `waitMsPerRequest` is what a
 *   request queued ahead by someone else (the worker's scraped queue minus this router's own) costs a
 *   new request's first token; requests running (decoding) are not a feature: the cost model prices
 *   the decode batch apart (its `costDecodeWeight` term).
 * - `ttftMs`: plain EWMA (alpha 0.1) of observed TTFT, for display.
 *
 * Fleet estimates: every observation also updates one estimate per ROLE (all that role's workers
 * together). A worker with no observations of its own reads its role's fleet estimate, and a worker's
 * own estimate starts from the fleet's at its first observation. Without this, a worker the router has
 * avoided (and so never observed) would keep the optimistic priors while the workers it did use carry
 * learned costs such as Envoy's and the network's share of TTFT, and would look cheaper than it is.
 *
 * Pace (what the cost model scores with, `scoringOf`): the fleet estimate times one number per
 * worker, how much slower or faster than the fleet it is. Each TTFT or whole sample is compared with
 * what the fleet estimate predicted for the same features (before that sample updates it); `pace` is the
 * exponential of an EWMA (alpha PACE_ALPHA, starting at 0: the fleet's own pace) of the log of that
 * ratio, clipped to 4x either way per sample, and shrunk by PACE_DEADBAND towards 1 (a soft
 * threshold on the log), so the chance differences between alike workers (a few dozen noisy
 * samples each, and the different traffic their prefixes attract) read 1 exactly and leave the
 * cache affinity alone, while a worker on older hardware, a smaller tensor-parallel group or a GPU
 * shared with another job is priced as slower in every term (its floor, prefill per token, wait
 * per request and decode step). Per-worker fits (`of`) are too noisy for scoring
 * (their directions trade off against each other); one ratio is not.
 *
 * A pace forgets when its worker goes unobserved. The router steers traffic away from a slow worker,
 * so once the worker is well again (the job sharing its GPU ended, the card cooled down) it might
 * never get the samples that would show it. Silence longer than `paceForgetMs` (time since the
 * worker's last TTFT or whole sample) halves the log of its pace every further `paceForgetMs`, so an avoided
 * worker drifts back to its fleet's pace and is tried again; a worker still slow is learned slow
 * again from its next few dozen samples. A worker sampled at least once per `paceForgetMs` keeps
 * its pace unbiased (nothing decays between its samples). Times are the caller's clock, in ms.
 */
import type { Role } from '../workers/role.js';
import type { Worker } from '../workers/worker.js';

export interface TimingPriors {
  /** Fixed time to first token (network, Envoy, scheduling), ms. */
  readonly ttftFloorMs: number;
  /** Prefill cost per uncached prompt token, ms. */
  readonly prefillMsPerToken: number;
  /** Wait per request queued ahead by others (another replica, a batch job), ms. */
  readonly waitMsPerRequest: number;
  /** Time between streamed chunks (one engine step), ms. */
  readonly interChunkMs: number;
}

/** Loosely a mid-size model on one GPU: 20k prefill tokens/s, 50 decode steps/s. */
export const DEFAULT_TIMING_PRIORS: Readonly<TimingPriors> = Object.freeze({
  ttftFloorMs: 10,
  prefillMsPerToken: 0.05,
  waitMsPerRequest: 20,
  interChunkMs: 20,
});

export interface WorkerEstimates {
  /** How much slower than its role's fleet the worker's first tokens come (1 = as the fleet; see the header). */
  readonly pace: number;
  readonly ttftFloorMs: number;
  readonly prefillMsPerToken: number;
  readonly waitMsPerRequest: number;
  readonly interChunkMs: number;
  /** EWMA of observed TTFT (undefined before the first sample). */
  readonly ttftMs?: number;
  readonly ttftSamples: number;
  readonly chunkSamples: number;
  /** Non-streamed responses' durations fitted (recordWhole). */
  readonly wholeSamples: number;
}

export interface TtftFeatures {
  /** Prompt tokens computed before this request's first token: its own uncached ones and the prefills queued ahead. */
  readonly prefillTokens: number;
  readonly ahead: number;
}

/**
 * The published prefill cost per token is at least this fraction of its prior (a GPU 4x faster than
 * configured is learned down to there; set `--prior-prefill-ms-per-token` for faster hardware).
 * Why a floor: the fit cannot always tell prefill from waiting. The router's own choices make them
 * move against each other (a prompt nobody holds goes to an idle worker and is fast; a cache hit goes
 * to the busy holder and waits behind its queue), and the host's own delays land in every sample. Fed
 * such samples, the fit moved all of TTFT into its floor and its cost per token to 0, after which
 * recomputing a 4,800-token prompt looked free and the cost model spread every prefix over the fleet.
 * Measured (KV events, exact token counts, 3 runs each, load 5-6): shared-prefix hit rate 72.3%
 * (63.8-77.6) -> 84.4% (83.3-85.2), two replicas 58.1% -> 84.9%; eviction-pressure 40.1% -> 40.6%,
 * two replicas 29.8% -> 36.8%.
 */
export const MIN_PREFILL_FRACTION = 0.25;

const FORGETTING = 0.98;
const EWMA_ALPHA = 0.1;
/**
 * Weight of one TTFT sample in a worker's pace: the last ~40 samples count. Not more: with the first
 * samples weighing a fifth each (tried: the start weighing as 4 samples), a fleet with 4 of 8 workers
 * twice as slow read shared-prefix at hit rate 53-63% instead of 87% (`bench/routing-ab.ts --slow=4:2`):
 * paces read off a few samples taken under a burst's queues moved the prefixes about.
 */
export const PACE_ALPHA = 0.05;
/** Log-ratio shrunk off a worker's pace: within 1.15x of the fleet reads 1 (alike workers' noise). */
export const PACE_DEADBAND = Math.log(1.15);
const PACE_CLIP = Math.log(4);
/** Default silence after which an unobserved worker's pace starts to forget (see the header). */
export const DEFAULT_PACE_FORGET_MS = 30_000;

export interface TimingEstimatesOptions {
  /** Silence (ms since a worker's last TTFT or whole sample) after which its pace halves in log every as much again. */
  readonly paceForgetMs?: number;
}

export function resolveTimingPriors(over: Partial<TimingPriors> = {}): Readonly<TimingPriors> {
  const p: Record<keyof TimingPriors, number> = { ...DEFAULT_TIMING_PRIORS };
  for (const [k, v] of Object.entries(over) as Array<[keyof TimingPriors, number | undefined]>) {
    if (v === undefined) continue;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
      throw new RangeError(`timing prior ${k} must be a finite number >= 0, got ${String(v)}`);
    }
    p[k] = v;
  }
  return Object.freeze(p);
}

/** The published pace of a log pace: soft-thresholded by PACE_DEADBAND, to 3 decimals. */
function paceOfLog(logPace: number): number {
  const shrunk = Math.sign(logPace) * Math.max(0, Math.abs(logPace) - PACE_DEADBAND);
  return shrunk === 0 ? 1 : Math.round(Math.exp(shrunk) * 1000) / 1000;
}

/** The fit's coefficients: floor, prefill per token, wait per request, decode step. */
const N = 4;
/** Features of one observation, in the order of the coefficients: [1, U, A, M]. */
type TimingFeatures = readonly [number, number, number, number];

class State {
  /** [floor, prefill per token, wait per request, decode step]. */
  readonly theta: [number, number, number, number];
  /** EWMA of the measured inter-chunk gaps (the priors' until the first). */
  interChunk: number;
  /** N x N covariance, row-major. */
  readonly cov: number[];
  /** MIN_PREFILL_FRACTION of the prior: the published cost per token never goes below it. */
  readonly minPrefillMsPerToken: number;
  ttft: number | undefined = undefined;
  ttftSamples = 0;
  chunkSamples = 0;
  wholeSamples = 0;
  /** EWMA of log(observed / the fleet's prediction) as of `paceAtMs`; 0 for a fleet state. */
  logPace = 0;
  /** Time of the last TTFT or whole sample (the pace forgets from there). */
  paceAtMs = 0;
  /** Bumped by every publish: a worker's scored estimate is rebuilt when its fleet's moved. */
  version = 0;
  published: WorkerEstimates;
  /** The same coefficients with no sample counts: what a worker without observations reads. */
  inherited: WorkerEstimates;

  constructor(
    priors: Readonly<TimingPriors>,
    private readonly prior: readonly number[],
    from?: State,
  ) {
    this.theta = from
      ? [from.theta[0], from.theta[1], from.theta[2], from.theta[3]]
      : [priors.ttftFloorMs, priors.prefillMsPerToken, priors.waitMsPerRequest, priors.interChunkMs];
    this.cov = Array.from({ length: N * N }, (_, k) => (k % (N + 1) === 0 ? prior[k / (N + 1)]! : 0));
    this.minPrefillMsPerToken = MIN_PREFILL_FRACTION * priors.prefillMsPerToken;
    this.interChunk = from ? from.interChunk : priors.interChunkMs;
    this.published = this.inherited = this.publish();
  }

  fit(x: TimingFeatures, y: number): void {
    const P = this.cov;
    const th = this.theta;
    const lower = [0, this.minPrefillMsPerToken, 0, 0];
    const observed = Math.min(y, 2 * Math.max(0, dot(th, x)) + 200);
    // Constrained to the bounds the estimates are published with, so the fit predicts what it
    // publishes. An update that would take a coefficient below its bound holds it there and is made
    // by the others alone, and that coefficient's covariance with them is dropped. Left free (or
    // only clipped afterwards), a negative cost per token read off a faster worker's samples at
    // slightly longer prompts was made up by a large floor: the published pair, the bound and that
    // floor, predicted many times what was seen, and clipping each update fed the error back.
    const free = [true, true, true, true];
    let Px = [0, 0, 0, 0];
    let denom = FORGETTING;
    for (let pass = 0; pass < N; pass++) {
      const xf = x.map((v, j) => (free[j] ? v : 0));
      Px = xf.map((_, i) => dot(P.slice(i * N, i * N + N), xf));
      denom = FORGETTING + dot(xf, Px);
      const err = observed - dot(th, x);
      let held = false;
      for (let i = 0; i < N; i++) {
        if (free[i] && th[i]! + (Px[i]! / denom) * err < lower[i]!) {
          free[i] = false;
          th[i] = lower[i]!;
          held = true;
        }
      }
      if (held) continue;
      for (let i = 0; i < N; i++) if (free[i]) th[i] = th[i]! + (Px[i]! / denom) * err;
      break;
    }
    // P = (P - Px Px^T / denom) / lambda over the free coefficients (P symmetric, so x^T P = Px^T);
    // a held one keeps its variance and loses its covariances.
    for (let i = 0; i < N; i++) {
      for (let j = 0; j < N; j++) {
        if (free[i] && free[j]) P[i * N + j] = (P[i * N + j]! - (Px[i]! * Px[j]!) / denom) / FORGETTING;
        else if (i !== j) P[i * N + j] = 0;
      }
    }
    // No wind-up: scale row and column i so that P_ii never exceeds the prior variance.
    for (let i = 0; i < N; i++) {
      const pii = P[i * N + i]!;
      const cap = this.prior[i]!;
      if (pii > cap && pii > 0) {
        const s = Math.sqrt(cap / pii);
        for (let j = 0; j < N; j++) {
          P[i * N + j] = P[i * N + j]! * s;
          P[j * N + i] = P[j * N + i]! * s;
        }
      }
    }
  }

  /** The fleet's prediction for features x (this state's fitted coefficients, as published). */
  predict(x: TimingFeatures): number {
    return dot(this.theta, x);
  }

  get pace(): number {
    return paceOfLog(this.logPace);
  }

  /** The log pace at `nowMs`: `logPace` after forgetting over the silence since `paceAtMs`. */
  logPaceAt(nowMs: number, forgetMs: number): number {
    return this.logPace === 0 ? 0 : this.logPace * this.kept(nowMs, forgetMs);
  }

  /** One pace sample (log ratio r) at `nowMs`: what was forgotten first, then the weighted update. */
  addPaceSample(r: number, nowMs: number, forgetMs: number): void {
    this.logPace *= this.kept(nowMs, forgetMs);
    this.logPace += PACE_ALPHA * (r - this.logPace);
  }

  /** The share of the pace kept over the silence since `paceAtMs` (1 within `forgetMs`). */
  private kept(nowMs: number, forgetMs: number): number {
    const silence = nowMs - this.paceAtMs;
    return silence > forgetMs ? 2 ** (-(silence - forgetMs) / forgetMs) : 1;
  }

  publish(): WorkerEstimates {
    const [f, p, q, step] = this.theta;
    this.version += 1;
    this.published = Object.freeze({
      pace: this.pace,
      // Within their bounds already (fit holds them there).
      ttftFloorMs: f,
      prefillMsPerToken: p,
      waitMsPerRequest: q,
      // The measured gaps once there are any; a pool that never streams has its fitted step.
      interChunkMs: this.chunkSamples === 0 && this.wholeSamples > 0 ? step : this.interChunk,
      ...(this.ttft === undefined ? {} : { ttftMs: this.ttft }),
      ttftSamples: this.ttftSamples,
      chunkSamples: this.chunkSamples,
      wholeSamples: this.wholeSamples,
    });
    this.inherited = Object.freeze({
      pace: 1,
      ttftFloorMs: this.published.ttftFloorMs,
      prefillMsPerToken: this.published.prefillMsPerToken,
      waitMsPerRequest: this.published.waitMsPerRequest,
      interChunkMs: this.published.interChunkMs,
      ttftSamples: 0,
      chunkSamples: 0,
      wholeSamples: 0,
    });
    return this.published;
  }
}

export class TimingEstimates {
  readonly priors: Readonly<TimingPriors>;
  private readonly states = new WeakMap<Worker, State>();
  private readonly fleets = new Map<Role, State>();
  private readonly scored = new WeakMap<Worker, { fleetVersion: number; est: WorkerEstimates }>();
  private readonly priorVariance: number[];
  private readonly paceForgetMs: number;

  constructor(priors: Partial<TimingPriors> = {}, opts: TimingEstimatesOptions = {}) {
    this.priors = resolveTimingPriors(priors);
    const forget = opts.paceForgetMs ?? DEFAULT_PACE_FORGET_MS;
    if (!(forget > 0)) throw new RangeError(`paceForgetMs must be > 0, got ${String(forget)}`);
    this.paceForgetMs = forget;
    const variance = (v: number, min: number): number => Math.max(v, min) ** 2;
    // Standard deviation = the prior itself (a small minimum keeps a zero prior learnable).
    this.priorVariance = [
      variance(this.priors.ttftFloorMs, 1),
      variance(this.priors.prefillMsPerToken, 0.001),
      variance(this.priors.waitMsPerRequest, 1),
      variance(this.priors.interChunkMs, 1),
    ];
  }

  /** Current estimates (its role's fleet estimate for a worker with no samples). O(1), allocation-free. */
  of(worker: Worker): WorkerEstimates {
    return this.states.get(worker)?.published ?? this.fleet(worker.role).inherited;
  }

  /** The estimate over all of a role's workers (the priors before any observation). */
  fleetOf(role: Role): WorkerEstimates {
    return this.fleet(role).published;
  }

  /** The worker's pace at `nowMs` (1 before its first sample; forgotten over silence: the header). */
  paceOf(worker: Worker, nowMs: number): number {
    const own = this.states.get(worker);
    return own === undefined ? 1 : paceOfLog(own.logPaceAt(nowMs, this.paceForgetMs));
  }

  /**
   * What the cost model scores `worker` with at `nowMs`: its role's fleet estimate, every time scaled
   * by the worker's pace (the header). The fleet's own object while the pace reads 1; else a copy
   * rebuilt only when the fleet or the pace moved.
   */
  scoringOf(worker: Worker, nowMs: number): WorkerEstimates {
    const fleet = this.fleet(worker.role);
    const own = this.states.get(worker);
    if (own === undefined) return fleet.published;
    const pace = paceOfLog(own.logPaceAt(nowMs, this.paceForgetMs));
    if (pace === 1) return fleet.published;
    const cached = this.scored.get(worker);
    if (cached !== undefined && cached.fleetVersion === fleet.version && cached.est.pace === pace) {
      return cached.est;
    }
    const f = fleet.published;
    const est: WorkerEstimates = Object.freeze({
      pace,
      ttftFloorMs: f.ttftFloorMs * pace,
      prefillMsPerToken: f.prefillMsPerToken * pace,
      waitMsPerRequest: f.waitMsPerRequest * pace,
      interChunkMs: f.interChunkMs * pace,
      ttftSamples: own.ttftSamples,
      chunkSamples: own.chunkSamples,
      wholeSamples: own.wholeSamples,
    });
    this.scored.set(worker, { fleetVersion: fleet.version, est });
    return est;
  }

  /** Predicted TTFT of a request with these features on `worker`, ms. */
  predictTtftMs(worker: Worker, f: TtftFeatures): number {
    const e = this.of(worker);
    return e.ttftFloorMs + e.prefillMsPerToken * f.prefillTokens + e.waitMsPerRequest * f.ahead;
  }

  /** One TTFT sample taken at `nowMs`. */
  recordTtft(worker: Worker, ttftMs: number, f: TtftFeatures, nowMs: number): void {
    if (!Number.isFinite(ttftMs) || ttftMs < 0) return;
    if (!Number.isFinite(f.prefillTokens) || !Number.isFinite(f.ahead)) return;
    for (const s of this.observe(worker, features(f, 0), ttftMs, nowMs)) {
      s.ttft = s.ttft === undefined ? ttftMs : s.ttft + EWMA_ALPHA * (ttftMs - s.ttft);
      s.ttftSamples += 1;
      s.publish();
    }
  }

  /**
   * One non-streamed response, taken at `nowMs`: `durationMs` from the routing decision to its body,
   * for a prompt with features `f` and `decodeSteps` tokens generated after the first (its
   * `usage.completion_tokens` - 1, one sequence).
   */
  recordWhole(worker: Worker, durationMs: number, f: TtftFeatures, decodeSteps: number, nowMs: number): void {
    if (!Number.isFinite(durationMs) || durationMs < 0) return;
    if (!Number.isFinite(f.prefillTokens) || !Number.isFinite(f.ahead) || !Number.isFinite(decodeSteps))
      return;
    for (const s of this.observe(worker, features(f, decodeSteps), durationMs, nowMs)) {
      s.wholeSamples += 1;
      s.publish();
    }
  }

  /** The pace sample and the fit of one observation; the worker's and its fleet's states, to publish. */
  private observe(worker: Worker, x: TimingFeatures, y: number, nowMs: number): readonly State[] {
    const own = this.state(worker);
    const fleet = this.fleet(worker.role);
    // The pace: this sample against the fleet's prediction, before the sample moves the fleet.
    const predicted = fleet.predict(x);
    if (predicted > 0) {
      const r = Math.max(-PACE_CLIP, Math.min(PACE_CLIP, Math.log(Math.max(y, 1e-3) / predicted)));
      own.addPaceSample(r, nowMs, this.paceForgetMs);
    }
    if (nowMs > own.paceAtMs) own.paceAtMs = nowMs;
    own.fit(x, y);
    fleet.fit(x, y);
    return [own, fleet];
  }

  /** One streamed response's mean gap between chunks: moves the decode step by its EWMA. */
  recordInterChunk(worker: Worker, gapMs: number): void {
    if (!Number.isFinite(gapMs) || gapMs < 0) return;
    for (const s of [this.state(worker), this.fleet(worker.role)]) {
      s.interChunk += EWMA_ALPHA * (gapMs - s.interChunk);
      s.chunkSamples += 1;
      s.publish();
    }
  }

  forget(worker: Worker): void {
    this.states.delete(worker);
    this.scored.delete(worker);
  }

  private state(worker: Worker): State {
    let s = this.states.get(worker);
    if (s === undefined) {
      s = new State(this.priors, this.priorVariance, this.fleet(worker.role));
      s.ttftSamples = 0;
      this.states.set(worker, s);
    }
    return s;
  }

  private fleet(role: Role): State {
    let s = this.fleets.get(role);
    if (s === undefined) {
      s = new State(this.priors, this.priorVariance);
      this.fleets.set(role, s);
    }
    return s;
  }
}

function features(f: TtftFeatures, decodeSteps: number): TimingFeatures {
  return [1, Math.max(0, f.prefillTokens), Math.max(0, f.ahead), Math.max(0, decodeSteps)];
}

function dot(a: readonly number[], b: readonly number[]): number {
  let sum = 0;
  for (let i = 0; i < N; i++) sum += a[i]! * b[i]!;
  return sum;
}
