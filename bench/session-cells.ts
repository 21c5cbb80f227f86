/**
 * What the session benchmarks (bench/anthropic-sessions.bench.ts, bench/data-parallel.bench.ts,
 * bench/vision-sessions.bench.ts, bench/agent-tools.bench.ts) share: the simulators' options, running
 * the sessions at once, sending a streamed turn and reading its answer, one run's cell (hit rate,
 * throughput, time to first token, spread over the simulators) and the per-variant summary against
 * round robin.
 */
import { percentile, round } from './stats.js';
import { TIMING } from './routing-bench.js';
import { runInterleaved } from './arm-runs.js';
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { startPeerFleet, type PeerName } from './peers.js';
import type { Simulator, SimulatorOptions } from '../src/sim/simulator.js';

/** Simulators as the routing benchmark's: its timing, 1024-block prefix caches of 16 tokens. */
export const SESSION_SIM: SimulatorOptions = {
  model: 'sim-model',
  maxRecords: 5000,
  timeScale: 1,
  timing: TIMING,
  cache: { capacityBlocks: 1024 },
};

/** Runs `n` sessions at once (`session(s)` sends session s's turns one after the other). */
export async function runSessions(
  n: number,
  session: (s: number) => Promise<Turn[]>,
): Promise<{ turns: Turn[][]; wallMs: number }> {
  const start = performance.now();
  const turns = await Promise.all(Array.from({ length: n }, (_, s) => session(s)));
  return { turns, wallMs: performance.now() - start };
}

/**
 * Sends one streamed turn (POST `body` as JSON to `url`) and reads it to its end: the turn, and the
 * answer's text when it was answered 200 (undefined otherwise: the caller leaves it out of the
 * conversation).
 */
export async function streamTurn(
  url: string,
  body: unknown,
  outputTokens: number,
  headers: Record<string, string> = { 'content-type': 'application/json' },
): Promise<{ turn: Turn; text?: string }> {
  const sent = performance.now();
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) }).catch(
    () => undefined,
  );
  const status = res?.status ?? 0;
  if (res === undefined || status !== 200) {
    await res?.text().catch(() => undefined);
    return { turn: { status, ttftMs: 0, outputTokens: 0 } };
  }
  const r = await readStream(res, sent);
  return { turn: { status, ttftMs: r.ttftMs, outputTokens }, text: r.text };
}

/** One request of a session. */
export interface Turn {
  status: number;
  ttftMs: number;
  outputTokens: number;
}

/**
 * Reads a stream (chat `content` deltas or Anthropic `text_delta` events) to its end: the time from
 * `sent` to its first text, and the text.
 */
export async function readStream(res: Response, sent: number): Promise<{ ttftMs: number; text: string }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let all = '';
  let ttftMs = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    all += decoder.decode(value, { stream: true });
    if (ttftMs === 0 && (all.includes('"text_delta"') || all.includes('"content":"'))) {
      ttftMs = performance.now() - sent;
    }
  }
  let out = '';
  for (const m of all.matchAll(/"(?:text|content)":"((?:[^"\\]|\\.)*)"/g)) out += JSON.parse(`"${m[1]}"`);
  return { ttftMs, text: out };
}

export interface Cell {
  answered: number;
  errors: Record<string, number>;
  hitRate: number;
  tokensPerSec: number;
  ttftP50: number;
  ttftP90: number;
  maxMean: number;
}

/** One run's cell: its turns, and the records the simulators took from `from` (epoch ms) on. */
export function cellOf(
  r: { turns: Turn[][]; wallMs: number },
  sims: readonly Simulator[],
  from: number,
): Cell {
  const flat = r.turns.flat();
  const ok = flat.filter((x) => x.status === 200);
  const errors: Record<string, number> = {};
  for (const x of flat) if (x.status !== 200) errors[x.status] = (errors[x.status] ?? 0) + 1;
  const ttft = ok.map((x) => x.ttftMs);
  let prompt = 0;
  let cached = 0;
  // Spread in sequences: a request with parallel sampling `n` runs n of them (1 for every other bench).
  const perSim = sims.map((sim) => {
    let sequences = 0;
    for (const x of sim.records) {
      if (x.startMs < from || x.outcome !== 'ok') continue;
      prompt += x.promptTokens;
      cached += x.cachedTokens;
      sequences += samplesOf(x.body);
    }
    return sequences;
  });
  const mean = perSim.reduce((a, b) => a + b, 0) / perSim.length;
  return {
    answered: ok.length / flat.length,
    errors,
    hitRate: prompt > 0 ? cached / prompt : 0,
    tokensPerSec: ok.reduce((a, x) => a + x.outputTokens, 0) / (r.wallMs / 1000),
    ttftP50: ttft.length > 0 ? percentile(ttft, 50) : 0,
    ttftP90: ttft.length > 0 ? percentile(ttft, 90) : 0,
    maxMean: mean > 0 ? Math.max(...perSim) / mean : 0,
  };
}

/** A request body's parallel sampling `n` (1 when absent or not a positive integer). */
function samplesOf(body: unknown): number {
  const n = typeof body === 'object' && body !== null ? (body as { n?: unknown }).n : undefined;
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 ? n : 1;
}

type Key = 'answered' | 'hitRate' | 'tokensPerSec' | 'ttftP50' | 'ttftP90' | 'maxMean';
const meanOf = (cells: readonly Cell[], k: Key): number => cells.reduce((a, c) => a + c[k], 0) / cells.length;

/** Per variant label: the means of its runs' cells, output tokens/s against `baseline`'s. */
export function summarize(
  labels: readonly string[],
  cells: ReadonlyArray<Cell & { arm: string }>,
  baseline: string,
): Record<string, Record<string, unknown>> {
  const runs = new Map(labels.map((label) => [label, cells.filter((c) => c.arm === label)]));
  const base = runs.get(baseline) ?? [];
  return Object.fromEntries(
    labels.map((label) => {
      const cs = runs.get(label)!;
      const errors: Record<string, number> = {};
      for (const c of cs) for (const [s, n] of Object.entries(c.errors)) errors[s] = (errors[s] ?? 0) + n;
      return [
        label,
        {
          answered: round(meanOf(cs, 'answered')),
          errors,
          hitRate: round(meanOf(cs, 'hitRate')),
          hitRuns: cs.map((c) => round(c.hitRate)),
          tokensPerSec: round(meanOf(cs, 'tokensPerSec')),
          vsRoundRobin: round(meanOf(cs, 'tokensPerSec') / meanOf(base, 'tokensPerSec')),
          ttftP50Ms: round(meanOf(cs, 'ttftP50')),
          ttftP90Ms: round(meanOf(cs, 'ttftP90')),
          maxMeanPerWorker: round(meanOf(cs, 'maxMean')),
        },
      ];
    }),
  );
}

/** A front door on fresh simulators: its URL, its simulators, and how to close them. */
export interface SessionDoor {
  readonly url: string;
  readonly sims: readonly Simulator[];
  close(): Promise<void>;
}

/** What a session benchmark runs: its variants, how often, how many sessions of how many turns, and how. */
export interface SessionRuns<V> {
  readonly variants: readonly V[];
  readonly repeats: number;
  readonly sessions: number;
  readonly turns: number;
  /** One run of `n` sessions of `t` turns against `url`, for variant `v`, seeded. */
  readonly converse: (
    url: string,
    v: V,
    seed: number,
    n: number,
    t: number,
  ) => Promise<{ turns: Turn[][]; wallMs: number }>;
  readonly log: (line: string) => void;
}

/**
 * Every variant `repeats` times, interleaved: a fresh door, a warm-up (8 sessions of 2 turns: JIT,
 * connections), then `sessions` sessions of `turns` turns measured; the summary per variant against
 * the `round_robin` variant.
 */
export async function runSessionVariants<V extends { label: string }>(
  opts: SessionRuns<V> & { door: (v: V) => Promise<SessionDoor> },
): Promise<Record<string, Record<string, unknown>>> {
  const { variants, converse } = opts;
  const cells = await runInterleaved(
    variants,
    opts.repeats,
    async (v, run): Promise<Cell & { arm: string }> => {
      const door = await opts.door(v);
      try {
        await converse(door.url, v, 99 + run, 8, 2);
        const from = Date.now();
        const r = await converse(door.url, v, run, opts.sessions, opts.turns);
        return { arm: v.label, ...cellOf(r, door.sims, from) };
      } finally {
        await door.close();
      }
    },
    opts.log,
  );
  return summarize(
    variants.map((v) => v.label),
    cells,
    'round_robin',
  );
}

/**
 * A variant of a session benchmark: this router with options (its config keys), as one replica or two
 * behind envoy/envoy-replicas.yaml's affinity (Maglev on `x-session-id`, else on the request's session
 * key or prompt opening), or a peer's cache_aware.
 */
export type SessionVariant = { label: string } & (
  | {
      router: Record<string, unknown>;
      replicas?: 2;
      /** Another build's CLI script (e.g. an earlier commit's dist/src/cli.js) instead of this one's. */
      script?: string;
    }
  | { peer: PeerName }
);

/**
 * A session benchmark whose variants are this router (compiled, its own process, behind real Envoy) or
 * a peer, each on `workers` fresh simulators: runs them (runSessionVariants), prints one JSON object
 * (`benchmark`, the figures in `params`, the results) to stdout and exits.
 */
export async function runSessionBench<V extends SessionVariant>(
  opts: SessionRuns<V> & {
    benchmark: string;
    params: Record<string, unknown>;
    workers: number;
    sim: SimulatorOptions;
  },
): Promise<never> {
  const { workers, sim } = opts;
  const script = buildRouter().script;
  const door = async (v: V): Promise<SessionDoor> => {
    if ('peer' in v) return startPeerFleet(v.peer, 'cache_aware', workers, sim);
    const stack = await startRoutedStack({
      workers,
      sim,
      router: v.router,
      routerScript: v.script ?? script,
      ...(v.replicas === 2
        ? { replicas: 2, envoy: { replicaAffinityHeader: 'x-session-id', replicaPrefixKey: true } }
        : {}),
    });
    return { url: stack.url, sims: stack.cluster.sims, close: () => stack.close() };
  };
  const results = await runSessionVariants({ ...opts, door });
  const { benchmark, params, repeats, sessions, turns } = opts;
  process.stdout.write(
    `${JSON.stringify({ benchmark, workers, sessions, turns, ...params, repeats, results }, null, 2)}\n`,
  );
  process.exit(0);
}
