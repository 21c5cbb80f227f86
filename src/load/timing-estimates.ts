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
 *
 * Estimates:
 * - `interChunkMs`: EWMA (alpha 0.1 per response) of the inter-chunk time: the engine's step time under
 *   its current batch.
 * - TTFT model `ttft = floorMs + prefillMsPerToken * U + waitMsPerRequest * A`, fitted by exponentially
 *   weighted recursive least squares (the three-coefficient generalisation of an EWMA: forgetting factor
 *   0.98, i.e. about the last 50 responses). The priors are the starting coefficients AND a Gaussian prior
 *   around them (standard deviation = the prior value), so a worker with few or uninformative samples
 *   (every prompt the same size, never any queue) keeps its priors in the directions the data cannot
 *   see. The covariance is capped at the prior's (no wind-up while a direction is unexcited), and an
 *   observation is clipped to 2 x the current prediction + 200 ms, so one stalled response cannot wreck
 *   the fit (a worker truly that much slower is learned over a few responses instead of one).
 * - Published coefficients are clamped at 0, the cost per token at MIN_PREFILL_FRACTION of its prior.
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
  readonly ttftFloorMs: number;
  readonly prefillMsPerToken: number;
  readonly waitMsPerRequest: number;
  readonly interChunkMs: number;
  /** EWMA of observed TTFT (undefined before the first sample). */
  readonly ttftMs?: number;
  readonly ttftSamples: number;
  readonly chunkSamples: number;
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

class State {
  /** [floor, prefill per token, wait per request]. */
  readonly theta: [number, number, number];
  /** 3x3 covariance, row-major. */
  readonly cov: number[];
  interChunk: number;
  /** MIN_PREFILL_FRACTION of the prior: the published cost per token never goes below it. */
  readonly minPrefillMsPerToken: number;
  ttft: number | undefined = undefined;
  ttftSamples = 0;
  chunkSamples = 0;
  published: WorkerEstimates;
  /** The same coefficients with no sample counts: what a worker without observations reads. */
  inherited: WorkerEstimates;

  constructor(
    priors: Readonly<TimingPriors>,
    private readonly prior: readonly number[],
    from?: State,
  ) {
    this.theta = from
      ? [from.theta[0], from.theta[1], from.theta[2]]
      : [priors.ttftFloorMs, priors.prefillMsPerToken, priors.waitMsPerRequest];
    this.cov = [prior[0]!, 0, 0, 0, prior[1]!, 0, 0, 0, prior[2]!];
    this.minPrefillMsPerToken = MIN_PREFILL_FRACTION * priors.prefillMsPerToken;
    this.interChunk = from ? from.interChunk : priors.interChunkMs;
    this.published = this.inherited = this.publish();
  }

  fit(x: readonly [number, number, number], y: number): void {
    const P = this.cov;
    const th = this.theta;
    const Px = [
      P[0]! * x[0] + P[1]! * x[1] + P[2]! * x[2],
      P[3]! * x[0] + P[4]! * x[1] + P[5]! * x[2],
      P[6]! * x[0] + P[7]! * x[1] + P[8]! * x[2],
    ];
    const denom = FORGETTING + x[0] * Px[0]! + x[1] * Px[1]! + x[2] * Px[2]!;
    const predicted = th[0] * x[0] + th[1] * x[1] + th[2] * x[2];
    const observed = Math.min(y, 2 * Math.max(0, predicted) + 200);
    const err = observed - predicted;
    for (let i = 0; i < 3; i++) th[i] = th[i]! + (Px[i]! / denom) * err;
    // P = (P - Px Px^T / denom) / lambda  (P symmetric, so x^T P = Px^T)
    for (let i = 0; i < 3; i++) {
      for (let j = 0; j < 3; j++) P[i * 3 + j] = (P[i * 3 + j]! - (Px[i]! * Px[j]!) / denom) / FORGETTING;
    }
    // No wind-up: scale row and column i so that P_ii never exceeds the prior variance.
    for (let i = 0; i < 3; i++) {
      const pii = P[i * 3 + i]!;
      const cap = this.prior[i]!;
      if (pii > cap && pii > 0) {
        const s = Math.sqrt(cap / pii);
        for (let j = 0; j < 3; j++) {
          P[i * 3 + j] = P[i * 3 + j]! * s;
          P[j * 3 + i] = P[j * 3 + i]! * s;
        }
      }
    }
  }

  publish(): WorkerEstimates {
    const [f, p, q] = this.theta;
    this.published = Object.freeze({
      ttftFloorMs: Math.max(0, f),
      prefillMsPerToken: Math.max(this.minPrefillMsPerToken, p),
      waitMsPerRequest: Math.max(0, q),
      interChunkMs: this.interChunk,
      ...(this.ttft === undefined ? {} : { ttftMs: this.ttft }),
      ttftSamples: this.ttftSamples,
      chunkSamples: this.chunkSamples,
    });
    this.inherited = Object.freeze({
      ttftFloorMs: this.published.ttftFloorMs,
      prefillMsPerToken: this.published.prefillMsPerToken,
      waitMsPerRequest: this.published.waitMsPerRequest,
      interChunkMs: this.published.interChunkMs,
      ttftSamples: 0,
      chunkSamples: 0,
    });
    return this.published;
  }
}

export class TimingEstimates {
  readonly priors: Readonly<TimingPriors>;
  private readonly states = new WeakMap<Worker, State>();
  private readonly fleets = new Map<Role, State>();
  private readonly priorVariance: number[];

  constructor(priors: Partial<TimingPriors> = {}) {
    this.priors = resolveTimingPriors(priors);
    const variance = (v: number, min: number): number => Math.max(v, min) ** 2;
    // Standard deviation = the prior itself (a small minimum keeps a zero prior learnable).
    this.priorVariance = [
      variance(this.priors.ttftFloorMs, 1),
      variance(this.priors.prefillMsPerToken, 0.001),
      variance(this.priors.waitMsPerRequest, 1),
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

  /** Predicted TTFT of a request with these features on `worker`, ms. */
  predictTtftMs(worker: Worker, f: TtftFeatures): number {
    const e = this.of(worker);
    return e.ttftFloorMs + e.prefillMsPerToken * f.prefillTokens + e.waitMsPerRequest * f.ahead;
  }

  recordTtft(worker: Worker, ttftMs: number, f: TtftFeatures): void {
    if (!Number.isFinite(ttftMs) || ttftMs < 0) return;
    if (!Number.isFinite(f.prefillTokens) || !Number.isFinite(f.ahead)) return;
    const x: [number, number, number] = [1, Math.max(0, f.prefillTokens), Math.max(0, f.ahead)];
    for (const s of [this.state(worker), this.fleet(worker.role)]) {
      s.fit(x, ttftMs);
      s.ttft = s.ttft === undefined ? ttftMs : s.ttft + EWMA_ALPHA * (ttftMs - s.ttft);
      s.ttftSamples += 1;
      s.publish();
    }
  }

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
