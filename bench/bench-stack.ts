/**
 * Starts the pieces a benchmark measures, all on 127.0.0.1: simulated vLLM workers (in-process), the
 * router (in-process via startRouter, or a child process: its own event loop and core, as it runs in
 * production and as the peers run, and for CPU accounting) and the real Envoy (child
 * process, src/envoy/envoy-process.ts). Everything has an idempotent close(); a failed start closes
 * what was already started.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pino } from 'pino';
import { loopbackConfig, type Config } from '../src/config.js';
import { ROUTER_NODE_FLAGS } from '../src/runtime/node-flags.js';
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import type { EnvoyRenderOptions } from '../src/envoy/envoy-config.js';
import { stringify as stringifyYaml } from 'yaml';
import { startRouter } from '../src/router.js';
import { startCluster, type SimulatorCluster } from '../src/sim/cluster.js';
import type { SimulatorOptions } from '../src/sim/simulator.js';
import { ROOT } from './report-doc.js';
import { freePort, freePorts } from '../test/support/free-ports.js';

export { freePort, freePorts };

export function benchRouterConfig(overrides: Partial<Config>): Config {
  return loopbackConfig({ logLevel: 'silent', healthCheckIntervalMs: 0, ...overrides });
}

/**
 * The router's side of KV events in a benchmark: subscribe to every simulator's publisher (and its
 * replay endpoint), tokenize `model` with the tokenizer directory `tokenizerDir` (the same files the
 * simulators tokenize with). The simulators must have been started with `kvEvents`.
 */
export interface StackKvEvents {
  readonly model: string;
  readonly tokenizerDir: string;
}

function kvEventConfig(cluster: SimulatorCluster, kv: StackKvEvents): Partial<Config> {
  const pubs = cluster.sims.map((s) => {
    if (s.kvEvents === undefined) throw new Error(`simulator ${s.url} was started without kvEvents`);
    return { url: s.url, endpoint: s.kvEvents.endpoint, replay: s.kvEvents.replayEndpoint };
  });
  return {
    kvEventSource: pubs.map((p) => `${p.url}=${p.endpoint}`),
    kvEventReplay: pubs.filter((p) => p.replay !== undefined).map((p) => `${p.url}=${p.replay!}`),
    tokenizer: [`${kv.model}=${kv.tokenizerDir}`],
  };
}

/** Polls a router's /readyz until 200 (warm-up over: e.g. every KV-event subscription synced). */
async function waitReady(router: StackRouter, budgetMs = 30_000): Promise<void> {
  const deadline = Date.now() + budgetMs;
  while (true) {
    const res = await fetch(`http://127.0.0.1:${router.adminPort}/readyz`).catch(() => undefined);
    const body = await res?.text();
    if (res?.status === 200) return;
    if (Date.now() > deadline) throw new Error(`router not ready within ${budgetMs} ms: ${body ?? ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What a benchmark reads of a router replica, in-process or a child process. */
export interface StackRouter {
  readonly grpcPort: number;
  readonly adminPort: number;
  /** utime + stime so far, ms (router child processes only). */
  cpuMs?(): number;
  close(): Promise<void>;
}

export interface RoutedStack {
  readonly cluster: SimulatorCluster;
  /** The first replica (the only one unless `replicas` > 1). */
  readonly router: StackRouter;
  /** Every router replica; Envoy balances ext_proc streams over them. */
  readonly routers: readonly StackRouter[];
  readonly envoy: EnvoyHandle;
  /** http://127.0.0.1:<envoy listener> */
  readonly url: string;
  close(): Promise<void>;
}

/**
 * n simulators + router replicas (default 1; each started the same way, sharing nothing; in-process,
 * or child processes of `routerScript` given the settings as a YAML --config file) +
 * Envoy with ext_proc balancing streams over them. With `kvEvents`, every replica subscribes to every
 * simulator's KV events and tokenizes requests (the exact index), and the stack is returned once every
 * replica reports ready.
 */
export async function startRoutedStack(opts: {
  workers: number;
  sim: SimulatorOptions;
  router: Partial<Config>;
  envoy?: EnvoyRenderOptions;
  replicas?: number;
  /** Every replica subscribes to every simulator's KV events (simulators started with `kvEvents`). */
  kvEvents?: StackKvEvents;
  /** Run each replica as a child process of this CLI script (buildRouter's, or src/cli.ts via tsx). */
  routerScript?: string;
  /**
   * Other workers than `workers` simulators (e.g. data-parallel servers, sim/dp-server.ts): the
   * router's worker URLs and the simulators whose records the benchmark reads.
   */
  fleet?: () => Promise<{ cluster: SimulatorCluster; urls: readonly string[] }>;
}): Promise<RoutedStack> {
  const fleet = opts.fleet ? await opts.fleet() : undefined;
  const cluster = fleet?.cluster ?? (await startCluster(opts.workers, opts.sim));
  const routers: StackRouter[] = [];
  try {
    const kv = opts.kvEvents === undefined ? {} : kvEventConfig(cluster, opts.kvEvents);
    const urls = fleet?.urls ?? cluster.sims.map((s) => s.url);
    const settings: Partial<Config> = { workers: [...urls], ...kv, ...opts.router };
    for (let i = 0; i < (opts.replicas ?? 1); i++) {
      routers.push(
        opts.routerScript === undefined
          ? await startRouter(Object.freeze(benchRouterConfig(settings)), {
              logger: pino({ level: 'silent' }),
            })
          : await startRouterWithSettings(opts.routerScript, settings),
      );
    }
    // Traffic starts on a rebuilt picture (subscriptions synced) in every replica.
    await Promise.all(routers.map((r) => waitReady(r)));
    const envoy = await startEnvoy({
      routers: routers.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
      ...opts.envoy,
    });
    let closing: Promise<void> | undefined;
    return {
      cluster,
      router: routers[0]!,
      routers,
      envoy,
      url: `http://127.0.0.1:${envoy.listenerPort}`,
      close: () => {
        closing ??= (async () => {
          await envoy.close();
          await Promise.all(routers.map((r) => r.close()));
          await cluster.close();
        })();
        return closing;
      },
    };
  } catch (err) {
    await Promise.all(routers.map((r) => r.close()));
    await cluster.close();
    throw err;
  }
}

/** A router child process configured by a YAML file holding `settings` (deleted when it closes). */
async function startRouterWithSettings(script: string, settings: Partial<Config>): Promise<StackRouter> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'bench-router-'));
  const file = path.join(dir, 'router.yaml');
  writeFileSync(file, stringifyYaml(settings));
  try {
    const child = await startRouterProcess(['--config', file], [], script);
    return {
      grpcPort: child.grpcPort,
      adminPort: child.adminPort,
      cpuMs: () => child.cpuMs(),
      close: async () => {
        await child.close();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

export interface RouterProcess {
  readonly pid: number;
  readonly grpcPort: number;
  readonly adminPort: number;
  readonly process: ChildProcess;
  /** utime + stime of the process so far, ms (from /proc/<pid>/stat; clock ticks of 10 ms). */
  cpuMs(): number;
  close(): Promise<void>;
}

export interface ChildService {
  readonly pid: number;
  readonly process: ChildProcess;
  /** utime + stime of the process so far, ms (from /proc/<pid>/stat; 10 ms clock ticks). */
  cpuMs(): number;
  /** The last 4 KB the process wrote to stderr (warnings, errors). */
  stderrTail(): string;
  /** SIGTERM, SIGKILL after 5 s; idempotent. */
  close(): Promise<void>;
}

/** Children started through superviseChild and not yet exited: killed when this process exits. */
const liveChildren = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of liveChildren) child.kill('SIGKILL');
});

/**
 * Makes SIGINT and SIGTERM exit through process.exit, so that the 'exit' hooks (here and in
 * src/envoy/envoy-process.ts) kill every router, peer and Envoy this benchmark started: by default
 * Node dies on those signals without running them, and an interrupted run left its routers running
 * and taking CPU from the next run. For the benchmarks' entry points (bench/run.ts, routing-ab.ts).
 */
export function exitOnSignals(): void {
  process.once('SIGINT', () => process.exit(130));
  process.once('SIGTERM', () => process.exit(143));
}

/**
 * Keeps the last 4 KB of a child's stderr and gives it one idempotent close: SIGTERM, SIGKILL after
 * 5 s, resolved when the process has exited. A child still running when this process exits is killed.
 */
export function superviseChild(child: ChildProcess): { stderrTail(): string; close(): Promise<void> } {
  liveChildren.add(child);
  child.once('exit', () => liveChildren.delete(child));
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4096);
  });
  child.on('error', (err) => {
    stderr += `\n${err.message}`;
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 5000).unref();
        await exited;
        clearTimeout(t);
      }
    })();
    return closing;
  };
  return { stderrTail: () => stderr, close };
}

/**
 * Spawns `node [--import tsx] <script> ...args` (tsx for a .ts script) from the project root and waits until `readyUrl`
 * answers 200 (30 s budget). Separate processes let a benchmark read one component's CPU time from
 * /proc and keep the client's event loop out of the measured component's.
 */
export async function startTsxProcess(
  script: string,
  args: string[],
  readyUrl: string,
  nodeArgs: string[] = [],
  cpus?: string,
): Promise<ChildService> {
  const loader = script.endsWith('.ts') ? ['--import', 'tsx'] : [];
  const node = [...nodeArgs, ...loader, path.resolve(ROOT, script), ...args];
  // `taskset -c <cpus> node ...` execs node in place: the same pid, every thread held to those cores.
  const [cmd, argv] =
    cpus === undefined ? [process.execPath, node] : ['taskset', ['-c', cpus, process.execPath, ...node]];
  const child = spawn(cmd, argv, {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const { stderrTail, close } = superviseChild(child);
  const deadline = Date.now() + 30_000;
  while (true) {
    if (child.exitCode !== null) throw new Error(`${script} exited with ${child.exitCode}: ${stderrTail()}`);
    if (Date.now() > deadline) {
      await close();
      throw new Error(`${script} not ready within 30 s: ${stderrTail()}`);
    }
    const res = await fetch(readyUrl).catch(() => undefined);
    if (res?.status === 200) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const pid = child.pid!;
  return { pid, process: child, cpuMs: () => procCpuMs(pid), stderrTail, close };
}

export interface RouterProcess extends ChildService {
  readonly grpcPort: number;
  readonly adminPort: number;
}

/**
 * The router CLI as a child process on free ports; ready when /readyz answers 200. `script` is
 * `src/cli.ts` (via tsx) or the compiled `dist/src/cli.js` (what production runs; see buildRouter),
 * started with the node flags every shipped launch path uses (ROUTER_NODE_FLAGS,
 * src/runtime/node-flags.ts) before `nodeArgs`, unless `productionFlags` is false. `cpus` pins the
 * process to those cores (`taskset -c`, e.g. '0' or '0,1').
 */
export async function startRouterProcess(
  args: string[],
  nodeArgs: string[] = [],
  script = 'src/cli.ts',
  cpus?: string,
  productionFlags = true,
): Promise<RouterProcess> {
  // freePort() releases the port before the child binds it; another process may take it meanwhile
  // (a replicas run failed so once): a child that exits with EADDRINUSE is started again on new ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startRouterOnFreePorts(
        args,
        productionFlags ? [...ROUTER_NODE_FLAGS, ...nodeArgs] : nodeArgs,
        script,
        cpus,
      );
    } catch (err) {
      if (attempt >= 3 || !String((err as Error).message).includes('EADDRINUSE')) throw err;
    }
  }
}

/**
 * Extra node flags for every router process a benchmark starts, from `BENCH_ROUTER_NODE_ARGS`
 * (space-separated; e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`, which NODE_OPTIONS refuses): how a
 * router's CPU is profiled under a benchmark's traffic. The profile is written when the router exits
 * on the benchmark's SIGTERM.
 */
function routerNodeArgsFromEnv(): string[] {
  return (process.env['BENCH_ROUTER_NODE_ARGS'] ?? '').split(' ').filter((a) => a.length > 0);
}

async function startRouterOnFreePorts(
  args: string[],
  nodeArgs: string[],
  script: string,
  cpus: string | undefined,
): Promise<RouterProcess> {
  const [grpcPort, adminPort] = (await freePorts(2)) as [number, number];
  const svc = await startTsxProcess(
    script,
    [
      '--host',
      '127.0.0.1',
      '--grpc-port',
      String(grpcPort),
      '--admin-port',
      String(adminPort),
      '--log-level',
      'warn',
      '--health-check-interval-ms',
      '0',
      // No drain grace on SIGTERM: no load balancer health-checks a benchmark's router.
      '--drain-grace-ms',
      '0',
      ...args,
    ],
    `http://127.0.0.1:${adminPort}/readyz`,
    [...nodeArgs, ...routerNodeArgsFromEnv()],
    cpus,
  );
  return { ...svc, grpcPort, adminPort };
}

export interface SimulatorProcess extends ChildService {
  readonly url: string;
}

/** The simulator CLI (`src/sim/cli.ts`) as a child process on a free port. */
export async function startSimulatorProcess(args: string[]): Promise<SimulatorProcess> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const svc = await startTsxProcess(
    'src/sim/cli.ts',
    ['--host', '127.0.0.1', '--port', String(port), ...args],
    `${url}/health`,
  );
  return { ...svc, url };
}

/** utime + stime of a Linux process in ms (fields 14 and 15 of /proc/<pid>/stat, in 10 ms ticks). */
export function procCpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // fields[0] is field 3 (state); utime is field 14 -> index 11, stime field 15 -> index 12.
  return (Number(fields[11]) + Number(fields[12])) * 10;
}

/**
 * Compiles the router (`tsc -p tsconfig.build.json` into dist/) so a benchmark measures the JavaScript
 * production runs, not tsx (tsx enables source-mapped stack traces, which make every Error the router
 * creates several times more expensive). tsc emits even when it reports type errors (other work in
 * progress); the build counts as usable when dist/src/cli.js exists afterwards.
 */
export function buildRouter(): { script: string; typeErrors: boolean } {
  const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const res = spawnSync(process.execPath, [tsc, '-p', 'tsconfig.build.json'], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  const script = 'dist/src/cli.js';
  if (!existsSync(path.join(ROOT, script))) {
    throw new Error(`router build failed: ${(res.stdout + res.stderr).slice(-2000)}`);
  }
  return { script, typeErrors: res.status !== 0 };
}
