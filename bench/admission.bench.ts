/**
 * Batch traffic floods a saturated fleet while interactive users chat: what shedding the batch
 * requests (their objective has a negative priority, `--objective batch=-1`) does to the interactive
 * requests' time to first token, and what it costs the batch traffic. Prints one JSON object to
 * stdout (progress on stderr).
 *
 *   npx tsx bench/admission.bench.ts                 2 interleaved runs per arm (~1 min)
 *   --repeats 2 --requests 300 --batch-concurrency 64 --interactive-concurrency 8 --backoff-ms 100
 *   --saturation-waiting 5 (the router's --saturation-waiting)
 *
 * Stack: 4 simulated workers in this process (the routing benchmark's timing, but at most 8 sequences
 * running per worker, so a flood queues as on a full vLLM), the router in this process with its
 * defaults (metrics scraped every 100 ms), real Envoy. Clients, all through Envoy, streamed:
 * - batch: `--batch-concurrency` closed-loop clients sending `x-gateway-inference-objective: batch`,
 *   512-token prompts, 64 output tokens; a client whose request is shed (429) waits `--backoff-ms`
 *   and sends again, as a batch processor backs off;
 * - interactive: `--interactive-concurrency` closed-loop clients sending
 *   `x-gateway-inference-objective: interactive` (priority 0 unless an arm configures it),
 *   256-token prompts, 16 output tokens, `--requests` in all; the run ends when they are done.
 * Arms: `no_shedding` (no objective configured: batch has priority 0), `shedding`
 * (`--objective batch=-1`), `flow_control` (the same and `--flow-control`: requests wait in the
 * router while the fleet is saturated, interactive ones first), `worker_priority` (workers as vLLM
 * `--scheduling-policy priority`, the router with `--objective interactive=1 --forward-priority`: no
 * request is shed or held, the workers' queues serve interactive requests first),
 * `shedding_worker_priority` (both: `--objective batch=-1 --objective interactive=1
 * --forward-priority`) and `flow_control_worker_priority` (the same and `--flow-control`). Per run:
 * interactive time to first token (p50 / p90 / p99) and output tokens/s, batch requests completed per
 * second and shed. `--arms a,b` runs only those (and no_shedding, the baseline).
 */
import { startEnvoy, type EnvoyHandle } from '../src/envoy/envoy-process.js';
import { loopbackConfig } from '../src/config.js';
import { startRouter, type Router } from '../src/router.js';
import { startCluster, type SimulatorCluster } from '../src/sim/cluster.js';
import { pino } from 'pino';
import { TIMING } from './routing-bench.js';
import { numericFlag } from './numeric-flag.js';
import { armMean, quantile, runInterleaved } from './arm-runs.js';

const repeats = numericFlag('repeats', 2);
const requests = numericFlag('requests', 300);
const batchConcurrency = numericFlag('batch-concurrency', 64);
const interactiveConcurrency = numericFlag('interactive-concurrency', 8);
const backoffMs = numericFlag('backoff-ms', 100);
const saturationWaiting = numericFlag('saturation-waiting', 5);
const WORKERS = 4;
const log = (m: string): void => void process.stderr.write(`${m}\n`);
const BATCH_PROMPT = 'summarise this archived record for the nightly report '.repeat(52);
const CHAT_PROMPT = 'a user asks a short question about the service '.repeat(28);

/** Per arm: the router's objectives, flow control, and priority passed to priority-scheduling workers. */
const ARM_SETUP = {
  no_shedding: { objective: [], flowControl: false, forwardPriority: false },
  shedding: { objective: ['batch=-1'], flowControl: false, forwardPriority: false },
  flow_control: { objective: ['batch=-1'], flowControl: true, forwardPriority: false },
  worker_priority: { objective: ['interactive=1'], flowControl: false, forwardPriority: true },
  shedding_worker_priority: {
    objective: ['batch=-1', 'interactive=1'],
    flowControl: false,
    forwardPriority: true,
  },
  flow_control_worker_priority: {
    objective: ['batch=-1', 'interactive=1'],
    flowControl: true,
    forwardPriority: true,
  },
} as const;
type Arm = keyof typeof ARM_SETUP;
const armsAt = process.argv.indexOf('--arms');
const armsFlag = armsAt === -1 ? undefined : process.argv[armsAt + 1];
const ARMS = (armsFlag?.split(',') ?? Object.keys(ARM_SETUP)) as Arm[];
for (const a of ARMS)
  if (!(a in ARM_SETUP)) throw new Error(`unknown arm ${a}: ${Object.keys(ARM_SETUP).join(', ')}`);
if (!ARMS.includes('no_shedding')) ARMS.unshift('no_shedding'); // every ratio is against it

interface RunResult {
  arm: Arm;
  run: number;
  seconds: number;
  interactive: { done: number; errors: number; ttftP50Ms: number; ttftP90Ms: number; ttftP99Ms: number };
  interactiveTokensPerS: number;
  batch: { completedPerS: number; shed: number; errors: number };
}

/** Sends one streamed completion; resolves with its status and time to first token (ms, 200 only). */
async function send(
  url: string,
  prompt: string,
  maxTokens: number,
  objective: string | undefined,
): Promise<{ status: number; ttftMs?: number; tokens: number }> {
  const started = performance.now();
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(objective === undefined ? {} : { 'x-gateway-inference-objective': objective }),
    },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: maxTokens, stream: true }),
  });
  if (res.status !== 200 || res.body === null) {
    await res.text();
    return { status: res.status, tokens: 0 };
  }
  let ttftMs: number | undefined;
  let tokens = 0;
  const decoder = new TextDecoder();
  for await (const chunk of res.body) {
    const text = decoder.decode(chunk as Uint8Array, { stream: true });
    const frames = text.split('data: ').length - 1;
    if (frames > 0 && ttftMs === undefined) ttftMs = performance.now() - started;
    tokens += frames;
  }
  return { status: 200, tokens: Math.max(0, tokens - 1), ...(ttftMs !== undefined ? { ttftMs } : {}) };
}

async function runOnce(arm: Arm, run: number): Promise<RunResult> {
  let cluster: SimulatorCluster | undefined;
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    const setup = ARM_SETUP[arm];
    cluster = await startCluster(WORKERS, {
      timing: { ...TIMING, maxRunningSeqs: 8 },
      ...(setup.forwardPriority ? { schedulingPolicy: 'priority' as const } : {}),
    });
    router = await startRouter(
      Object.freeze(
        loopbackConfig({
          workers: cluster.sims.map((s) => s.url),
          objective: [...setup.objective],
          flowControl: setup.flowControl,
          forwardPriority: setup.forwardPriority,
          saturationWaiting,
          logLevel: 'error',
        }),
      ),
      { logger: pino({ level: 'error' }) },
    );
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    const url = `http://127.0.0.1:${envoy.listenerPort}/v1/completions`;
    let stop = false;
    let batchDone = 0;
    let batchShed = 0;
    let batchErrors = 0;
    const batch = Array.from({ length: batchConcurrency }, async (_, c) => {
      for (let i = 0; !stop; i++) {
        try {
          const r = await send(url, `${c}.${i} ${BATCH_PROMPT}`, 64, 'batch');
          if (r.status === 200) batchDone += 1;
          else if (r.status === 429) {
            batchShed += 1;
            await new Promise((resolve) => setTimeout(resolve, backoffMs));
          } else batchErrors += 1;
        } catch {
          batchErrors += 1;
        }
      }
    });
    // Let the flood fill the workers' queues before the interactive users arrive.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const started = performance.now();
    const ttfts: number[] = [];
    let next = 0;
    let errors = 0;
    let tokens = 0;
    await Promise.all(
      Array.from({ length: interactiveConcurrency }, async () => {
        while (next < requests) {
          const i = next++;
          try {
            const r = await send(url, `${i} ${CHAT_PROMPT}`, 16, 'interactive');
            if (r.status === 200 && r.ttftMs !== undefined) {
              ttfts.push(r.ttftMs);
              tokens += r.tokens;
            } else errors += 1;
          } catch {
            errors += 1;
          }
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const batchAtEnd = batchDone;
    stop = true;
    await Promise.all(batch);
    ttfts.sort((a, b) => a - b);
    return {
      arm,
      run,
      seconds: Math.round(seconds * 10) / 10,
      interactive: {
        done: ttfts.length,
        errors,
        ttftP50Ms: quantile(ttfts, 0.5),
        ttftP90Ms: quantile(ttfts, 0.9),
        ttftP99Ms: quantile(ttfts, 0.99),
      },
      interactiveTokensPerS: Math.round(tokens / seconds),
      batch: {
        completedPerS: Math.round((batchAtEnd / seconds) * 10) / 10,
        shed: batchShed,
        errors: batchErrors,
      },
    };
  } finally {
    await envoy?.close();
    await router?.close();
    await cluster?.close();
  }
}

async function main(): Promise<void> {
  const runs = await runInterleaved(ARMS, repeats, runOnce, log);
  const mean = (arm: Arm, f: (x: RunResult) => number): number => armMean(runs, arm, f);
  const summary = Object.fromEntries(
    ARMS.map((arm) => [
      arm,
      {
        interactiveTtftP50Ms: mean(arm, (x) => x.interactive.ttftP50Ms),
        interactiveTtftP90Ms: mean(arm, (x) => x.interactive.ttftP90Ms),
        interactiveTokensPerS: mean(arm, (x) => x.interactiveTokensPerS),
        batchCompletedPerS: mean(arm, (x) => x.batch.completedPerS),
      },
    ]),
  );
  const ratio = (arm: Arm, k: keyof (typeof summary)['no_shedding']): number =>
    Math.round((summary[arm]![k] / summary.no_shedding![k]) * 1000) / 1000;
  const vsNone = (arm: Arm) => ({
    interactiveTtftP50: ratio(arm, 'interactiveTtftP50Ms'),
    interactiveTtftP90: ratio(arm, 'interactiveTtftP90Ms'),
    interactiveTokensPerS: ratio(arm, 'interactiveTokensPerS'),
    batchCompletedPerS: ratio(arm, 'batchCompletedPerS'),
  });
  process.stdout.write(
    `${JSON.stringify(
      {
        requests,
        batchConcurrency,
        interactiveConcurrency,
        backoffMs,
        saturationWaiting,
        repeats,
        summary,
        vsNoShedding: Object.fromEntries(ARMS.filter((a) => a !== 'no_shedding').map((a) => [a, vsNone(a)])),
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
