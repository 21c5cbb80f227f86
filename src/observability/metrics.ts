/**
 * All Prometheus metrics of the router, on an injected prom-client Registry (no global registry,
 * so tests and several routers in one process never collide).
 *
 * Per-worker gauges (load, processed, health) are read from the live pools at scrape time
 * (`collect`), so the request path never touches them and a removed worker's series disappears.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Worker } from '../workers/worker.js';
import type { Role } from '../workers/role.js';
import type { CacheReportCounts } from '../routing/cache-report.js';
import type { ServedModels } from '../workers/served-models.js';

/** The most served-model series exported per worker (a worker may list thousands of adapters). */
const MAX_MODEL_SERIES_PER_WORKER = 256;

export interface MetricsOptions {
  /** Live workers of every pool, read at scrape time. */
  workers: () => Iterable<Worker>;
  /** Per-worker cache tree size in characters (cache_aware pools), read at scrape time. */
  treeChars?: () => Iterable<[Worker, number]>;
  /** cache_aware's checks of its tree against the workers' usage reports, per role (routing/cache-report.ts). */
  cacheReports?: () => Iterable<[Role, CacheReportCounts]>;
  /** Circuit-breaker state per worker for vllm_router_cb_state (0 closed, 1 open, 2 half-open). */
  breakerState?: (worker: Worker) => number;
  /** Mooncake: 1 when the prefill worker's bootstrap server answered, 0 when not, undefined = n/a. */
  bootstrapReady?: (worker: Worker) => number | undefined;
  /** What each worker serves (workers/served-models.ts), for vllm_router_worker_served_model. */
  servedModels?: (worker: Worker) => ServedModels | undefined;
  /**
   * Whether every selectable worker of a pool is saturated (load/saturation.ts), for
   * vllm_router_pool_saturated; read at scrape time. Absent: not exported (scraping off).
   */
  poolSaturated?: () => Iterable<[Role, boolean]>;
  /** --flow-control: the requests held now (routing/flow-control.ts). */
  flowHeld?: () => number;
  /** The request objectives the router knows and their priorities (routing/objectives.ts). */
  objectives?: () => Iterable<[string, number]>;
  /** Collect Node process metrics (CPU, heap, event loop lag). */
  processMetrics?: boolean;
}

/**
 * Whether a prefix-aware decision followed prefix affinity, for vllm_router_cache_hits_total (else
 * vllm_router_cache_misses_total): cache_aware's `cache_hit`, kv_aware's `exact_hit` (kv_aware without
 * exact data decides as cache_aware, with its branches).
 */
export function isCacheHit(branch: string): boolean {
  return branch === 'cache_hit' || branch === 'exact_hit';
}

/**
 * How long a departed worker's own series (request-path counters, KV-event series) stay on /metrics:
 * several scrape intervals, so the last counts of a worker that died (its failovers) are scraped.
 */
export const DEPARTED_SERIES_MS = 10 * 60_000;

export class RouterMetrics {
  readonly registry = new Registry();

  readonly requests: Counter<'route' | 'outcome'>;
  readonly requestDuration: Histogram<'route' | 'outcome'>;
  readonly streamsActive: Gauge;
  readonly grpcConnectionCloses: Counter<'reason'>;
  readonly decisions: Counter<'policy' | 'role' | 'branch'>;
  readonly cacheHits: Counter<'role'>;
  readonly cacheMisses: Counter<'role'>;
  readonly matchRate: Histogram<'role'>;
  readonly discoveryEvents: Counter<'role' | 'event'>;
  readonly discoveryRejected: Counter<'reason'>;
  readonly kubeWatchErrors: Counter<'resource' | 'phase' | 'reason'>;
  readonly poolChanges: Counter<'role' | 'change'>;
  readonly contextFits: Counter<'role' | 'outcome'>;
  readonly mediaParts: Counter<'size'>;
  readonly mediaTokens: Counter;
  readonly loraReplays: Counter<'outcome'>;
  readonly fleetControlCalls: Counter<'path' | 'outcome'>;
  readonly failovers: Counter<'worker' | 'adopted'>;
  readonly shed: Counter<'objective' | 'role'>;
  readonly flowRefused: Counter<'reason' | 'objective'>;
  readonly flowWait: Histogram;
  readonly pdPrefillRequests: Counter<'worker'>;
  readonly pdDecodeRequests: Counter<'worker'>;
  readonly pdLocalPrefills: Counter;
  readonly pdErrors: Counter<'error_type'>;
  readonly pdPrefillDuration: Histogram<'outcome'>;
  readonly pdBootstrapQueries: Counter<'outcome'>;
  readonly modelsPolls: Counter<'outcome'>;

  constructor(opts: MetricsOptions) {
    const registers = [this.registry];
    if (opts.processMetrics) collectDefaultMetrics({ register: this.registry, prefix: 'vllm_router_' });

    const workers = opts.workers;
    new Gauge({
      name: 'vllm_router_worker_load',
      help: 'Sequences of the in-flight requests holding a load guard on the worker (per role): one per request, n per parallel-sampling request (n x prompts for a batched completions prompt), as vLLM counts running + waiting. A sequential P/D decode counts from the end of its prefill leg (before, only in selection: vllm_router_worker_predicted_ahead).',
      labelNames: ['role', 'worker', 'generation'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.set(labels(w), w.load);
      },
    });
    new Counter({
      name: 'vllm_router_processed_requests_total',
      help: 'Requests completed on the worker (any outcome), for its current generation.',
      labelNames: ['role', 'worker', 'generation'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of workers()) this.inc(labels(w), w.processed);
      },
    });
    // Per-worker 0/1 states: whether it is selectable, two reasons it may not be, and a pause.
    const flags: Array<[string, string, (w: Worker) => boolean]> = [
      [
        'vllm_router_worker_health',
        '1 if the worker is selectable (healthy, breaker not open, awake, not cordoned), else 0.',
        (w) => w.healthy,
      ],
      [
        'vllm_router_worker_asleep',
        "1 while the worker's scraped metrics say vLLM's sleep mode has it asleep (no requests), else 0.",
        (w) => w.asleep,
      ],
      [
        'vllm_router_worker_cordoned',
        '1 while the admin API holds the worker out of selection (POST /workers/cordon or /workers/sleep), else 0.',
        (w) => w.cordoned,
      ],
      [
        'vllm_router_worker_paused',
        "1 while vLLM's generation is paused on the worker (a POST /pause sent through the router, or its own GET /is_paused; selectable, not preferred), else 0.",
        (w) => w.paused,
      ],
    ];
    for (const [name, help, flag] of flags) {
      new Gauge({
        name,
        help,
        labelNames: ['role', 'worker', 'generation'] as const,
        registers,
        collect() {
          this.reset();
          for (const w of workers()) this.set(labels(w), flag(w) ? 1 : 0);
        },
      });
    }
    const breakerState = opts.breakerState;
    if (breakerState) {
      new Gauge({
        name: 'vllm_router_cb_state',
        help: 'Worker circuit breaker: 0 closed, 1 open, 2 half-open.',
        labelNames: ['role', 'worker', 'generation'] as const,
        registers,
        collect() {
          this.reset();
          for (const w of workers()) this.set(labels(w), breakerState(w));
        },
      });
    }
    new Gauge({
      name: 'vllm_router_pool_workers',
      help: 'Workers in each role pool.',
      labelNames: ['role'] as const,
      registers,
      collect() {
        this.reset();
        const counts: Record<string, number> = { prefill: 0, decode: 0, regular: 0 };
        for (const w of workers()) counts[w.role] = (counts[w.role] ?? 0) + 1;
        for (const [role, n] of Object.entries(counts)) this.set({ role }, n);
      },
    });
    const treeChars = opts.treeChars;
    if (treeChars) {
      new Gauge({
        name: 'vllm_router_tree_size',
        help: 'Characters of prompt text the cache-aware tree holds for the worker.',
        labelNames: ['role', 'worker', 'generation'] as const,
        registers,
        collect() {
          this.reset();
          for (const [w, n] of treeChars()) this.set(labels(w), n);
        },
      });
    }

    const cacheReports = opts.cacheReports;
    if (cacheReports) {
      new Counter({
        name: 'vllm_router_cache_reports_total',
        help:
          "Watched responses whose usage.prompt_tokens_details.cached_tokens checked the cache-aware tree's " +
          'belief that the worker held part of the prompt: outcome="held" (it did), "stale" (the worker ' +
          'had lost it; the tree dropped that prefix and what it sent the worker before).',
        labelNames: ['role', 'outcome'] as const,
        registers,
        collect() {
          this.reset();
          for (const [role, c] of cacheReports()) {
            this.inc({ role, outcome: 'held' }, c.checked - c.stale);
            this.inc({ role, outcome: 'stale' }, c.stale);
          }
        },
      });
      new Counter({
        name: 'vllm_router_cache_report_dropped_chars_total',
        help: "Characters of the cache-aware tree's picture of the workers dropped on stale cache reports.",
        labelNames: ['role'] as const,
        registers,
        collect() {
          this.reset();
          for (const [role, c] of cacheReports()) this.inc({ role }, c.droppedChars);
        },
      });
    }

    this.requests = new Counter({
      name: 'vllm_router_requests_total',
      help: 'Requests seen by the ext_proc service, by route and outcome.',
      labelNames: ['route', 'outcome'] as const,
      registers,
    });
    this.requestDuration = new Histogram({
      name: 'vllm_router_request_duration_seconds',
      help: 'Time from request headers to the end of the response, as seen by the ext_proc stream.',
      labelNames: ['route', 'outcome'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300],
      registers,
    });
    this.streamsActive = new Gauge({
      name: 'vllm_router_extproc_streams_active',
      help: 'Open ext_proc gRPC streams.',
      registers,
    });
    this.grpcConnectionCloses = new Counter({
      name: 'vllm_router_grpc_connection_closes_total',
      help:
        'gRPC (HTTP/2) connections closed for client stream resets: reason="rotation" moved the client ' +
        'to a fresh connection losslessly, ahead of the HTTP/2 rapid-reset limit; reason="reset_limit": ' +
        "a client reached that limit anyway (Node's HTTP/2 may have failed streams in flight).",
      labelNames: ['reason'] as const,
      registers,
    });
    this.decisions = new Counter({
      name: 'vllm_router_policy_decisions_total',
      help: 'Routing decisions by policy, role and branch (cache_hit, low_match, imbalance, ...).',
      labelNames: ['policy', 'role', 'branch'] as const,
      registers,
    });
    this.cacheHits = new Counter({
      name: 'vllm_router_cache_hits_total',
      help: 'cache_aware and kv_aware decisions that followed prefix affinity (branch cache_hit, exact_hit).',
      labelNames: ['role'] as const,
      registers,
    });
    this.cacheMisses = new Counter({
      name: 'vllm_router_cache_misses_total',
      help: 'cache_aware and kv_aware decisions that did not (low match, imbalance: an overload escape).',
      labelNames: ['role'] as const,
      registers,
    });
    this.matchRate = new Histogram({
      name: 'vllm_router_cache_match_rate',
      help: 'Matched prefix characters / prompt characters at cache_aware selection.',
      labelNames: ['role'] as const,
      buckets: [0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1],
      registers,
    });
    this.discoveryEvents = new Counter({
      name: 'vllm_router_discovery_updates_total',
      help: 'Registry events: registered, heartbeat, replaced (same url, new generation), restarted (same registration, a later process start time on its metrics: a new generation), expired, deregistered.',
      labelNames: ['role', 'event'] as const,
      registers,
    });
    this.discoveryRejected = new Counter({
      name: 'vllm_router_discovery_rejected_total',
      help: 'Registration messages dropped, by reason.',
      labelNames: ['reason'] as const,
      registers,
    });
    this.kubeWatchErrors = new Counter({
      name: 'vllm_router_kube_watch_errors_total',
      help: 'Failed Kubernetes LISTs and WATCHes (each is retried with backoff; until one succeeds the workers are what the last successful list and watch said), by resource (pods, inferencepools, inferenceobjectives), phase (list, watch) and reason: unauthorized (401), forbidden (403: RBAC), not_found (404: CRD or version not served), gone (410: relisted), too_many_requests, client_error, server_error, unreachable (no answer).',
      labelNames: ['resource', 'phase', 'reason'] as const,
      registers,
    });
    this.poolChanges = new Counter({
      name: 'vllm_router_pool_changes_total',
      help: 'Persistent pool membership changes: added, departed, replaced.',
      labelNames: ['role', 'change'] as const,
      registers,
    });
    this.loraReplays = new Counter({
      name: 'vllm_router_lora_replays_total',
      help: 'LoRA adapters loaded through the router (POST /v1/load_lora_adapter) and then loaded again on a worker that joined or restarted: loaded, or failed (see the log).',
      labelNames: ['outcome'] as const,
      registers,
    });
    this.fleetControlCalls = new Counter({
      name: 'vllm_router_fleet_control_calls_total',
      help: 'vLLM engine control calls sent through Envoy and answered by the router for the fleet (--fleet-control: POST /pause, /resume, /reset_prefix_cache, /sleep, /wake_up, ...), by path and outcome: ok (every worker took it), partial, failed.',
      labelNames: ['path', 'outcome'] as const,
      registers,
    });
    this.contextFits = new Counter({
      name: 'vllm_router_context_fits_total',
      help: "Requests estimated longer than some candidate workers' max_model_len: kept to the workers long enough (outcome fitted), or none was and every candidate stayed (none_long_enough: the worker's own 400 says by how much).",
      labelNames: ['role', 'outcome'] as const,
      registers,
    });
    this.mediaParts = new Counter({
      name: 'vllm_router_media_parts_total',
      help: 'Media parts (images, audio, video, files) of the inference requests parsed, by how their prompt tokens were counted: size="read" from the image\'s header (--image-token-patch) or a fixed count per image (min = max), "unknown" weighed --media-tokens-unknown (an image by URL, other media), "unkeyed" nothing to tell it apart (weighs nothing).',
      labelNames: ['size'] as const,
      registers,
    });
    this.mediaTokens = new Counter({
      name: 'vllm_router_media_tokens_total',
      help: "Prompt tokens the routing text counted for media parts (compare with the workers' prompt tokens to tune --media-tokens-unknown and the --image-* flags).",
      registers,
    });
    this.failovers = new Counter({
      name: 'vllm_router_failovers_total',
      help: 'Requests the gateway served on another endpoint than the worker chosen (it refused or reset them; a fallback endpoint, --fallback-endpoints, took over), by the worker chosen; adopted="false" when no worker of the pool had the endpoint that served.',
      labelNames: ['worker', 'adopted'] as const,
      registers,
    });
    this.shed = new Counter({
      name: 'vllm_router_requests_shed_total',
      help: 'Sheddable requests (their x-gateway-inference-objective has a negative priority, --objective) answered 429 while every worker they could go to was saturated, by objective and by the role of the saturated pool.',
      labelNames: ['objective', 'role'] as const,
      registers,
    });
    const poolSaturated = opts.poolSaturated;
    if (poolSaturated) {
      new Gauge({
        name: 'vllm_router_pool_saturated',
        help: "1 while no selectable worker of the pool has room (its scraped sample, not stale, within --saturation-waiting and --saturation-kv-usage; a worker without /metrics: this router's queued prefills within --saturation-waiting): sheddable requests are shed; else 0. Pools without workers are not listed.",
        labelNames: ['role'] as const,
        registers,
        collect() {
          this.reset();
          for (const [role, full] of poolSaturated()) this.set({ role }, full ? 1 : 0);
        },
      });
    }
    this.flowRefused = new Counter({
      name: 'vllm_router_flow_refused_total',
      help: '--flow-control: requests refused by reason (queue_full: --flow-queue-max or --flow-queue-max-bytes held already, or a more important request took its place; queue_timeout: held --flow-queue-ttl-ms) and objective (one the router knows; "" for none or any other name).',
      labelNames: ['reason', 'objective'] as const,
      registers,
    });
    this.flowWait = new Histogram({
      name: 'vllm_router_flow_wait_seconds',
      help: '--flow-control: how long requests were held before they were let go.',
      buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    const flowHeld = opts.flowHeld;
    if (flowHeld) {
      new Gauge({
        name: 'vllm_router_flow_held',
        help: '--flow-control: requests held in the router now, waiting for a saturated pool to have room.',
        registers,
        collect() {
          this.set(flowHeld());
        },
      });
    }
    const objectives = opts.objectives;
    if (objectives) {
      new Gauge({
        name: 'vllm_router_objective_priority',
        help: 'The priority of each request objective the router knows (--objective, and the InferenceObjectives of --inference-pool): x-gateway-inference-objective naming one with a negative priority makes a request sheddable.',
        labelNames: ['objective'] as const,
        registers,
        collect() {
          this.reset();
          for (const [objective, priority] of objectives()) this.set({ objective }, priority);
        },
      });
    }
    this.pdPrefillRequests = new Counter({
      name: 'vllm_router_pd_prefill_requests_total',
      help: 'Prefill legs sent, by worker.',
      labelNames: ['worker'] as const,
      registers,
    });
    this.pdDecodeRequests = new Counter({
      name: 'vllm_router_pd_decode_requests_total',
      help: 'Decode legs routed, by worker.',
      labelNames: ['worker'] as const,
      registers,
    });
    this.pdLocalPrefills = new Counter({
      name: 'vllm_router_pd_local_prefills_total',
      help: 'Inference requests that went whole to a decode worker, without a prefill leg, by reason: short_prompt (--pd-local-prefill-tokens), parallel_sampling (n > 1 or a batched prompt), beam_search (use_beam_search), prompt_logprobs (prompt_logprobs or echo: logprobs of the prompt), decode_only_model (no prefill worker serves its model, a decode worker does).',
      labelNames: ['reason'] as const,
      registers,
    });
    this.pdErrors = new Counter({
      name: 'vllm_router_pd_errors_total',
      help: 'P/D failures by type.',
      labelNames: ['error_type'] as const,
      registers,
    });
    this.pdPrefillDuration = new Histogram({
      name: 'vllm_router_pd_prefill_duration_seconds',
      help: 'Duration of the prefill leg run by the router.',
      labelNames: ['outcome'] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      registers,
    });
    this.pdBootstrapQueries = new Counter({
      name: 'vllm_router_pd_bootstrap_queries_total',
      help: 'Mooncake bootstrap GET /query calls to prefill instances, by outcome (ok, error).',
      labelNames: ['outcome'] as const,
      registers,
    });
    this.modelsPolls = new Counter({
      name: 'vllm_router_models_polls_total',
      help: "Reads of the workers' GET /v1/models, by outcome: listed, absent (404/405: the metrics label is used), invalid (not a model list), failed.",
      labelNames: ['outcome'] as const,
      registers,
    });
    const servedModels = opts.servedModels;
    if (servedModels) {
      new Gauge({
        name: 'vllm_router_worker_served_model',
        help: 'Models a worker is known to serve (1 per model; parent: the base model of a LoRA adapter, empty for a base model), from its /v1/models list or its metrics label; requests for a model go only to the workers serving it when any is known to.',
        labelNames: ['role', 'worker', 'generation', 'model', 'parent'] as const,
        registers,
        collect() {
          this.reset();
          for (const w of workers()) {
            const s = servedModels(w);
            if (s === undefined) continue;
            let n = 0;
            for (const model of s.base) {
              if (n++ >= MAX_MODEL_SERIES_PER_WORKER) break;
              this.set({ ...labels(w), model, parent: '' }, 1);
            }
            for (const [model, parent] of s.adapters) {
              if (n++ >= MAX_MODEL_SERIES_PER_WORKER) break;
              this.set({ ...labels(w), model, parent }, 1);
            }
          }
        },
      });
    }
    const bootstrapReady = opts.bootstrapReady;
    if (bootstrapReady) {
      new Gauge({
        name: 'vllm_router_pd_bootstrap_ready',
        help: "1 when a Mooncake prefill instance's bootstrap server answered /query (selectable), else 0.",
        labelNames: ['role', 'worker', 'generation'] as const,
        registers,
        collect() {
          this.reset();
          for (const w of workers()) {
            const v = bootstrapReady(w);
            if (v !== undefined) this.set(labels(w), v);
          }
        },
      });
    }
  }

  /**
   * Drops the series the request path counted for worker `key` (P/D legs, failovers): called when no
   * pool has held a worker at that key for DEPARTED_SERIES_MS (wiring.ts), so the last counts
   * of a worker that died are scraped), so a fleet whose pods come and go does not grow /metrics.
   */
  forgetWorker(key: string): void {
    this.pdPrefillRequests.remove({ worker: key });
    this.pdDecodeRequests.remove({ worker: key });
    for (const adopted of ['true', 'false']) this.failovers.remove({ worker: key, adopted });
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}

function labels(w: Worker): { role: string; worker: string; generation: string } {
  return { role: w.role, worker: w.key, generation: String(w.generation) };
}
