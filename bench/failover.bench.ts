/**
 * A worker crashes under load: how many requests fail with the reference Envoy config (ORIGINAL_DST,
 * one endpoint per request), and with fallback endpoints (Envoy's override_host policy, one retry on
 * `connect-failure,refused-stream,reset-before-request`, the router's `--fallback-endpoints 1`).
 * Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/failover.bench.ts                      3 interleaved runs per arm (~1 min)
 *   --repeats 3 --requests 1200 --concurrency 16 --scrape-ms 100
 *
 * Stack: 4 simulated workers in this process (the routing benchmark's timing, 512-token prompts, 16
 * output tokens, not streamed), the router in this process with its defaults (every worker's
 * metrics scraped every 100 ms, or `--scrape-ms`; health checks every 10 s; the circuit breaker),
 * real Envoy. Once a
 * third of the requests have completed, worker 0 is closed: it stops listening and resets its open
 * connections, as a crashed vLLM process does, and the router is not told. Per run: requests that
 * failed, split into those sent before the crash (in flight on the crashed worker: no configuration
 * saves a request the worker had started) and after it, and when the last failure after the crash
 * was sent (ms after the crash).
 */
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import { loopbackConfig } from '../src/config.js';
import { startRouter, type Router } from '../src/router.js';
import { startCluster, type SimulatorCluster } from '../src/sim/cluster.js';
import { pino } from 'pino';
import { TIMING } from './routing-bench.js';
import { numericFlag } from './numeric-flag.js';

const repeats = numericFlag('repeats', 3);
const requests = numericFlag('requests', 1200);
const concurrency = numericFlag('concurrency', 16);
const scrapeMs = numericFlag('scrape-ms', 100);
const WORKERS = 4;
const log = (m: string): void => void process.stderr.write(`${m}\n`);
const PROMPT = 'the fleet keeps serving while one worker goes away '.repeat(40);

type Arm = 'original_dst' | 'fallback_endpoints';

interface RunResult {
  arm: Arm;
  run: number;
  ok: number;
  failedBeforeCrash: number;
  failedAfterCrash: number;
  /** Send time of the last request sent after the crash that failed, ms after the crash. */
  lastFailureAfterCrashMs: number | null;
  failovers: number;
}

async function runOnce(arm: Arm, run: number): Promise<RunResult> {
  let cluster: SimulatorCluster | undefined;
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    cluster = await startCluster(WORKERS, { timing: TIMING });
    const sims = cluster.sims;
    router = await startRouter(
      Object.freeze(
        loopbackConfig({
          workers: sims.map((s) => s.url),
          fallbackEndpoints: arm === 'fallback_endpoints' ? 1 : 0,
          scrapeIntervalMs: scrapeMs,
          logLevel: 'error',
        }),
      ),
      { logger: pino({ level: 'error' }) },
    );
    envoy = await startEnvoy({
      routers: [{ host: '127.0.0.1', port: router.grpcPort }],
      ...(arm === 'fallback_endpoints'
        ? { fallback: { workers: sims.map((s) => ({ host: '127.0.0.1', port: s.port })), retries: 1 } }
        : {}),
    });
    const url = `http://127.0.0.1:${envoy.listenerPort}/v1/completions`;
    let next = 0;
    let done = 0;
    let crashAt: number | undefined;
    const failures: number[] = []; // send times of failed requests
    let ok = 0;
    const crashed = sims[0]!;
    const one = async (i: number): Promise<void> => {
      const sentAt = performance.now();
      try {
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-model', prompt: `${i} ${PROMPT}`, max_tokens: 16 }),
        });
        await res.text();
        if (res.status === 200) ok += 1;
        else failures.push(sentAt);
      } catch {
        failures.push(sentAt);
      }
      done += 1;
      if (crashAt === undefined && done >= Math.floor(requests / 3)) {
        crashAt = performance.now();
        void crashed.close();
      }
    };
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < requests) await one(next++);
      }),
    );
    const at = crashAt ?? Infinity;
    const after = failures.filter((t) => t >= at);
    const metrics = await (await fetch(`http://127.0.0.1:${router.adminPort}/metrics`)).text();
    const failovers = [...metrics.matchAll(/^vllm_router_failovers_total\{[^}]*\} (\d+)/gm)].reduce(
      (sum, m) => sum + Number(m[1]),
      0,
    );
    return {
      arm,
      run,
      ok,
      failedBeforeCrash: failures.length - after.length,
      failedAfterCrash: after.length,
      lastFailureAfterCrashMs: after.length > 0 ? Math.round(Math.max(...after) - at) : null,
      failovers,
    };
  } finally {
    await envoy?.close();
    await router?.close();
    await cluster?.close();
  }
}

async function main(): Promise<void> {
  const runs: RunResult[] = [];
  for (let r = 1; r <= repeats; r++) {
    for (const arm of ['original_dst', 'fallback_endpoints'] as const) {
      const res = await runOnce(arm, r);
      log(JSON.stringify(res));
      runs.push(res);
    }
  }
  const sum = (arm: Arm, k: 'failedBeforeCrash' | 'failedAfterCrash' | 'ok') =>
    runs.filter((x) => x.arm === arm).reduce((a, x) => a + x[k], 0);
  const summary = Object.fromEntries(
    (['original_dst', 'fallback_endpoints'] as const).map((arm) => [
      arm,
      {
        requests: requests * repeats,
        ok: sum(arm, 'ok'),
        failedBeforeCrash: sum(arm, 'failedBeforeCrash'),
        failedAfterCrash: sum(arm, 'failedAfterCrash'),
      },
    ]),
  );
  process.stdout.write(
    `${JSON.stringify({ requests, concurrency, scrapeMs, repeats, summary, runs }, null, 2)}\n`,
  );
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    log(String((err as Error).stack ?? err));
    process.exit(1);
  },
);
