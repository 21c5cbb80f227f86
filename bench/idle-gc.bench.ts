/**
 * What an idle spell costs the next large bodies: router CPU per 220 KB prompt in rounds that each
 * follow an idle pause, with and without the node flags every launch path uses
 * (src/runtime/node-flags.ts). Prints one JSON object to stdout.
 *
 *   npx tsx bench/idle-gc.bench.ts                       4 rounds of 400 prompts, 30 s idle before each
 *   --rounds 2 --idle-seconds 20 --prompts 400
 *
 * Per configuration (without the flags, then with them): one simulator (the overhead benchmark's), the
 * router (its own compiled process) and Envoy; the overhead benchmark's process warm-up (4,500 small
 * requests, 800 220 KB prompts at concurrency 16); then each round sleeps, sends the prompts at
 * concurrency 16 through Envoy and reads the router's and Envoy's utime + stime from /proc. V8 sizes
 * the heap for an idle process during the pause; without the flags the first rounds after it spend up
 * to twice the CPU in garbage collection (docs/benchmarks.md, Analysis, 2026-12-02 14:09).
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the two configurations of one run.
 */
import { startEnvoy } from '../src/envoy/envoy-process.js';
import { buildRouter, procCpuMs, startRouterProcess, startSimulatorProcess } from './bench-stack.js';
import { runClosedLoop } from './drivers.js';
import { PROCESS_WARMUP, requestsFor, SIM_ARGS } from './overhead-bench.js';
import { numericFlag } from './numeric-flag.js';

const rounds = numericFlag('rounds', 4);
const idleSeconds = numericFlag('idle-seconds', 30);
const prompts = numericFlag('prompts', 400);
const CONCURRENCY = PROCESS_WARMUP.concurrency;

interface Round {
  routerCpuUsPerRequest: number;
  envoyCpuUsPerRequest: number;
  errors: number;
}

async function measure(productionFlags: boolean, script: string): Promise<Round[]> {
  const sim = await startSimulatorProcess(SIM_ARGS);
  const router = await startRouterProcess(['--worker', sim.url], [], script, undefined, productionFlags);
  const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  try {
    const baseUrl = `http://127.0.0.1:${envoy.listenerPort}`;
    const envoyPid = envoy.process.pid!;
    // The overhead benchmark's process warm-up: V8 has compiled the router's paths before round 1.
    const w = PROCESS_WARMUP;
    for (const [scenario, count] of [
      ['small', w.small],
      ['long-prompt', w.longPrompt],
    ] as const) {
      const requests = requestsFor(scenario, count, false, w.seed);
      await runClosedLoop({ baseUrl, requests, concurrency: w.concurrency });
    }
    const out: Round[] = [];
    for (let i = 0; i < rounds; i++) {
      await new Promise((r) => setTimeout(r, idleSeconds * 1000));
      const requests = requestsFor('long-prompt', prompts, false, 100 + i);
      const router0 = router.cpuMs();
      const envoy0 = procCpuMs(envoyPid);
      const res = await runClosedLoop({ baseUrl, requests, concurrency: CONCURRENCY });
      out.push({
        routerCpuUsPerRequest: Math.round(((router.cpuMs() - router0) / requests.length) * 1000),
        envoyCpuUsPerRequest: Math.round(((procCpuMs(envoyPid) - envoy0) / requests.length) * 1000),
        errors: res.results.filter((r) => !r || r.error !== undefined).length,
      });
    }
    return out;
  } finally {
    await envoy.close();
    await router.close();
    await sim.close();
  }
}

const { script } = buildRouter();
const withoutFlags = await measure(false, script);
const withFlags = await measure(true, script);
process.stdout.write(
  `${JSON.stringify({ benchmark: 'idle-gc', rounds, idleSeconds, prompts, withoutFlags, withFlags }, null, 2)}\n`,
);
