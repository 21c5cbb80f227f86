/**
 * Selective disaggregation (`--pd-local-prefill-tokens`): short prompts skip the prefill leg and are
 * prefilled by their decode worker, so they no longer wait behind long prompts in the prefill
 * worker's queue. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/pd-local-prefill.bench.ts      2 interleaved runs per arm (~1 min)
 *   --repeats 2 --requests 200 --long-clients 4 --short-clients 4 --threshold 256
 *
 * Stack: 1 prefill and 1 decode simulator in this process (the routing benchmark's timing: one
 * prefill lane, prefill compute stalling the decode steps beside it; the decode worker started as
 * vLLM's `kv_both`, so it prefills a request without KV-transfer parameters itself), the router in
 * this process in P/D mode (NIXL, sequential), real Envoy. Clients, all through Envoy, streamed chat:
 * `--long-clients` closed-loop clients with 4,096-token prompts and `--short-clients` closed-loop
 * clients with 64-token prompts, 16 output tokens each; the run ends when the short clients have sent
 * `--requests`. Arms: `off` (every request disaggregated) and `local` (`--pd-local-prefill-tokens
 * --threshold`). Per run: the short and long requests' time to first token (p50 / p90) and the long
 * requests completed per second.
 */
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import { startRouter, type Router } from '../src/router.js';
import { startSimulator, type Simulator } from '../src/sim/simulator.js';
import { pino } from 'pino';
import { benchRouterConfig } from './bench-stack.js';
import { TIMING } from './routing-bench.js';
import { numericFlag } from './numeric-flag.js';
import { armMean, quantile, runInterleaved } from './arm-runs.js';

const repeats = numericFlag('repeats', 2);
const requests = numericFlag('requests', 200);
const longClients = numericFlag('long-clients', 4);
const shortClients = numericFlag('short-clients', 4);
const threshold = numericFlag('threshold', 256);
const log = (m: string): void => void process.stderr.write(`${m}\n`);
// ~4 characters per token in the simulator.
const LONG = 'the quarterly report lists every shipment, its route and its cost. '.repeat(244);
const SHORT = 'what is the status of order number ';

type Arm = 'off' | 'local';
const ARMS: readonly Arm[] = ['off', 'local'];

interface RunResult {
  arm: Arm;
  run: number;
  seconds: number;
  short: { done: number; ttftP50Ms: number; ttftP90Ms: number };
  long: { done: number; ttftP50Ms: number; completedPerS: number };
  errors: number;
}

/** One streamed chat; its time to first token (ms). */
async function chat(url: string, content: string): Promise<number> {
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: 16, stream: true }),
  });
  if (res.status !== 200 || res.body === null) throw new Error(`status ${res.status}: ${await res.text()}`);
  let ttft = 0;
  for await (const chunk of res.body) {
    if (ttft === 0 && Buffer.from(chunk as Uint8Array).includes('data: {'))
      ttft = performance.now() - started;
  }
  return ttft;
}

async function runOnce(arm: Arm, run: number): Promise<RunResult> {
  const sims: Simulator[] = [];
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    sims.push(await startSimulator({ role: 'prefill', timing: TIMING }));
    sims.push(await startSimulator({ role: 'decode', kvBoth: true, timing: TIMING }));
    router = await startRouter(
      Object.freeze(
        benchRouterConfig({
          mode: 'pd',
          prefill: [sims[0]!.url],
          decode: [sims[1]!.url],
          pdLocalPrefillTokens: arm === 'local' ? threshold : 0,
        }),
      ),
      { logger: pino({ level: 'silent' }) },
    );
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    const url = `http://127.0.0.1:${envoy.listenerPort}/v1/chat/completions`;
    let stop = false;
    let errors = 0;
    const longTtfts: number[] = [];
    let longAtEnd = 0;
    const longs = Array.from({ length: longClients }, async (_, c) => {
      for (let i = 0; !stop; i++) {
        try {
          longTtfts.push(await chat(url, `${run}.${c}.${i} ${LONG}`));
        } catch {
          errors += 1;
        }
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 1000)); // the long prompts fill the prefill queue
    const started = performance.now();
    const longBefore = longTtfts.length;
    const shortTtfts: number[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: shortClients }, async () => {
        while (next < requests) {
          const i = next++;
          try {
            shortTtfts.push(await chat(url, `${SHORT}${run}-${i}?`));
          } catch {
            errors += 1;
          }
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    longAtEnd = longTtfts.length - longBefore;
    stop = true;
    await Promise.all(longs);
    shortTtfts.sort((a, b) => a - b);
    const longSorted = [...longTtfts].sort((a, b) => a - b);
    return {
      arm,
      run,
      seconds: Math.round(seconds * 10) / 10,
      short: {
        done: shortTtfts.length,
        ttftP50Ms: quantile(shortTtfts, 0.5),
        ttftP90Ms: quantile(shortTtfts, 0.9),
      },
      long: {
        done: longAtEnd,
        ttftP50Ms: quantile(longSorted, 0.5),
        completedPerS: Math.round((longAtEnd / seconds) * 10) / 10,
      },
      errors,
    };
  } finally {
    await envoy?.close();
    await router?.close();
    await Promise.all(sims.map((s) => s.close()));
  }
}

async function main(): Promise<void> {
  const runs = await runInterleaved(ARMS, repeats, runOnce, log);
  const mean = (arm: Arm, f: (x: RunResult) => number): number => armMean(runs, arm, f);
  const summary = Object.fromEntries(
    ARMS.map((arm) => [
      arm,
      {
        shortTtftP50Ms: mean(arm, (x) => x.short.ttftP50Ms),
        shortTtftP90Ms: mean(arm, (x) => x.short.ttftP90Ms),
        longTtftP50Ms: mean(arm, (x) => x.long.ttftP50Ms),
        longCompletedPerS: mean(arm, (x) => x.long.completedPerS),
      },
    ]),
  ) as unknown as Record<Arm, Record<string, number>>;
  const ratio = (k: string): number => Math.round((summary.local[k]! / summary.off[k]!) * 1000) / 1000;
  process.stdout.write(
    `${JSON.stringify(
      {
        requests,
        longClients,
        shortClients,
        threshold,
        repeats,
        summary,
        localVsOff: Object.fromEntries(Object.keys(summary.off).map((k) => [k, ratio(k)])),
        runs,
      },
      null,
      2,
    )}\n`,
  );
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    log(String((err as Error).stack ?? err));
    process.exit(1);
  },
);
