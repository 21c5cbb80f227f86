/**
 * A Worker is the live scheduling identity of one (role, endpoint, registration generation).
 *
 * It carries the state policies read (in-flight load, processed count, health). A worker that
 * dies and re-registers at the same URL gets a NEW Worker object (new generation), so state never
 * leaks between process lifetimes; an in-flight request keeps its reference to the old object and
 * its release cannot touch the successor.
 *
 * Plain data: no timers, metrics or logging. Load changes only through LoadGuard.
 */
import type { Role } from './role.js';

export interface WorkerSpec {
  role: Role;
  /** Base URL, e.g. `http://10.0.0.5:8000`. */
  url: string;
  /** `ip:port` that Envoy's ORIGINAL_DST cluster connects to. */
  endpoint: string;
  /** vLLM's KV / ZMQ address (`host:port`), when the worker registered one. */
  zmqAddress?: string;
  generation: number;
  /** Connector metadata from the registration (e.g. MoRI-IO `transfer_mode`). */
  metadata?: Readonly<Record<string, unknown>>;
  /** Mooncake bootstrap server port of a prefill instance (`--prefill URL PORT`). */
  bootstrapPort?: number;
  /**
   * The data-parallel rank this Worker stands for, when the pool schedules the ranks of one vLLM
   * server (`--data-parallel-size N`, internal load balancing) one by one (worker-pool.ts).
   */
  dpRank?: number;
}

export class Worker {
  readonly role: Role;
  readonly url: string;
  readonly endpoint: string;
  readonly zmqAddress: string | undefined;
  readonly generation: number;
  readonly metadata: Readonly<Record<string, unknown>>;
  /**
   * Mooncake bootstrap port: the dedicated field, else a numeric `metadata.bootstrap_port` (Kubernetes
   * discovery's `vllm.ai/bootstrap-port` annotation) or `metadata.bootstrapPort`; undefined = the
   * connector default (8998).
   */
  readonly bootstrapPort: number | undefined;
  /**
   * Port of the worker's Prometheus `/metrics` page when it is not the HTTP port: a numeric
   * `metadata.metrics_port` (Kubernetes `vllm.ai/metrics-port` annotation or
   * `--service-discovery-metrics-port`, or a registration's metadata); undefined = the URL's own port.
   */
  readonly metricsPort: number | undefined;
  /**
   * Port of the worker's ZMQ KV-events publisher (rank 0): a numeric `metadata.kv_events_port`
   * (Kubernetes `vllm.ai/kv-events-port` annotation or `--service-discovery-kv-events-port`, or a
   * registration's metadata); undefined = the `--kv-event-port` default rule.
   */
  readonly kvEventsPort: number | undefined;
  /**
   * The data-parallel rank requests to this Worker are pinned to (header `X-data-parallel-rank`), or
   * undefined when the server's own load balancer picks (or it has one engine).
   */
  readonly dpRank: number | undefined;
  /**
   * What is scheduled: the URL, or `<url>@<rank>` for one rank of a data-parallel server. Keys the
   * pool, the load board, the exact index and the per-worker metrics; HTTP always goes to `url`.
   */
  readonly key: string;
  /** Stable identity for policy membership (tenant id), metrics and logs. */
  readonly id: string;

  /**
   * Sequences of the requests holding a load guard on this worker (one per request, except parallel
   * sampling and batched prompts: LoadGuard `weight`), as vLLM counts running + waiting requests.
   */
  load = 0;
  /**
   * Decode legs chosen for this worker whose prefill leg still runs (sequential P/D: the decode
   * worker is chosen with the prefill worker, its guard taken when the leg ends, seconds later). Not
   * in `load`, what the worker runs (design section 5: no decode load during the prefill), but weighed
   * by selection (`selectionLoad`), so a burst does not see every decode worker idle. Kept by
   * pd/pd-dispatcher.ts.
   */
  pending = 0;
  /** Requests that completed on this worker (any outcome). */
  processed = 0;
  /** False while health checks, the circuit breaker, sleep mode or a cordon keep the worker out of selection. */
  healthy = true;
  /** True while its scraped metrics say vLLM's sleep mode has the engine asleep (one reason for !healthy). */
  asleep = false;
  /** True while the admin API holds it out of selection (another reason for !healthy). */
  cordoned = false;
  /**
   * True while vLLM's generation is paused on it (a `POST /pause` this router forwarded,
   * routing/fleet-control.ts, or its `/is_paused`, health/pause-poller.ts): still healthy, but its
   * pool prefers the workers that are not paused.
   */
  paused = false;

  constructor(spec: WorkerSpec) {
    this.role = spec.role;
    this.url = spec.url;
    this.endpoint = spec.endpoint;
    this.zmqAddress = spec.zmqAddress;
    this.generation = spec.generation;
    this.metadata = spec.metadata ?? {};
    this.bootstrapPort =
      spec.bootstrapPort ?? portOf(this.metadata.bootstrap_port) ?? portOf(this.metadata.bootstrapPort);
    this.metricsPort = portOf(this.metadata.metrics_port);
    this.kvEventsPort = portOf(this.metadata.kv_events_port);
    this.dpRank = spec.dpRank;
    this.key = rankedKey(spec.url, spec.dpRank);
    this.id = `${spec.role}|${this.key}|${spec.generation}`;
  }

  /** The address vLLM peers use for KV transfer / request ids: the zmq address, else host:port. */
  get kvAddress(): string {
    return this.zmqAddress ?? this.endpoint;
  }
}

/**
 * The load selection weighs: the worker's in-flight requests (`load`) and the decode legs on their
 * way to it (`pending`).
 */
export function selectionLoad(worker: Worker): number {
  return worker.load + worker.pending;
}

function portOf(v: unknown): number | undefined {
  const n = typeof v === 'string' && /^[0-9]{1,5}$/.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 65535 ? n : undefined;
}

/** A pool key: the URL, or `<url>@<rank>` for one data-parallel rank (the reference router's spelling). */
export function rankedKey(url: string, dpRank: number | undefined): string {
  return dpRank === undefined ? url : `${url}@${dpRank}`;
}
