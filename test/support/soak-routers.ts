/**
 * The router side of the chaos soak: one router in the soak's own process (its memory then counts in
 * the soak's slopes), or N replicas, each the real CLI as a child process on ports fixed for the run,
 * so the replica chaos can SIGKILL one, or SIGTERM it (a rolling restart: drain, then exit), and start
 * it again where Envoy's router cluster expects it.
 *
 * Both are started from the same command-line arguments (the in-process router parses them as the CLI
 * does), and every check reads a replica the way an operator would: its admin API (`GET /workers`,
 * `/metrics`, `/healthz`).
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { pino } from 'pino';
import { parseConfig } from '../../src/config.js';
import { startRouter, type Router } from '../../src/router.js';
import { startRouterChild, type RouterChild } from '../integration/lifecycle/router-child.js';
import { freePorts } from './free-ports.js';

export interface SoakReplica {
  readonly index: number;
  readonly grpcPort: number;
  readonly adminPort: number;
  /** Running (started and not killed or draining). */
  readonly up: boolean;
}

/** A worker as a replica's `GET /workers` shows it. */
export interface SoakWorkerView {
  readonly url: string;
  readonly role: string;
  readonly load: number;
}

interface Slot {
  readonly index: number;
  readonly grpcPort: number;
  readonly adminPort: number;
  up: boolean;
  child?: RouterChild;
  router?: Router;
}

export class SoakRouters {
  kills = 0;
  drains = 0;
  restarts = 0;
  /** Streams drained replicas handed back to Envoy at the end of their drain (from their logs). */
  released = 0;
  private closed = false;

  private constructor(
    private readonly args: readonly string[],
    private readonly slots: Slot[],
  ) {}

  /**
   * `replicas` 1: the router in this process, on ports of its own choosing. More: child processes
   * on fixed free ports. `args` are the CLI's flags, without host and ports.
   */
  static async start(args: readonly string[], replicas: number): Promise<SoakRouters> {
    if (replicas <= 1) {
      const parsed = parseConfig(['--host', '127.0.0.1', '--grpc-port', '0', '--admin-port', '0', ...args]);
      if (parsed.help) throw new Error('soak router: unexpected --help');
      const router = await startRouter(parsed.config, {
        logger: pino({ level: process.env.ROUTER_TEST_LOG ?? 'silent' }),
      });
      return new SoakRouters(args, [
        { index: 0, grpcPort: router.grpcPort, adminPort: router.adminPort, up: true, router },
      ]);
    }
    const ports = await freePorts(2 * replicas);
    const slots: Slot[] = Array.from({ length: replicas }, (_, i) => ({
      index: i,
      grpcPort: ports[2 * i]!,
      adminPort: ports[2 * i + 1]!,
      up: false,
    }));
    const routers = new SoakRouters(args, slots);
    try {
      await Promise.all(slots.map((s) => routers.spawn(s)));
    } catch (err) {
      await routers.close();
      throw err;
    }
    return routers;
  }

  get replicated(): boolean {
    return this.slots.length > 1;
  }

  /** Every replica's gRPC endpoint (Envoy's router cluster), up or not. */
  endpoints(): Array<{ host: string; port: number }> {
    return this.slots.map((s) => ({ host: '127.0.0.1', port: s.grpcPort }));
  }

  all(): SoakReplica[] {
    return [...this.slots];
  }

  live(): SoakReplica[] {
    return this.slots.filter((s) => s.up);
  }

  /** The in-process router's ZMQ discovery endpoint (P/D mode runs on one router only). */
  get discoveryEndpoint(): string | undefined {
    return this.slots[0]!.router?.discoveryEndpoint;
  }

  /** SIGKILL: a crash. Resolves once the process is gone. */
  async kill(index: number): Promise<void> {
    const slot = this.child(index);
    slot.up = false;
    this.kills++;
    await slot.child!.kill();
  }

  /** SIGTERM: the replica drains (readiness off, in-flight streams finish) and exits. */
  async drain(index: number): Promise<void> {
    const slot = this.child(index);
    slot.up = false;
    this.drains++;
    slot.child!.process.kill('SIGTERM');
    const { code } = await slot.child!.exited;
    if (code !== 0) throw new Error(`soak: replica ${index} exited with ${code} after SIGTERM`);
    for (const line of slot.child!.lines) {
      if (line.msg === 'handed routed streams back to Envoy') this.released += Number(line.released);
    }
  }

  /** Starts a replica that is down again, on the same ports. */
  async restart(index: number): Promise<void> {
    const slot = this.slots[index]!;
    if (slot.up || slot.router !== undefined) return;
    await this.spawn(slot);
    this.restarts++;
  }

  async workers(replica: SoakReplica): Promise<SoakWorkerView[]> {
    const res = await fetch(`http://127.0.0.1:${replica.adminPort}/workers`);
    return (await res.json()) as SoakWorkerView[];
  }

  /** A metric summed over its series, on one replica. */
  async metricSum(replica: SoakReplica, name: string): Promise<number> {
    return Object.values(await this.metricByLabel(replica, name, '')).reduce((a, b) => a + b, 0);
  }

  /** A metric's values summed per value of one label, on one replica. */
  async metricByLabel(replica: SoakReplica, name: string, label: string): Promise<Record<string, number>> {
    const text = await (await fetch(`http://127.0.0.1:${replica.adminPort}/metrics`)).text();
    // Only the metric's own sample lines, as src/load/metrics-parse.ts hands them to the parser, and
    // newline-terminated as there: the parser drops a last line without one.
    const wanted = text.split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
    const out: Record<string, number> = {};
    for (const family of parsePrometheusTextFormat(`${wanted.join('\n')}\n`)) {
      if (family.name !== name) continue;
      for (const m of family.metrics) {
        if (!('value' in m)) continue;
        const key = String(m.labels?.[label] ?? '');
        out[key] = (out[key] ?? 0) + Number(m.value);
      }
    }
    return out;
  }

  async alive(replica: SoakReplica): Promise<boolean> {
    return fetch(`http://127.0.0.1:${replica.adminPort}/healthz`)
      .then((res) => res.status === 200)
      .catch(() => false);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(
      this.slots.map(async (s) => {
        s.up = false;
        await s.router?.close();
        await s.child?.kill();
      }),
    );
  }

  private child(index: number): Slot {
    const slot = this.slots[index]!;
    if (slot.child === undefined || !slot.up) throw new Error(`soak: replica ${index} is not up`);
    return slot;
  }

  /** Starts the slot's child; one that finishes starting after close() is killed at once (no leak). */
  private async spawn(slot: Slot): Promise<void> {
    if (this.closed) return;
    const ports = ['--grpc-port', String(slot.grpcPort), '--admin-port', String(slot.adminPort)];
    const child = await startRouterChild(['--host', '127.0.0.1', ...ports, ...this.args]);
    if (this.closed) {
      await child.kill();
      return;
    }
    slot.child = child;
    slot.up = true;
  }
}
