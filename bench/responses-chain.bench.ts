/**
 * Chained Responses API conversations: `--users` users talk at once, each `--turns` turns in a row,
 * every turn after the first naming the previous one (`previous_response_id`), as an agent or a chat
 * client on vLLM's `POST /v1/responses` does. vLLM keeps a stored response in the memory of the
 * process that made it (the simulator does the same), so a turn that reaches another worker gets a
 * 404 and the conversation is lost. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/responses-chain.bench.ts            2 interleaved runs per variant (~2 min)
 *   --repeats 3 --users 32 --turns 6
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING, 8 simulated workers, 1024-block
 * prefix caches): this router in its own process (compiled) behind real Envoy, one replica or two
 * (sharing nothing, Envoy balancing the ext_proc streams over them), and the peers (PyPI
 * `vllm-router`, `smg`, bench/peers.ts) as whole proxies in front of fresh simulators, when they can
 * run. Every turn carries the same 1,024-token instructions and a new 64-token question, 32 output
 * tokens, not streamed. A turn that fails is counted and the conversation goes on from the last
 * turn that succeeded.
 * Per variant: turns answered 2xx (share), conversations with every turn answered, errors by status,
 * output tokens/s of the answered turns over the run's wall time, latency p50 / p90 of answered turns.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { TIMING } from './routing-bench.js';
import { numericFlag } from './numeric-flag.js';
import { percentile, round } from './stats.js';
import { mulberry32, wordText } from './workloads.js';
import { preparePeers, startPeerFleet, type PeerName } from './peers.js';
import type { SimulatorOptions } from '../src/sim/simulator.js';

const repeats = numericFlag('repeats', 2);
const users = numericFlag('users', 32);
const turns = numericFlag('turns', 6);
const WORKERS = 8;
const OUTPUT_TOKENS = 32;
const MODEL = 'sim-model';
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'fleet worker queue cache prefix token decode prefill route answer plan step'.split(' ');
const text = (rng: () => number, chars: number, head: string): string => wordText(rng, chars, head, WORDS);
// ~1.8 characters per token on this text (the routing benchmark's measure).
const INSTRUCTIONS = text(mulberry32(7), 1843, 'You are the operations assistant.');

interface Turn {
  status: number;
  latencyMs: number;
  outputTokens: number;
}

/** One run of every conversation against `baseUrl`; each user's turns go one after the other. */
async function converse(
  baseUrl: string,
  seed: number,
  n: number,
  t: number,
): Promise<{ turns: Turn[][]; wallMs: number }> {
  const start = performance.now();
  const all = await Promise.all(
    Array.from({ length: n }, async (_, u) => {
      const rng = mulberry32(seed * 1000 + u);
      const out: Turn[] = [];
      let previous: string | undefined;
      for (let k = 0; k < t; k++) {
        const body = {
          model: MODEL,
          instructions: INSTRUCTIONS,
          input: text(rng, 115, `user ${seed}.${u} turn ${k}:`),
          max_output_tokens: OUTPUT_TOKENS,
          ...(previous !== undefined ? { previous_response_id: previous } : {}),
        };
        const sent = performance.now();
        const res = await fetch(`${baseUrl}/v1/responses`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        }).catch(() => undefined);
        const json = (await res?.json().catch(() => undefined)) as
          { id?: string; usage?: { output_tokens?: number } } | undefined;
        const status = res?.status ?? 0;
        out.push({
          status,
          latencyMs: performance.now() - sent,
          outputTokens: json?.usage?.output_tokens ?? 0,
        });
        if (status === 200 && typeof json?.id === 'string') previous = json.id;
      }
      return out;
    }),
  );
  return { turns: all, wallMs: performance.now() - start };
}

interface Cell {
  answered: number;
  conversations: number;
  errors: Record<string, number>;
  tokensPerSec: number;
  p50: number;
  p90: number;
}

function cellOf(r: { turns: Turn[][]; wallMs: number }): Cell {
  const flat = r.turns.flat();
  const ok = flat.filter((x) => x.status === 200);
  const errors: Record<string, number> = {};
  for (const x of flat) if (x.status !== 200) errors[x.status] = (errors[x.status] ?? 0) + 1;
  const latency = ok.map((x) => x.latencyMs);
  return {
    answered: ok.length / flat.length,
    conversations: r.turns.filter((c) => c.every((x) => x.status === 200)).length / r.turns.length,
    errors,
    tokensPerSec: ok.reduce((a, x) => a + x.outputTokens, 0) / (r.wallMs / 1000),
    p50: latency.length > 0 ? percentile(latency, 50) : 0,
    p90: latency.length > 0 ? percentile(latency, 90) : 0,
  };
}

const sim: SimulatorOptions = {
  model: MODEL,
  maxRecords: 0,
  timeScale: 1,
  timing: TIMING,
  cache: { capacityBlocks: 1024 },
};

type Variant = { label: string } & (
  { router: Record<string, unknown>; replicas: number } | { peer: PeerName }
);
const peers = preparePeers(log);
const VARIANTS: Variant[] = [
  { label: 'round_robin', router: { policy: 'round_robin' }, replicas: 1 },
  { label: 'cache_aware', router: { policy: 'cache_aware' }, replicas: 1 },
  { label: 'cache_aware x2', router: { policy: 'cache_aware' }, replicas: 2 },
  ...peers.map((peer): Variant => ({ label: `${peer} cache_aware`, peer })),
];

/** A fresh front door on fresh simulators: its URL and how to close both. */
async function frontDoor(v: Variant, script: string): Promise<{ url: string; close(): Promise<void> }> {
  if ('router' in v) {
    const stack = await startRoutedStack({
      workers: WORKERS,
      sim,
      router: v.router,
      replicas: v.replicas,
      routerScript: script,
    });
    return { url: stack.url, close: () => stack.close() };
  }
  return startPeerFleet(v.peer, 'cache_aware', WORKERS, sim);
}

const script = buildRouter().script;
const runs = new Map<string, Cell[]>();
for (let rep = 0; rep < repeats; rep++) {
  for (const v of VARIANTS) {
    const door = await frontDoor(v, script);
    try {
      await converse(door.url, 100 + rep, 8, 2); // warm-up: JIT, connections
      const cell = cellOf(await converse(door.url, rep + 1, users, turns));
      log(`run ${rep + 1} ${v.label}: ${JSON.stringify(cell)}`);
      runs.set(v.label, [...(runs.get(v.label) ?? []), cell]);
    } finally {
      await door.close();
    }
  }
}

const meanOf = (cells: Cell[], k: 'answered' | 'conversations' | 'tokensPerSec' | 'p50' | 'p90'): number =>
  cells.reduce((a, c) => a + c[k], 0) / cells.length;
const rr = meanOf(runs.get('round_robin')!, 'tokensPerSec');
const results = Object.fromEntries(
  VARIANTS.map(({ label }) => {
    const cells = runs.get(label)!;
    const errors: Record<string, number> = {};
    for (const c of cells) for (const [s, n] of Object.entries(c.errors)) errors[s] = (errors[s] ?? 0) + n;
    return [
      label,
      {
        turnsAnswered: round(meanOf(cells, 'answered')),
        conversationsWhole: round(meanOf(cells, 'conversations')),
        errors,
        tokensPerSec: round(meanOf(cells, 'tokensPerSec')),
        vsRoundRobin: round(meanOf(cells, 'tokensPerSec') / rr),
        latencyP50Ms: round(meanOf(cells, 'p50')),
        latencyP90Ms: round(meanOf(cells, 'p90')),
      },
    ];
  }),
);
process.stdout.write(
  `${JSON.stringify({ benchmark: 'responses-chain', workers: WORKERS, users, turns, repeats, results }, null, 2)}\n`,
);
process.exit(0);
