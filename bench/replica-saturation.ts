/**
 * Router throughput per host with replicas pinned to cores (issue 14's deliverable): small
 * non-streaming requests, closed loop at a concurrency that saturates the host, through Envoy to
 *   - `1 replica`: one router process pinned to core 0 (`taskset -c 0`);
 *   - `2 replicas`: two router processes, pinned to core 0 and core 1, Envoy round-robining ext_proc
 *     streams over them (the replicas Envoy config: health checks, outlier detection).
 * The arms alternate (1, 2, 1, 2, ...; `rounds` each, fresh processes per round) so drift in the
 * machine's other load lands on both. Each round starts with a discarded warm-up batch of 4,500
 * requests PER REPLICA (fresh processes each round): V8 compiles the router's hot paths on background
 * threads over its first few thousand requests (bench/overhead-bench.ts measured ~1.2 ms -> ~0.6 ms of
 * CPU per small request), and a fixed warm-up shared by two replicas would leave each of them colder
 * than the single one, charging the second arm its JIT.
 *
 * Everything else is unpinned and shares the same cores: Envoy (--concurrency 2), the simulated
 * workers (child processes: 5 ms fixed service time, 1 output token) and the client (this process).
 * On a 2-core host the replicas therefore compete with Envoy, the workers and the client: the ratio
 * says how much a second pinned replica buys on THIS host, not on a host where the router is alone.
 *
 * Measured per arm (summed over its rounds): requests/s = completed / wall time; router CPU per
 * request = utime + stime of every replica (from /proc, 10 ms ticks) / completed requests; the same
 * for Envoy, the workers and the client, so the table shows where the host's cores went.
 */
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import {
  buildRouter,
  procCpuMs,
  startRouterProcess,
  startSimulatorProcess,
  type RouterProcess,
  type SimulatorProcess,
} from './bench-stack.js';
import { runClosedLoop } from './drivers.js';
import { runInfo, type RunInfo } from './report-doc.js';
import { percentile, round } from './stats.js';
import { generateWorkload, type BenchRequest } from './workloads.js';

export interface SaturationArm {
  label: string;
  replicas: number;
  /** taskset core list per replica. */
  cores: string[];
  requests: number;
  completed: number;
  errors: number;
  firstError?: string;
  wallMs: number;
  reqPerSec: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  routerCpuMs: number;
  routerCpuPerRequestUs: number;
  /** CPU of each replica over the arm (their split shows Envoy spreading the streams). */
  replicaCpuMs: number[];
  envoyCpuPerRequestUs: number;
  workersCpuPerRequestUs: number;
  clientCpuPerRequestUs: number;
  /** (routers + Envoy + workers + client) CPU / (wall x cores): how busy the host was. */
  hostBusy: number;
}

export interface SaturationResult {
  benchmark: 'replica-saturation';
  info: RunInfo;
  setup: {
    concurrency: number;
    requestsPerRound: number;
    /** Discarded warm-up requests per replica per round (so each process is as warm in both arms). */
    warmupPerReplica: number;
    rounds: number;
    workers: number;
    simulator: string;
    request: string;
    envoy: string;
    router: string;
  };
  arms: SaturationArm[];
  /** 2 replicas over 1: requests/s and router CPU per request. */
  throughputRatio: number;
  routerCpuPerRequestRatio: number;
}

const SIM_ARGS = [
  '--time-scale',
  '1',
  '--overhead-ms',
  '5',
  '--prefill-ms-per-token',
  '0',
  '--itl-ms',
  '1',
  '--itl-growth',
  '0',
  '--max-running',
  '100000',
];

const ARMS = [
  { label: '1 replica (core 0)', cores: ['0'] },
  { label: '2 replicas (cores 0 and 1)', cores: ['0', '1'] },
] as const;

function smallRequests(count: number, seed: number): BenchRequest[] {
  return [
    ...generateWorkload('no-sharing', { count, promptTokens: 64, outputTokens: 1, stream: false, seed })
      .requests,
  ];
}

export async function runReplicaSaturation(
  opts: { quick?: boolean; command?: string; log?: (line: string) => void } = {},
): Promise<SaturationResult> {
  const quick = opts.quick ?? false;
  const log = opts.log ?? (() => undefined);
  const info = runInfo(
    opts.command ?? `npm run bench -- replicas --saturation${quick ? ' --quick' : ''}`,
    quick,
  );
  const concurrency = quick ? 16 : 64;
  const count = quick ? 300 : 3000;
  const warmPerReplica = quick ? 100 : 4500;
  const rounds = quick ? 1 : 3;
  const workers = 2;
  const build = buildRouter();
  const sims: SimulatorProcess[] = [];
  const totals = ARMS.map(() => ({
    requests: 0,
    completed: 0,
    errors: 0,
    firstError: undefined as string | undefined,
    wallMs: 0,
    latencies: [] as number[],
    routerCpuMs: 0,
    replicaCpuMs: [] as number[],
    envoyCpuMs: 0,
    workersCpuMs: 0,
    clientCpuMs: 0,
  }));
  try {
    for (let i = 0; i < workers; i++) sims.push(await startSimulatorProcess(SIM_ARGS));
    const workerArgs = sims.flatMap((s) => ['--worker', s.url]);
    for (let round = 0; round < rounds; round++) {
      for (let a = 0; a < ARMS.length; a++) {
        const arm = ARMS[a]!;
        const t = totals[a]!;
        const routers: RouterProcess[] = [];
        let envoy: EnvoyHandle | undefined;
        try {
          for (const cpus of arm.cores) {
            routers.push(await startRouterProcess(workerArgs, [], build.script, cpus));
          }
          envoy = await startEnvoy({
            routers: routers.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
            routerHealthCheck: true,
          });
          const baseUrl = `http://127.0.0.1:${envoy.listenerPort}`;
          const warm = smallRequests(warmPerReplica * routers.length, 100 + round);
          await runClosedLoop({ baseUrl, requests: warm, concurrency });
          const requests = smallRequests(count, 1 + round);
          const envoyPid = envoy.process.pid!;
          const r0 = routers.map((r) => r.cpuMs());
          const e0 = procCpuMs(envoyPid);
          const w0 = sims.reduce((n, s) => n + s.cpuMs(), 0);
          const c0 = process.cpuUsage();
          const run = await runClosedLoop({
            baseUrl,
            requests,
            concurrency,
            maxDurationMs: quick ? 60_000 : 120_000,
          });
          const c1 = process.cpuUsage(c0);
          const replicaCpu = routers.map((r, i) => r.cpuMs() - r0[i]!);
          t.envoyCpuMs += procCpuMs(envoyPid) - e0;
          t.workersCpuMs += sims.reduce((n, s) => n + s.cpuMs(), 0) - w0;
          t.clientCpuMs += (c1.user + c1.system) / 1000;
          replicaCpu.forEach((ms, i) => (t.replicaCpuMs[i] = (t.replicaCpuMs[i] ?? 0) + ms));
          t.routerCpuMs += replicaCpu.reduce((x, y) => x + y, 0);
          t.requests += requests.length;
          t.wallMs += run.wallMs;
          let completed = 0;
          for (const res of run.results) {
            if (res === undefined) continue;
            if (res.status === 200 && res.error === undefined) {
              completed += 1;
              t.latencies.push(res.latencyMs);
            } else {
              t.errors += 1;
              t.firstError ??= res.error ?? `HTTP ${res.status}`;
            }
          }
          t.completed += completed;
          log(
            `replicas saturation round ${round + 1} ${arm.label}: ${((completed / run.wallMs) * 1000).toFixed(0)} req/s, ` +
              `router cpu ${replicaCpu.map((ms) => ms.toFixed(0)).join('+')} ms over ${completed} requests`,
          );
        } finally {
          await envoy?.close();
          await Promise.all(routers.map((r) => r.close()));
        }
      }
    }
  } finally {
    await Promise.all(sims.map((s) => s.close()));
  }
  const cores = info.cores;
  const arms: SaturationArm[] = ARMS.map((arm, a) => {
    const t = totals[a]!;
    const n = Math.max(1, t.completed);
    const us = (ms: number): number => round((ms * 1000) / n);
    return {
      label: arm.label,
      replicas: arm.cores.length,
      cores: [...arm.cores],
      requests: t.requests,
      completed: t.completed,
      errors: t.errors,
      ...(t.firstError !== undefined ? { firstError: t.firstError } : {}),
      wallMs: Math.round(t.wallMs),
      reqPerSec: Math.round((t.completed / t.wallMs) * 1000),
      latencyP50Ms: round(percentile(t.latencies, 50)),
      latencyP99Ms: round(percentile(t.latencies, 99)),
      routerCpuMs: round(t.routerCpuMs),
      routerCpuPerRequestUs: us(t.routerCpuMs),
      replicaCpuMs: t.replicaCpuMs.map((ms) => Math.round(ms)),
      envoyCpuPerRequestUs: us(t.envoyCpuMs),
      workersCpuPerRequestUs: us(t.workersCpuMs),
      clientCpuPerRequestUs: us(t.clientCpuMs),
      hostBusy: round((t.routerCpuMs + t.envoyCpuMs + t.workersCpuMs + t.clientCpuMs) / (t.wallMs * cores)),
    };
  });
  const [one, two] = arms as [SaturationArm, SaturationArm];
  return {
    benchmark: 'replica-saturation',
    info,
    setup: {
      concurrency,
      requestsPerRound: count,
      warmupPerReplica: warmPerReplica,
      rounds,
      workers,
      simulator: 'child processes: 5 ms fixed service time, no prefill cost, no slot limit; unpinned',
      request: '/v1/completions, 64-token unique prompt, max_tokens 1, not streamed',
      envoy:
        'envoy/envoy.yaml, the replicas as STATIC endpoints with gRPC health checks (both arms), --concurrency 2, unpinned',
      router: `child process \`taskset -c <core> node ${build.script}\`, default config (cache_aware), both workers static`,
    },
    arms,
    throughputRatio: round(two.reqPerSec / one.reqPerSec),
    routerCpuPerRequestRatio: round(two.routerCpuPerRequestUs / one.routerCpuPerRequestUs),
  };
}
