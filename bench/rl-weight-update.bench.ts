/**
 * An RL trainer's rolling weight update under rollout traffic: what the rollouts see while the engines
 * are paused one after the other (`POST /pause?mode=keep`, the new weights loaded for `--update-ms`,
 * `POST /resume`), as asynchronous RL trainers update a fleet without stopping it. Prints one JSON
 * object to stdout (progress on stderr).
 *
 *   npx tsx bench/rl-weight-update.bench.ts      2 interleaved runs per variant (~3 min)
 *   --repeats 2 --sessions 32 --turns 8 --update-ms 400 --gap-ms 100
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING; 8 simulated workers with
 * 1024-block prefix caches), this router compiled in its own process behind real Envoy. `--sessions`
 * rollout clients at once, each sending `--turns` streamed chat requests one after the other: one of
 * 4 task prompts (~1,000 tokens) and a question of its own (~200 tokens), 64 output tokens.
 * Meanwhile the trainer pauses each worker in turn (`mode=keep`: vLLM holds the requests that arrive
 * until resume), `--update-ms` long, `--gap-ms` apart, from 300 ms after the clients start until they
 * are done. Variants:
 *   - `... pauses sent to each engine`: the trainer calls each worker's own /pause and /resume; the
 *     router reads each worker's /is_paused every second (`--pause-poll-ms`, health/pause-poller.ts)
 *     and sees the held requests as waiting on its scraped /metrics; `not polled`: the scrape only
 *     (`--pause-poll-ms 0`, the router before the poller);
 *   - `... pauses through the router`: the trainer sends them through Envoy with `worker_url=` (the
 *     router's fleet control, routing/fleet-control.ts): the router knows the worker is paused;
 *     `x2 replicas`: two router replicas behind Envoy (envoy-replicas.yaml's balancing), of which the
 *     one that forwards a pause knows it at once and the other from its poll;
 *   - `cache_aware, no update`: the same traffic without any pause (the reference).
 * Per variant: output tokens/s, time to first token p50 / p90 / p99 / max, and the requests that
 * reached a paused engine (each waited there for the rest of that engine's update).
 *
 *   npx tsx bench/rl-weight-update.bench.ts --mode sync      synchronous steps (~2 min)
 *   --steps 4 --turns 4 --update-ms 400
 *
 * `--mode sync`: an on-policy trainer's steps. In each of `--steps` steps every client sends `--turns`
 * requests on the same 4 task prompts (an agent's system prompt and tools do not change between
 * steps), then the trainer updates the whole fleet: `POST /pause?mode=wait`, `--update-ms`, `POST
 * /reset_prefix_cache` (the old weights' KV is wrong for the new ones), `POST /resume`, sent to each
 * engine or through the router. Only the router told of the reset forgets the prefixes the workers
 * held. Output tokens/s over the steps' own time (updates left out).
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { runInterleaved } from './arm-runs.js';
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { numericFlag } from './numeric-flag.js';
import { runSessions, SESSION_SIM, streamTurn, type Turn } from './session-cells.js';
import { percentile, round } from './stats.js';
import { mulberry32, wordText } from './workloads.js';
import type { Simulator } from '../src/sim/simulator.js';

const repeats = numericFlag('repeats', 2);
const sessions = numericFlag('sessions', 32);
const updateMs = numericFlag('update-ms', 400);
const gapMs = numericFlag('gap-ms', 100);
const modeAt = process.argv.indexOf('--mode');
const mode = modeAt === -1 ? 'rolling' : process.argv[modeAt + 1];
if (mode !== 'rolling' && mode !== 'sync') throw new Error(`--mode rolling|sync, got ${mode}`);
const steps = numericFlag('steps', 4);
const turns = numericFlag('turns', mode === 'sync' ? 4 : 8);
const WORKERS = 8;
const OUTPUT_TOKENS = 64;
const MODEL = SESSION_SIM.model as string;
const log = (m: string): void => void process.stderr.write(`${m}\n`);
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

const WORDS = 'prove integer sum prime factor equation answer step solve given find value'.split(' ');
const TASKS = Array.from({ length: 4 }, (_, k) =>
  wordText(mulberry32(11 + k), 4_000, `Task family ${k}. Reason step by step, then answer.`, WORDS),
);

type Pauses = 'engine' | 'router' | 'none';
interface Variant {
  readonly label: string;
  readonly policy: 'cache_aware' | 'round_robin';
  readonly pauses: Pauses;
  /** Router options besides the policy. */
  readonly router?: Record<string, unknown>;
  readonly replicas?: 2;
}
const SYNC_VARIANTS: readonly Variant[] = [
  { label: 'cache_aware, update sent to each engine', policy: 'cache_aware', pauses: 'engine' },
  { label: 'cache_aware, update through the router', policy: 'cache_aware', pauses: 'router' },
  { label: 'round_robin, update through the router', policy: 'round_robin', pauses: 'router' },
];
const ROLLING_VARIANTS: readonly Variant[] = [
  {
    label: 'cache_aware, pauses sent to each engine, not polled',
    policy: 'cache_aware',
    pauses: 'engine',
    router: { pausePollMs: 0 },
  },
  { label: 'cache_aware, pauses sent to each engine', policy: 'cache_aware', pauses: 'engine' },
  { label: 'cache_aware, pauses through the router', policy: 'cache_aware', pauses: 'router' },
  {
    label: 'cache_aware x2 replicas, pauses through the router',
    policy: 'cache_aware',
    pauses: 'router',
    replicas: 2,
  },
  { label: 'round_robin, pauses sent to each engine', policy: 'round_robin', pauses: 'engine' },
  { label: 'round_robin, pauses through the router', policy: 'round_robin', pauses: 'router' },
  { label: 'cache_aware, no update', policy: 'cache_aware', pauses: 'none' },
];
const VARIANTS = mode === 'sync' ? SYNC_VARIANTS : ROLLING_VARIANTS;

function traffic(baseUrl: string, seed: number, n: number, t: number, step = 0) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s + step * 100_003);
    const out: Turn[] = [];
    for (let k = 0; k < t; k++) {
      const body = {
        model: MODEL,
        messages: [
          { role: 'system', content: TASKS[Math.floor(rng() * TASKS.length)]! },
          { role: 'user', content: wordText(rng, 800, `Rollout ${seed}.${s} problem ${k}:`, WORDS) },
        ],
        max_tokens: OUTPUT_TOKENS,
        temperature: 1,
        stream: true,
      };
      out.push((await streamTurn(`${baseUrl}/v1/chat/completions`, body, OUTPUT_TOKENS)).turn);
    }
    return out;
  });
}

async function post(url: string): Promise<void> {
  const res = await fetch(url, { method: 'POST' });
  await res.text();
  if (res.status !== 200) throw new Error(`POST ${url}: ${res.status}`);
}

/** Pauses each worker in turn until `done()`; returns how many updates it made. */
async function trainer(pauses: Pauses, envoyUrl: string, sims: readonly Simulator[], done: () => boolean) {
  let updates = 0;
  await sleep(300);
  for (let i = 0; !done(); i++) {
    const sim = sims[i % sims.length]!;
    const target = encodeURIComponent(sim.url);
    const [pause, resume] =
      pauses === 'router'
        ? [`${envoyUrl}/pause?mode=keep&worker_url=${target}`, `${envoyUrl}/resume?worker_url=${target}`]
        : [`${sim.url}/pause?mode=keep`, `${sim.url}/resume`];
    await post(pause);
    await sleep(updateMs);
    await post(resume);
    updates += 1;
    await sleep(gapMs);
  }
  return updates;
}

/** The whole fleet's update between two synchronous steps: pause, new weights, reset, resume. */
async function syncUpdate(pauses: Pauses, envoyUrl: string, sims: readonly Simulator[]): Promise<void> {
  const each = async (path: string): Promise<void> => {
    if (pauses === 'router') await post(`${envoyUrl}${path}`);
    else await Promise.all(sims.map((sim) => post(`${sim.url}${path}`)));
  };
  await each('/pause?mode=wait');
  await sleep(updateMs);
  await each('/reset_prefix_cache');
  await each('/resume');
}

/** Synchronous steps (see the header): every step's turns, with the fleet's update in between. */
async function syncSteps(v: Variant, envoyUrl: string, sims: readonly Simulator[], run: number) {
  const all: Turn[][] = [];
  let wallMs = 0;
  for (let step = 0; step < steps; step++) {
    if (step > 0) await syncUpdate(v.pauses, envoyUrl, sims);
    const r = await traffic(envoyUrl, run, sessions, turns, step);
    all.push(...r.turns);
    wallMs += r.wallMs;
  }
  return { r: { turns: all, wallMs }, updates: steps - 1 };
}

const script = buildRouter().script;
const cells = await runInterleaved(
  VARIANTS,
  repeats,
  async (v, run) => {
    const stack = await startRoutedStack({
      workers: WORKERS,
      sim: SESSION_SIM,
      router: { policy: v.policy, ...v.router },
      routerScript: script,
      ...(v.replicas !== undefined ? { replicas: v.replicas } : {}),
    });
    try {
      const sims = stack.cluster.sims;
      await traffic(stack.url, 99 + run, 8, 2); // warm-up: JIT, connections
      const from = Date.now();
      const held = sims.map((s) => s.requestsWhilePaused);
      let finished = false;
      const { r, updates } =
        mode === 'sync'
          ? await syncSteps(v, stack.url, sims, run)
          : await (async () => {
              const updating =
                v.pauses === 'none' ? Promise.resolve(0) : trainer(v.pauses, stack.url, sims, () => finished);
              const traffic_ = await traffic(stack.url, run, sessions, turns);
              finished = true;
              return { r: traffic_, updates: await updating };
            })();
      const ok = r.turns.flat().filter((x) => x.status === 200);
      const ttft = ok.map((x) => x.ttftMs);
      let prompt = 0;
      let cached = 0;
      for (const sim of sims) {
        for (const x of sim.records) {
          if (x.startMs < from || x.outcome !== 'ok') continue;
          prompt += x.promptTokens;
          cached += x.cachedTokens;
        }
      }
      return {
        arm: v.label,
        requests: r.turns.flat().length,
        failed: r.turns.flat().length - ok.length,
        updates,
        reachedPaused: sims.reduce((a, s, i) => a + s.requestsWhilePaused - held[i]!, 0),
        tokensPerSec: ok.reduce((a, x) => a + x.outputTokens, 0) / (r.wallMs / 1000),
        hitRate: prompt > 0 ? cached / prompt : 0,
        ttftP50: percentile(ttft, 50),
        ttftP90: percentile(ttft, 90),
        ttftP99: percentile(ttft, 99),
        ttftMax: Math.max(...ttft),
      };
    } finally {
      await stack.close();
    }
  },
  log,
);

type Cell = (typeof cells)[number];
const mean = (cs: readonly Cell[], k: keyof Omit<Cell, 'arm'>): number =>
  cs.reduce((a, c) => a + c[k], 0) / cs.length;
const reference = cells.filter((c) => c.arm === VARIANTS[VARIANTS.length - 1]!.label);
const results = Object.fromEntries(
  VARIANTS.map((v) => {
    const cs = cells.filter((c) => c.arm === v.label);
    return [
      v.label,
      {
        requests: mean(cs, 'requests'),
        failed: mean(cs, 'failed'),
        updates: mean(cs, 'updates'),
        reachedPaused: round(mean(cs, 'reachedPaused')),
        reachedPausedRuns: cs.map((c) => c.reachedPaused),
        tokensPerSec: round(mean(cs, 'tokensPerSec')),
        vsReference: round(mean(cs, 'tokensPerSec') / mean(reference, 'tokensPerSec')),
        hitRate: round(mean(cs, 'hitRate')),
        ttftP50Ms: round(mean(cs, 'ttftP50')),
        ttftP90Ms: round(mean(cs, 'ttftP90')),
        ttftP99Ms: round(mean(cs, 'ttftP99')),
        ttftMaxMs: round(mean(cs, 'ttftMax')),
      },
    ];
  }),
);
process.stdout.write(
  `${JSON.stringify({ benchmark: 'rl-weight-update', mode, workers: WORKERS, sessions, turns, ...(mode === 'sync' ? { steps } : { gapMs }), updateMs, repeats, reference: VARIANTS[VARIANTS.length - 1]!.label, results }, null, 2)}\n`,
);
process.exit(0);
