/**
 * Per-worker gauges of the load signals and timing estimates, read at scrape time (`collect`) like
 * the other per-worker gauges (metrics.ts): the request path never touches them and a removed
 * worker's series disappears.
 *
 *   vllm_router_worker_scraped_waiting / _running / _kv_usage   latest scraped sample (absent when none)
 *   vllm_router_worker_sample_age_seconds                       its age
 *   vllm_router_worker_predicted_ahead                          requests ahead as routing sees them
 *                                                               (blended scrape + local, or in-flight)
 *   vllm_router_worker_foreign_share                            share of its load this router did not send
 *                                                               (another replica, a direct client)
 *   vllm_router_worker_ttft_seconds                             EWMA of observed time to first token
 *   vllm_router_worker_estimate{estimate=...}                   cost-model coefficients: ttft_floor_seconds,
 *                                                               prefill_seconds_per_token,
 *                                                               wait_seconds_per_request, inter_chunk_seconds,
 *                                                               pace (ratio to its role's fleet, unitless:
 *                                                               what the cost model scales the fleet's by)
 *   vllm_router_chars_per_token{model}                          characters per prompt token learned from the
 *                                                               workers' usage (load/chars-per-token.ts)
 */
import { Gauge, type Registry } from 'prom-client';
import type { CharsPerToken } from '../load/chars-per-token.js';
import type { LoadBoard } from '../load/load-board.js';
import type { TimingEstimates } from '../load/timing-estimates.js';
import { selectionLoad, type Worker } from '../workers/worker.js';

export interface LoadMetricsOptions {
  readonly registry: Registry;
  readonly workers: () => Iterable<Worker>;
  readonly board: LoadBoard;
  readonly timing: TimingEstimates;
  readonly clock: () => number;
  /** The learned characters per token, when learning is on. */
  readonly charsPerToken?: CharsPerToken;
}

export function registerLoadMetrics(o: LoadMetricsOptions): void {
  const registers = [o.registry];
  const labelNames = ['role', 'worker', 'generation'] as const;
  const sampled = (name: string, help: string, pick: (w: Worker) => number | undefined): void => {
    new Gauge({
      name,
      help,
      labelNames,
      registers,
      collect() {
        this.reset();
        for (const w of o.workers()) {
          const v = pick(w);
          if (v !== undefined) this.set(labels(w), v);
        }
      },
    });
  };
  const figures = (w: Worker) => o.board.latest(w.key)?.figures;
  sampled(
    'vllm_router_worker_scraped_waiting',
    'Waiting requests in the latest /metrics sample.',
    (w) => figures(w)?.waiting,
  );
  sampled(
    'vllm_router_worker_scraped_running',
    'Running requests in the latest /metrics sample.',
    (w) => figures(w)?.running,
  );
  sampled(
    'vllm_router_worker_scraped_kv_usage',
    'KV-cache usage (0..1) in the latest /metrics sample.',
    (w) => figures(w)?.kvUsage,
  );
  sampled('vllm_router_worker_sample_age_seconds', 'Age of the latest /metrics sample.', (w) => {
    const s = o.board.latest(w.key);
    return s === undefined ? undefined : Math.max(0, o.clock() - s.takenAtMs) / 1000;
  });
  sampled(
    'vllm_router_worker_predicted_ahead',
    'Requests queued or running ahead of a new one as routing sees them (fresh scrape + local, else in-flight; with the P/D decodes chosen for the worker whose prefill leg still runs).',
    (w) => o.board.view(w.key, selectionLoad(w), o.clock()).ahead,
  );
  sampled(
    'vllm_router_worker_foreign_share',
    "Moving average of the share of the worker's scraped load (waiting + running) that this router did not send: another replica, a direct client (0..1).",
    (w) => o.board.foreignShare(w.key),
  );
  sampled(
    'vllm_router_worker_ttft_seconds',
    'EWMA of observed time to first token (streamed responses).',
    (w) => {
      const t = o.timing.of(w).ttftMs;
      return t === undefined ? undefined : t / 1000;
    },
  );
  /** A gauge with several series per worker, one per value of `label`. */
  const perWorker = (
    name: string,
    help: string,
    label: string,
    values: (w: Worker) => ReadonlyArray<readonly [string, number]>,
  ): void => {
    new Gauge({
      name,
      help,
      labelNames: [...labelNames, label],
      registers,
      collect() {
        this.reset();
        for (const w of o.workers()) {
          const l = labels(w);
          for (const [k, v] of values(w)) this.set({ ...l, [label]: k }, v);
        }
      },
    });
  };
  perWorker(
    'vllm_router_worker_estimate',
    "Learned cost-model coefficients per worker (seconds; prefill per uncached token, wait per request ahead; pace: how much slower than its role's fleet its first tokens come, unitless).",
    'estimate',
    (w) => {
      const e = o.timing.of(w);
      return [
        ['ttft_floor_seconds', e.ttftFloorMs / 1000],
        ['prefill_seconds_per_token', e.prefillMsPerToken / 1000],
        ['wait_seconds_per_request', e.waitMsPerRequest / 1000],
        ['inter_chunk_seconds', e.interChunkMs / 1000],
        ['pace', o.timing.paceOf(w, o.clock())],
      ];
    },
  );
  perWorker(
    'vllm_router_worker_timing_samples',
    "Responses the worker's timing estimates learned from (this registration generation), by kind: ttft (a streamed response's first token), inter_chunk (a streamed response's chunk gaps), whole (a non-streamed response's duration with its generated tokens).",
    'kind',
    (w) => {
      const e = o.timing.of(w);
      return [
        ['ttft', e.ttftSamples],
        ['inter_chunk', e.chunkSamples],
        ['whole', e.wholeSamples],
      ];
    },
  );
  const ratios = o.charsPerToken;
  if (ratios !== undefined) {
    new Gauge({
      name: 'vllm_router_chars_per_token',
      help: "Characters of routing text per prompt token, learned per model from the workers' usage.prompt_tokens (the --chars-per-token prior until 4 samples).",
      labelNames: ['model'] as const,
      registers,
      collect() {
        this.reset();
        for (const v of ratios.view()) this.set({ model: v.model }, v.charsPerToken);
      },
    });
  }
}

/** What /workers shows about a worker's load signals and estimates. */
export function loadView(
  w: Worker,
  board: LoadBoard,
  timing: TimingEstimates,
  now: number,
): {
  loadSample: Record<string, unknown> | null;
  routingLoad: Record<string, unknown>;
  estimates: Record<string, unknown>;
} {
  const s = board.latest(w.key);
  const e = timing.of(w);
  return {
    loadSample:
      s === undefined
        ? null
        : { ...s.figures, ageMs: Math.max(0, Math.round(now - s.takenAtMs)), localAtSample: s.localAtSample },
    routingLoad: { ...board.view(w.key, selectionLoad(w), now), foreignShare: board.foreignShare(w.key) },
    estimates: { ...e, pace: timing.paceOf(w, now) },
  };
}

function labels(w: Worker): { role: string; worker: string; generation: string } {
  return { role: w.role, worker: w.key, generation: String(w.generation) };
}
