/**
 * Data-parallel vLLM servers: `--servers` simulated `vllm serve --data-parallel-size --ranks` servers
 * (sim/dp-server.ts: one API server over independent engines, each with its own queue, 1024-block
 * prefix cache and the routing benchmark's timing), real Envoy, this router in its own process.
 * Workload: `--sessions` chat sessions at once, `--turns` turns each in a row; every session has its
 * own ~1,500-token document as system prompt (so a session's turns share a long prefix and sessions
 * share none), then a growing conversation (a ~60-token question and the 32-token answer per turn).
 * Streamed, 32 output tokens. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/data-parallel.bench.ts         2 interleaved runs per variant (~2 min)
 *   --repeats 3 --servers 2 --ranks 4 --sessions 32 --turns 6
 *
 * Variants: the router's round robin and cache_aware (the default) over the servers as one worker
 * each (the engine chosen by the server's own balancer: the lowest `waiting * 4 + running`), the
 * same with `--intra-node-data-parallel-size` (every engine a worker, pinned by
 * `X-data-parallel-rank`), and the reference router (PyPI `vllm-router`, bench/peers.ts) cache_aware
 * both ways, when it can run. Per variant: prefix-cache hit rate (cached / prompt tokens over the
 * engines' records), output tokens/s over the run's wall time, time to first token p50 / p90, max/mean
 * requests per engine, errors.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { runInterleaved } from './arm-runs.js';
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { numericFlag } from './numeric-flag.js';
import { round } from './stats.js';
import {
  cellOf,
  runSessions,
  SESSION_SIM,
  streamTurn,
  summarize,
  type Cell,
  type Turn,
} from './session-cells.js';
import { mulberry32, wordText } from './workloads.js';
import { preparePeers, startPeerOn } from './peers.js';
import { startDpSimulator, type DpSimulator } from '../src/sim/dp-server.js';
import type { Simulator } from '../src/sim/simulator.js';
import type { SimulatorCluster } from '../src/sim/cluster.js';

const repeats = numericFlag('repeats', 2);
const servers = numericFlag('servers', 2);
const ranks = numericFlag('ranks', 4);
const sessions = numericFlag('sessions', 32);
const turns = numericFlag('turns', 6);
const OUTPUT_TOKENS = 32;
const MODEL = 'sim-model';
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'the of a design document section requirement service request cache engine rank'.split(' ');
const text = (rng: () => number, chars: number, head: string): string => wordText(rng, chars, head, WORDS);

/** One run of every session against `baseUrl`; each session's turns go one after the other. */
function converse(baseUrl: string, seed: number, n: number, t: number) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s);
    const messages: Array<{ role: string; content: string }> = [
      { role: 'system', content: text(rng, 2700, `Session ${seed}.${s} design document:`) },
    ];
    const out: Turn[] = [];
    for (let k = 0; k < t; k++) {
      messages.push({ role: 'user', content: text(rng, 110, `turn ${k}:`) });
      const body = { model: MODEL, messages, max_tokens: OUTPUT_TOKENS, stream: true };
      const r = await streamTurn(`${baseUrl}/v1/chat/completions`, body, OUTPUT_TOKENS);
      out.push(r.turn);
      if (r.text !== undefined) messages.push({ role: 'assistant', content: r.text });
      else messages.pop();
    }
    return out;
  });
}

/** The share of a run's requests the servers saw pinned to an engine (X-data-parallel-rank). */
function pinnedShare(fleet: readonly DpSimulator[], before: { pinned: number; balanced: number }): number {
  const pinned = sum(fleet.flatMap((s) => s.pinned)) - before.pinned;
  const balanced = sum(fleet.flatMap((s) => s.balanced)) - before.balanced;
  return pinned + balanced > 0 ? pinned / (pinned + balanced) : 0;
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

const engine = SESSION_SIM;

/** The data-parallel servers, and the cluster view a routed stack closes. */
async function startFleet(): Promise<{ fleet: DpSimulator[]; cluster: SimulatorCluster }> {
  const fleet: DpSimulator[] = [];
  try {
    for (let i = 0; i < servers; i++) {
      fleet.push(await startDpSimulator({ ...engine, id: `dp${i}`, dataParallelSize: ranks }));
    }
  } catch (err) {
    await Promise.all(fleet.map((s) => s.close()));
    throw err;
  }
  const sims: Simulator[] = fleet.flatMap((s) => [...s.ranks]);
  return {
    fleet,
    cluster: { sims, close: async () => void (await Promise.all(fleet.map((s) => s.close()))) },
  };
}

type Variant = { label: string; dpAware: boolean } & (
  { router: Record<string, unknown> } | { peer: 'vllm-router' }
);
const peers = preparePeers(log).filter((p) => p === 'vllm-router');
const VARIANTS: Variant[] = [
  { label: 'round_robin', dpAware: false, router: { policy: 'round_robin' } },
  { label: 'cache_aware', dpAware: false, router: { policy: 'cache_aware' } },
  { label: 'round_robin, ranks', dpAware: true, router: { policy: 'round_robin' } },
  { label: 'cache_aware, ranks', dpAware: true, router: { policy: 'cache_aware' } },
  ...peers.flatMap((peer): Variant[] => [
    { label: `${peer} cache_aware`, dpAware: false, peer },
    { label: `${peer} cache_aware, ranks`, dpAware: true, peer },
  ]),
];

/** A fresh front door on fresh servers: its URL, the servers, and how to close them. */
async function frontDoor(
  v: Variant,
  script: string,
): Promise<{ url: string; fleet: DpSimulator[]; close(): Promise<void> }> {
  const { fleet, cluster } = await startFleet();
  const urls = fleet.map((s) => s.url);
  if ('router' in v) {
    const stack = await startRoutedStack({
      workers: 0,
      sim: engine,
      router: { ...v.router, ...(v.dpAware ? { intraNodeDataParallelSize: ranks } : {}) },
      routerScript: script,
      fleet: async () => ({ cluster, urls }),
    });
    return { url: stack.url, fleet, close: () => stack.close() };
  }
  const door = await startPeerOn(
    v.peer,
    'cache_aware',
    cluster,
    urls,
    v.dpAware ? ['--intra-node-data-parallel-size', String(ranks)] : [],
  );
  return { url: door.url, fleet, close: () => door.close() };
}

const script = buildRouter().script;
const cells = await runInterleaved(
  VARIANTS,
  repeats,
  async (v, run): Promise<Cell & { arm: string; pinned: number }> => {
    const door = await frontDoor(v, script);
    try {
      await converse(door.url, 99 + run, 8, 2); // warm-up: JIT, connections
      const from = Date.now();
      const before = {
        pinned: sum(door.fleet.flatMap((s) => s.pinned)),
        balanced: sum(door.fleet.flatMap((s) => s.balanced)),
      };
      const r = await converse(door.url, run, sessions, turns);
      const engines = door.fleet.flatMap((s) => [...s.ranks]);
      return { arm: v.label, ...cellOf(r, engines, from), pinned: pinnedShare(door.fleet, before) };
    } finally {
      await door.close();
    }
  },
  log,
);
const labels = VARIANTS.map((v) => v.label);
const summary = summarize(labels, cells, 'round_robin');
const results = Object.fromEntries(
  labels.map((label) => {
    const own = cells.filter((c) => c.arm === label);
    return [label, { ...summary[label], pinnedShare: round(sum(own.map((c) => c.pinned)) / own.length) }];
  }),
);
process.stdout.write(
  `${JSON.stringify({ benchmark: 'data-parallel', servers, ranks, sessions, turns, repeats, results }, null, 2)}\n`,
);
process.exit(0);
