/**
 * Scale-of-state benchmark (in-process, no network): how selection cost and memory grow with the
 * fleet and with the cache_aware tree.
 *
 * 1. Selection cost: for 16 / 256 / 4096 workers and every policy, `select()` + `routed()` (what a pool
 *    does per request) on 2 KB prompts drawn from 64 shared prefixes + random tails, with random loads
 *    0-7 per worker. Time-bounded loop (`budgetMs` per cell, after a warm-up of 10% as many calls);
 *    reported as microseconds per selection. Membership: the time to addWorker() all N one by one (as
 *    pool reconciliation does), with a budget (30 s; 2 s quick): a policy that cannot build its state
 *    within it is reported as incomplete with how many workers it managed. Heap = heapUsed after a forced GC with the workers and the
 *    policy (state included) alive, minus heapUsed before creating them.
 * 2. Tree at its bound: one cache_aware policy with 8 workers and `maxTreeSize` per worker; prompts
 *    (shared prefixes from a pool of 4 KB system prompts + 4 KB random tails) are routed until
 *    `feedBytes` of prompt text in total went through it (1 GB in the full run), with maintain() (the
 *    eviction the router runs every evictionIntervalMs) after every `maintainEveryBytes`. Reported:
 *    cached chars (treeChars, summed per worker; shared prefixes count once per worker holding them),
 *    heap bytes per cached char, insert+select cost per KB, and the evicted total — proof the bound holds.
 *
 * Forced GC: `--expose-gc` is switched on at runtime (v8.setFlagsFromString) and gc() taken from a
 * fresh vm context, so `npm run bench` needs no extra node flags.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { CacheAwarePolicy } from '../src/routing/cache-aware.js';
import { createPolicy } from '../src/routing/create-policy.js';
import { POLICY_NAMES, type Policy, type PolicyName, type SelectionInput } from '../src/routing/policy.js';
import { Worker } from '../src/workers/worker.js';
import { runInfo, type RunInfo } from './report-doc.js';
import { round } from './stats.js';
import { mulberry32, randomText } from './workloads.js';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

export interface SelectionCell {
  policy: PolicyName;
  workers: number;
  /** Time to add every worker with addWorker() one by one (what pool reconciliation does), ms. */
  membershipMs: number;
  /** False when adding the workers exceeded the membership budget (selection then not measured). */
  complete: boolean;
  /** Workers added within the budget. */
  added: number;
  selections: number;
  usPerSelection: number;
  heapBytes: number;
}

export interface TreeRun {
  workers: number;
  maxTreeSizeChars: number;
  fedBytes: number;
  requests: number;
  cachedChars: number;
  boundChars: number;
  evictedChars: number;
  heapBytes: number;
  heapBytesPerCachedChar: number;
  usPerKbRouted: number;
  wallMs: number;
}

export interface ScaleResult {
  benchmark: 'scale';
  info: RunInfo;
  selection: SelectionCell[];
  tree: TreeRun;
}

export interface ScaleBenchOptions {
  quick?: boolean;
  command?: string;
  log?: (line: string) => void;
}

function heapUsed(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

function makeWorkers(n: number, rng: () => number): Worker[] {
  return Array.from({ length: n }, (_, i) => {
    const port = 10_000 + i;
    const w = new Worker({
      role: 'regular',
      url: `http://10.${(i >> 8) & 255}.${i & 255}.1:${port}`,
      endpoint: `10.${(i >> 8) & 255}.${i & 255}.1:${port}`,
      generation: 1,
    });
    w.load = Math.floor(rng() * 8);
    return w;
  });
}

function promptSource(seed: number, prefixes: number, prefixChars: number, tailChars: number) {
  const rng = mulberry32(seed);
  const pool = Array.from({ length: prefixes }, (_, i) => `${i} ${randomText(rng, prefixChars)}`);
  const noise = randomText(rng, 1 << 20);
  return (): string => {
    const p = pool[Math.floor(rng() * pool.length)]!;
    const at = Math.floor(rng() * (noise.length - tailChars));
    return p + noise.slice(at, at + tailChars);
  };
}

function selectionCell(
  policyName: PolicyName,
  n: number,
  budgetMs: number,
  membershipBudgetMs: number,
): SelectionCell {
  const rng = mulberry32(n * 31 + policyName.length);
  const next = promptSource(7, 64, 1536, 512);
  const prompts = Array.from({ length: 512 }, next);
  const before = heapUsed();
  const workers = makeWorkers(n, rng);
  const policy: Policy = createPolicy(policyName, { rng });
  const m0 = performance.now();
  let added = 0;
  for (const w of workers) {
    policy.addWorker?.(w);
    added++;
    if (performance.now() - m0 > membershipBudgetMs) break;
  }
  const membershipMs = performance.now() - m0;
  if (added < n) {
    return {
      policy: policyName,
      workers: n,
      membershipMs: Math.round(membershipMs),
      complete: false,
      added,
      selections: 0,
      usPerSelection: NaN,
      heapBytes: NaN,
    };
  }
  const step = (i: number): void => {
    const input: SelectionInput = {
      workers,
      model: 'm',
      text: prompts[i % prompts.length]!,
      headers: {},
      body: { user: `u${i % 97}` },
    };
    const d = policy.select(input);
    policy.routed?.(d, input, i);
  };
  // Warm-up (JIT, and a populated tree for cache_aware).
  const t0 = performance.now();
  let warm = 0;
  while (performance.now() - t0 < budgetMs / 10) step(warm++);
  let count = 0;
  const start = performance.now();
  while (true) {
    for (let k = 0; k < 64; k++) step(warm + count++);
    if (performance.now() - start >= budgetMs) break;
  }
  const elapsed = performance.now() - start;
  const heap = heapUsed() - before;
  // Keep the state (and the prompts, allocated before the baseline) alive until the heap was measured.
  if (workers.length !== n || policy.name !== policyName || prompts.length === 0)
    throw new Error('unreachable');
  return {
    policy: policyName,
    workers: n,
    membershipMs: round(membershipMs),
    complete: true,
    added,
    selections: count,
    usPerSelection: round((elapsed * 1000) / count),
    heapBytes: Math.max(0, heap),
  };
}

function treeRun(quick: boolean, log: (l: string) => void): TreeRun {
  const workersN = 8;
  const maxTreeSize = quick ? 1 << 20 : 1 << 23;
  const feedBytes = quick ? 32 << 20 : 1 << 30;
  const maintainEvery = quick ? 4 << 20 : 64 << 20;
  const rng = mulberry32(99);
  const next = promptSource(11, 4096, 4096, 4096);
  const before = heapUsed();
  const workers = makeWorkers(workersN, rng);
  const policy = new CacheAwarePolicy({ maxTreeSize });
  for (const w of workers) policy.addWorker(w);
  let fed = 0;
  let sinceMaintain = 0;
  let requests = 0;
  let evicted = 0;
  let routeMs = 0;
  const t0 = performance.now();
  let nextLog = 0;
  while (fed < feedBytes) {
    const text = next();
    for (const w of workers) w.load = Math.floor(rng() * 8);
    const s = performance.now();
    const input: SelectionInput = { workers, model: 'm', text, headers: {} };
    const d = policy.select(input);
    policy.routed(d, input, requests);
    routeMs += performance.now() - s;
    fed += text.length;
    sinceMaintain += text.length;
    requests++;
    if (sinceMaintain >= maintainEvery) {
      evicted += policy.maintain(requests);
      sinceMaintain = 0;
    }
    if (fed >= nextLog) {
      log(`scale tree: fed ${(fed / 2 ** 20).toFixed(0)} MB`);
      nextLog += feedBytes / 8;
    }
  }
  evicted += policy.maintain(requests);
  const wallMs = performance.now() - t0;
  let cached = 0;
  for (const c of policy.treeChars().values()) cached += c;
  const heap = heapUsed() - before;
  // Keep the prompt source (16 MB of pooled text) and the workers alive past the measurement: a dead
  // local may be collected early, which would make the difference negative.
  if (workers.length !== workersN || next() === '') throw new Error('unreachable');
  return {
    workers: workersN,
    maxTreeSizeChars: maxTreeSize,
    fedBytes: fed,
    requests,
    cachedChars: cached,
    boundChars: maxTreeSize * workersN,
    evictedChars: evicted,
    heapBytes: heap,
    heapBytesPerCachedChar: round(heap / cached),
    usPerKbRouted: round((routeMs * 1000) / (fed / 1024)),
    wallMs: Math.round(wallMs),
  };
}

export async function runScaleBench(opts: ScaleBenchOptions = {}): Promise<ScaleResult> {
  const quick = opts.quick ?? false;
  const log = opts.log ?? (() => undefined);
  const budgetMs = quick ? 50 : 400;
  // The tree first: its heap baseline must not include garbage the selection cells leave behind.
  const tree = treeRun(quick, log);
  log(
    `scale tree: ${(tree.cachedChars / 2 ** 20).toFixed(1)} M chars cached (bound ${(tree.boundChars / 2 ** 20).toFixed(0)} M), ` +
      `${tree.heapBytesPerCachedChar} heap bytes/char, ${tree.usPerKbRouted} us/KB`,
  );
  const selection: SelectionCell[] = [];
  for (const n of [16, 256, 4096]) {
    for (const p of POLICY_NAMES) {
      const cell = selectionCell(p, n, budgetMs, quick ? 2000 : 30_000);
      selection.push(cell);
      log(
        `scale select ${p} x${n}: membership ${cell.membershipMs} ms${cell.complete ? '' : ` (INCOMPLETE: ${cell.added} added)`}, ` +
          `${cell.usPerSelection} us/selection, heap ${(cell.heapBytes / 1024).toFixed(0)} KB`,
      );
      await new Promise((r) => setImmediate(r));
    }
  }
  return {
    benchmark: 'scale',
    info: runInfo(opts.command ?? `npm run bench -- scale${quick ? ' --quick' : ''}`, quick),
    selection,
    tree,
  };
}
