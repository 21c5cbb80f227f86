/**
 * vLLM's sleep mode under load: what clients see while workers are put to sleep and woken. Prints one
 * JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/sleep-mode.bench.ts      three arms, one run each (~40 s)
 *   --clients 16 --sleeps 12 --asleep-ms 500 --gap-ms 300
 *
 * Stack: 4 simulated workers in this process (real pacing: 5 ms per token), the router in this
 * process with its defaults (cache_aware, /metrics scraped every 100 ms), real Envoy. `--clients`
 * closed-loop clients send short completions (8 tokens) through Envoy for the whole run. Meanwhile the
 * workers are put to sleep one after the other (`--sleeps` times, each `--asleep-ms` long, `--gap-ms`
 * apart) and woken. A simulator answers a request that reaches it asleep with a 503 and counts it
 * (vLLM crashes its engine on most releases).
 * Arms:
 *   - `unaware`: sleeps behind the router's back, and the router does not read the sleep gauge
 *     (`--metric-sleep-state ''`: the router before 2026-12-06);
 *   - `gauge`: sleeps behind the router's back; the router reads `vllm:engine_sleep_state`;
 *   - `admin`: sleeps through the router's `POST /workers/sleep` (cordon, drain, sleep) and
 *     `POST /workers/wake_up`.
 * Per arm: requests sent, failed (any status but 200, by status and message), and the requests that
 * reached a sleeping worker.
 */
import { pino } from 'pino';
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import { startRouter, type Router } from '../src/router.js';
import { startSimulator, type Simulator } from '../src/sim/simulator.js';
import { benchRouterConfig } from './bench-stack.js';
import { numericFlag } from './numeric-flag.js';

const clients = numericFlag('clients', 16);
const sleeps = numericFlag('sleeps', 12);
const asleepMs = numericFlag('asleep-ms', 500);
const gapMs = numericFlag('gap-ms', 300);
const WORKERS = 4;
const log = (m: string): void => void process.stderr.write(`${m}\n`);
const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

type Arm = 'unaware' | 'gauge' | 'admin';
const ARMS: readonly Arm[] = ['unaware', 'gauge', 'admin'];

interface ArmResult {
  arm: Arm;
  sleeps: number;
  sent: number;
  failed: number;
  failedShare: number;
  reachedAsleep: number;
  failures: Record<string, number>;
}

async function runArm(arm: Arm): Promise<ArmResult> {
  const sims: Simulator[] = [];
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    for (let i = 0; i < WORKERS; i++) {
      sims.push(await startSimulator({ timing: { baseItlMs: 5, overheadMs: 1 } }));
    }
    router = await startRouter(
      Object.freeze(
        benchRouterConfig({
          workers: sims.map((s) => s.url),
          ...(arm === 'unaware' ? { metricSleepState: '' } : {}),
        }),
      ),
      { logger: pino({ level: 'silent' }) },
    );
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    const url = `http://127.0.0.1:${envoy.listenerPort}/v1/completions`;
    const admin = (op: string, sim: Simulator): Promise<Response> =>
      fetch(`http://127.0.0.1:${router!.adminPort}/workers/${op}?url=${encodeURIComponent(sim.url)}`, {
        method: 'POST',
      });
    let stop = false;
    let sent = 0;
    const failures: Record<string, number> = {};
    const load = Array.from({ length: clients }, async (_, c) => {
      for (let i = 0; !stop; i++) {
        sent += 1;
        let key: string | undefined;
        try {
          const res = await fetch(url, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              model: 'sim-model',
              prompt: `client ${c} request ${i} ${'x'.repeat(200)}`,
              max_tokens: 8,
            }),
          });
          const text = await res.text();
          if (res.status !== 200) {
            key = `${res.status} ${(/"message":"([^"]*)"/.exec(text)?.[1] ?? text).slice(0, 60)}`;
          }
        } catch (err) {
          key = `no status: ${(err as Error).message}`;
        }
        if (key !== undefined) failures[key] = (failures[key] ?? 0) + 1;
      }
    });
    let done = 0;
    for (let k = 0; k < sleeps; k++) {
      await pause(gapMs);
      const sim = sims[k % WORKERS]!;
      if (arm === 'admin') {
        const res = await admin('sleep', sim);
        await res.text();
        if (res.status !== 200) throw new Error(`admin sleep: status ${res.status}`);
      } else await sim.sleep();
      done += 1;
      await pause(asleepMs);
      if (arm === 'admin') await (await admin('wake_up', sim)).text();
      else sim.wakeUp();
    }
    stop = true;
    await Promise.all(load);
    const failed = Object.values(failures).reduce((a, b) => a + b, 0);
    return {
      arm,
      sleeps: done,
      sent,
      failed,
      failedShare: Math.round((failed / Math.max(1, sent)) * 1000) / 1000,
      reachedAsleep: sims.reduce((n, s) => n + s.requestsWhileAsleep, 0),
      failures,
    };
  } finally {
    await envoy?.close();
    await router?.close();
    await Promise.all(sims.map((s) => s.close()));
  }
}

const results: ArmResult[] = [];
for (const arm of ARMS) {
  log(`arm ${arm} ...`);
  const r = await runArm(arm);
  log(
    `  sent ${r.sent}, failed ${r.failed} (${r.failedShare}), reached a sleeping worker ${r.reachedAsleep}`,
  );
  results.push(r);
}
process.stdout.write(
  `${JSON.stringify({ clients, sleeps, asleepMs, gapMs, workers: WORKERS, results }, null, 2)}\n`,
);
