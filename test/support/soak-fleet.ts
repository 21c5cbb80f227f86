/**
 * The simulated worker fleet of the chaos soak: 8 simulators whose registrations expire (short TTL)
 * unless they heartbeat, and which the chaos loop kills, restarts on the SAME port, and silences.
 *
 * Registration:
 *  - regular mode: each live, heartbeating worker is POSTed to every live router replica's admin API
 *    every `heartbeatMs` (a regular vLLM never self-registers over ZMQ);
 *  - pd mode: prefill and decode simulators self-register over ZMQ exactly as vLLM does (their
 *    ZmqRegistrar), every `heartbeatMs`.
 * A registration expires `ttlMs` after the last heartbeat (router --discovery-ttl-ms): a worker that is
 * down or silent longer than that is removed from its pool and comes back as a new generation.
 *
 * Kill = `sim.close()` (sockets destroyed: in-flight responses are reset, and so are responses the
 * simulator finished writing that are still in its socket buffers). Just before it, the tags of the
 * simulator's requests whose CLIENT is still waiting are remembered (`killedInFlight`), so the load
 * client can tell a reset caused by the kill from an unexplained one. The client removes its tag when
 * its request ends, so the set stays bounded by the concurrency.
 *
 * KV events (optional): every simulator tokenizes with the given tokenizer, keeps a small prefix
 * cache (so evictions publish BlockRemoved) and publishes its KV events, with a replay endpoint, on
 * ports fixed per worker: a restarted worker binds the same endpoints (AllBlocksCleared, sequence from
 * 0), as a restarted vLLM pod does behind its stable `--kv-event-source`.
 */
import type { KvEventPublisherOptions } from '../../src/sim/kv-event-publisher.js';
import type { SimTokenizer } from '../../src/sim/sim-tokenizer.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { TimingModel } from '../../src/sim/timing-model.js';

/** Batches each publisher keeps for replay (vLLM keeps 10,000; the soak's restarts need a few hundred). */
const KV_REPLAY_STEPS = 500;

export type FleetRole = 'regular' | 'prefill' | 'decode';

export interface FleetWorker {
  readonly role: FleetRole;
  readonly port: number;
  /** undefined while killed. */
  sim: Simulator | undefined;
  heartbeating: boolean;
  /** A chaos action is in progress on this worker. */
  busy: boolean;
  /** Its KV-event publisher's endpoints (the same after every restart), when the fleet publishes. */
  readonly kvEvents: KvEventPublisherOptions | undefined;
}

/** KV events on: every worker tokenizes, keeps a small prefix cache and publishes on fixed ports. */
export interface SoakFleetKvEvents {
  readonly tokenizer: SimTokenizer;
  /** Prefix-cache capacity per worker, in blocks (small, so evictions publish BlockRemoved). */
  readonly capacityBlocks: number;
  /** Per worker i: its HTTP port and its publisher's endpoints (free ports chosen by the caller). */
  readonly ports: ReadonlyArray<{ http: number; endpoint: string; replayEndpoint: string }>;
  /** Holds those ports until worker i binds them (released just before its first start). */
  readonly reservation?: { release(port: number): Promise<void>; releaseAll(): Promise<void> };
}

/**
 * Where the fleet registers: every live replica's admin API; in P/D mode with one router, its ZMQ
 * socket (`discoveryEndpoint`), as vLLM's prefill and decode instances do; with several replicas
 * (no discovery endpoint), P/D workers heartbeat to every replica's admin API too, as a registration
 * sidecar or Kubernetes discovery would feed them.
 */
export interface SoakFleetRouters {
  adminPorts(): number[];
  readonly discoveryEndpoint: string | undefined;
}

export interface SoakFleetOptions {
  mode: 'regular' | 'pd';
  routers: SoakFleetRouters;
  size: number;
  heartbeatMs: number;
  timing: Partial<TimingModel>;
  /** Extracts a request's tag from a simulator record body. */
  tagOf: (body: unknown) => string | undefined;
  /** Whether the client of this tag is still waiting for its response. */
  clientInFlight: (tag: string) => boolean;
  kvEvents?: SoakFleetKvEvents;
}

export class SoakFleet {
  readonly workers: FleetWorker[] = [];
  readonly killedInFlight = new Set<string>();
  restarts = 0;
  heartbeatPauses = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(private readonly opts: SoakFleetOptions) {}

  /** Heartbeats go through the admin API (regular workers, or P/D without a ZMQ discovery endpoint). */
  private get viaAdmin(): boolean {
    return this.opts.mode === 'regular' || this.opts.routers.discoveryEndpoint === undefined;
  }

  static async start(opts: SoakFleetOptions): Promise<SoakFleet> {
    const fleet = new SoakFleet(opts);
    try {
      for (let i = 0; i < opts.size; i++) {
        const role: FleetRole = opts.mode === 'regular' ? 'regular' : i % 2 === 0 ? 'prefill' : 'decode';
        const ports = opts.kvEvents?.ports[i];
        const kvEvents = ports && { endpoint: ports.endpoint, replayEndpoint: ports.replayEndpoint };
        if (ports !== undefined) {
          const held = opts.kvEvents?.reservation;
          for (const p of [ports.http, ...[ports.endpoint, ports.replayEndpoint].map(portOf)])
            await held?.release(p);
        }
        const sim = await fleet.spawn(role, ports?.http ?? 0, kvEvents);
        fleet.workers.push({ role, port: sim.port, sim, heartbeating: true, busy: false, kvEvents });
      }
      if (fleet.viaAdmin) {
        fleet.timer = setInterval(() => void fleet.heartbeat(), opts.heartbeatMs);
        fleet.timer.unref();
        await fleet.heartbeat();
      }
    } catch (err) {
      await fleet.close();
      throw err;
    }
    return fleet;
  }

  /** Live simulators of a role (for fault injection). */
  live(role: FleetRole): Simulator[] {
    const out: Simulator[] = [];
    for (const w of this.workers) if (w.role === role && w.sim) out.push(w.sim);
    return out;
  }

  /** Every simulator instance currently running. */
  sims(): Simulator[] {
    return this.workers.flatMap((w) => (w.sim ? [w.sim] : []));
  }

  async kill(w: FleetWorker): Promise<void> {
    const sim = w.sim;
    if (!sim) return;
    for (const r of sim.records) {
      const tag = this.opts.tagOf(r.body);
      if (tag && this.opts.clientInFlight(tag)) this.killedInFlight.add(tag);
    }
    w.sim = undefined;
    await sim.close();
  }

  /** A new simulator on the same port (and, in pd mode, the same ZMQ identity). */
  async restart(w: FleetWorker): Promise<void> {
    if (w.sim || this.closed) return;
    w.sim = await this.spawn(w.role, w.port, w.kvEvents);
    this.restarts++;
    if (!w.heartbeating) w.sim.stopRegistering();
    else if (this.viaAdmin) await this.register(w);
  }

  pauseHeartbeats(w: FleetWorker): void {
    w.heartbeating = false;
    w.sim?.stopRegistering();
    this.heartbeatPauses++;
  }

  resumeHeartbeats(w: FleetWorker): void {
    w.heartbeating = true;
    w.sim?.startRegistering();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await Promise.all(this.workers.map((w) => w.sim?.close()));
  }

  private spawn(
    role: FleetRole,
    port: number,
    kvEvents: KvEventPublisherOptions | undefined,
  ): Promise<Simulator> {
    const { routers, heartbeatMs, timing } = this.opts;
    const kv = this.opts.kvEvents;
    return startSimulator({
      role,
      port,
      timeScale: 1,
      timing,
      ...(kv !== undefined && kvEvents !== undefined
        ? {
            tokenizer: kv.tokenizer,
            cache: { capacityBlocks: kv.capacityBlocks },
            // The replay buffer as the record ring below: small, so it is full (flat) after warm-up.
            kvEvents: { ...kvEvents, bufferSteps: KV_REPLAY_STEPS },
          }
        : {}),
      // Enough to trace in-flight requests; small, so the ring is full (flat) after warm-up.
      maxRecords: 200,
      register:
        routers.discoveryEndpoint === undefined || role === 'regular'
          ? undefined
          : { zmq: routers.discoveryEndpoint, intervalMs: heartbeatMs },
    });
  }

  private async heartbeat(): Promise<void> {
    await Promise.all(this.workers.map((w) => (w.heartbeating && w.sim ? this.register(w) : undefined)));
  }

  /** A heartbeat to every live replica (as a registration sidecar in front of N replicas does). */
  private async register(w: FleetWorker): Promise<void> {
    const sim = w.sim;
    if (!sim || this.closed) return;
    await Promise.all(
      this.opts.routers.adminPorts().map(async (port) => {
        try {
          const res = await fetch(`http://127.0.0.1:${port}/workers`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ role: w.role, url: sim.url }),
          });
          await res.arrayBuffer();
        } catch {
          /* the replica is down or shutting down */
        }
      }),
    );
  }
}

/** The port of a `tcp://host:port` endpoint. */
function portOf(endpoint: string): number {
  return Number(endpoint.slice(endpoint.lastIndexOf(':') + 1));
}
