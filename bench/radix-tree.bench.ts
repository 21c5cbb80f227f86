/**
 * Radix tree and cache_aware policy benchmark. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/radix-tree.bench.ts           full run (~15 s, ~1.8 GB RSS: the 256 KB tree holds 1.3 G chars)
 *   npx tsx bench/radix-tree.bench.ts --quick   seconds-long smoke run (small counts)
 *
 * Workload ("generated shared prefix"-like): prompts of L UTF-16 code units in 64 groups; each prompt
 * is its group's system prompt (the first half) followed by a unique tail. Prompts are generated
 * deterministically, flattened, inserted, then dropped, so only the tree holds text.
 *
 * 1. Tree, per prompt size 1 KB / 32 KB / 256 KB: build a tree of N cached prompts over 16 tenants,
 *    then time (per op, hrtime) prefixMatch of a NEW prompt of a known group (half matches), insert of
 *    it, and prefixMatch of a cached prompt (full match). Reported per KB (1024 code units).
 *    N = 10,000 at every size (the 256 KB tree caches ~1.3 G characters); --quick scales counts down.
 * 2. Memory: heap bytes per cached character = (heapUsed after build - before) / tree.totalChars(),
 *    with gc before and after (gc exposed at run time via v8.setFlagsFromString when not given).
 *    A second, adversarial case checks that edge labels do not pin their prompts: 200 prompts of
 *    64 KB sharing all but their last 100 units; pinning would retain ~12.8 M units for ~84 K cached.
 * 3. Policy: CacheAwarePolicy select + routed (one pool step, guard taken and released) over
 *    8 / 64 / 512 workers with 4 KB prompts in 64 groups; median and p99 in microseconds.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare ratios within one run.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { CacheAwarePolicy } from '../src/routing/cache-aware.js';
import { flatCopy } from '../src/routing/flat-string.js';
import type { SelectionInput } from '../src/routing/policy.js';
import { RadixTree } from '../src/routing/radix-tree.js';
import { LoadGuard } from '../src/workers/load-guard.js';
import { Worker } from '../src/workers/worker.js';
import { seededRandom as rng } from '../src/util/seeded-random.js';

const quick = process.argv.includes('--quick');
const GROUPS = 64;
const TENANTS = 16;

function getGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}
const gc = getGc();

function fullGc(): void {
  for (let i = 0; i < 4; i++) gc();
}

function log(msg: string): void {
  process.stderr.write(`${msg}\n`);
}

/** A random lowercase/space corpus to cut prompt text from. */
function makeCorpus(length: number, seed: number): string {
  const r = rng(seed);
  const parts: string[] = [];
  let n = 0;
  while (n < length) {
    const word = Math.floor(r() * 2 ** 52).toString(36);
    parts.push(word, ' ');
    n += word.length + 1;
  }
  return parts.join('').slice(0, length);
}

const CORPUS = flatCopy(makeCorpus(1 << 22, 42));

/** Prompt `id` of `group`, L units: group system prompt (L/2) + a tail that depends on id. */
function prompt(group: number, id: number, length: number): string {
  const half = length >>> 1;
  const r = rng(group * 7919 + 1);
  const headAt = Math.floor(r() * (CORPUS.length - half));
  const r2 = rng(id * 104729 + 17);
  const tailAt = Math.floor(r2() * (CORPUS.length - (length - half)));
  // join('') builds a fresh flat string, as a parsed request body would be.
  const head = `${group}|`.padEnd(4, ' ');
  return [head, CORPUS.slice(headAt, headAt + half - 4), CORPUS.slice(tailAt, tailAt + length - half)].join(
    '',
  );
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}

function stats(samplesNs: number[], perKb: number): { median: number; p99: number } {
  const sorted = samplesNs.map((ns) => ns / 1000 / perKb).sort((a, b) => a - b);
  return { median: round(quantile(sorted, 0.5)), p99: round(quantile(sorted, 0.99)) };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function now(): bigint {
  return process.hrtime.bigint();
}

interface TreeResult {
  prompt_units: number;
  cached_prompts: number;
  tenants: number;
  tree_chars: number;
  tree_nodes: number;
  build_insert_us_per_kb: number;
  match_new_us_per_kb: { median: number; p99: number };
  insert_new_us_per_kb: { median: number; p99: number };
  match_plus_insert_us_per_kb: { median: number; p99: number };
  match_cached_us_per_kb: { median: number; p99: number };
  heap_bytes_per_cached_char: number;
}

function benchTree(length: number, cached: number, samples: number): TreeResult {
  log(`tree: ${cached} prompts x ${length} units`);
  // The tree lives only in a holder (timing runs in a callee) so it can be dropped for the
  // "with - without" heap measurement.
  // (An interpreter frame may keep a dead temporary alive, so benchTree never touches the tree.)
  const holder: { tree?: RadixTree } = {};
  const timed = timeTree(holder, length, cached, samples);
  const heapBytes = heldHeapBytes(holder, 'tree');
  return { ...timed, heap_bytes_per_cached_char: round(heapBytes / timed.tree_chars) };
}

function timeTree(
  holder: { tree?: RadixTree },
  length: number,
  cached: number,
  samples: number,
): Omit<TreeResult, 'heap_bytes_per_cached_char'> {
  const tree = new RadixTree();
  holder.tree = tree;
  let buildNs = 0;
  for (let i = 0; i < cached; i++) {
    const text = prompt(i % GROUPS, i, length);
    const t0 = now();
    tree.insert(text, `tenant-${i % TENANTS}`, i);
    buildNs += Number(now() - t0);
  }
  const kb = length / 1024;

  const matchNew: number[] = [];
  const insertNew: number[] = [];
  const both: number[] = [];
  const matchCached: number[] = [];
  let sink = 0;
  for (let s = 0; s < samples; s++) {
    const id = cached + s;
    const text = prompt(id % GROUPS, id, length);
    let t0 = now();
    sink += tree.prefixMatch(text).matchedChars;
    const m = Number(now() - t0);
    t0 = now();
    tree.insert(text, `tenant-${id % TENANTS}`, id);
    const ins = Number(now() - t0);
    matchNew.push(m);
    insertNew.push(ins);
    both.push(m + ins);
    const old = (s * 7919) % cached;
    const again = prompt(old % GROUPS, old, length);
    t0 = now();
    sink += tree.prefixMatch(again).matchedChars;
    matchCached.push(Number(now() - t0));
  }
  if (sink < 0) log('unreachable');
  const recount = tree.recount();
  return {
    prompt_units: length,
    cached_prompts: cached,
    tenants: TENANTS,
    tree_chars: recount.totalChars,
    tree_nodes: recount.nodes,
    build_insert_us_per_kb: round(buildNs / 1000 / cached / kb),
    match_new_us_per_kb: stats(matchNew, kb),
    insert_new_us_per_kb: stats(insertNew, kb),
    match_plus_insert_us_per_kb: stats(both, kb),
    match_cached_us_per_kb: stats(matchCached, kb),
  };
}

/**
 * Heap bytes retained only through `holder[key]`: heapUsed (after full gcs) with it minus without it.
 * "With - without" keeps garbage that existed before the build out of the figure. The caller must
 * hold no other reference to the object once this returns.
 */
function heldHeapBytes<K extends string>(holder: Partial<Record<K, unknown>>, key: K): number {
  fullGc();
  const withIt = process.memoryUsage().heapUsed;
  delete holder[key];
  fullGc();
  return withIt - process.memoryUsage().heapUsed;
}

/** Labels must not pin prompts: 200 x 64 KB prompts that differ only in their last 100 units. */
function benchRetention(count: number): {
  prompts: number;
  prompt_units: number;
  inserted_units: number;
  tree_chars: number;
  retained_heap_bytes: number;
  heap_bytes_per_cached_char: number;
} {
  log('retention check');
  const length = 65536;
  const holder: { tree?: RadixTree } = {};
  const treeChars = fillRetention(holder, length, count);
  const retained = heldHeapBytes(holder, 'tree');
  return {
    prompts: count,
    prompt_units: length,
    inserted_units: count * length,
    tree_chars: treeChars,
    retained_heap_bytes: retained,
    heap_bytes_per_cached_char: round(retained / treeChars),
  };
}

function fillRetention(holder: { tree?: RadixTree }, length: number, count: number): number {
  const tree = new RadixTree();
  holder.tree = tree;
  const shared = CORPUS.slice(0, length - 100);
  for (let i = 0; i < count; i++) {
    const text = [shared, CORPUS.slice(100_000 + i * 977, 100_000 + i * 977 + 100)].join('');
    tree.insert(text, `tenant-${i % TENANTS}`, i);
  }
  return tree.totalChars();
}

function benchPolicy(
  workerCount: number,
  warm: number,
  samples: number,
): {
  workers: number;
  warm_requests: number;
  select_routed_us: { median: number; p99: number };
  hit_rate: number;
} {
  log(`policy: ${workerCount} workers`);
  const workers = Array.from(
    { length: workerCount },
    (_, i) =>
      new Worker({
        role: 'regular',
        url: `http://10.1.${i >> 8}.${i & 255}:8000`,
        endpoint: `10.1.${i >> 8}.${i & 255}:8000`,
        generation: 1,
      }),
  );
  const policy = new CacheAwarePolicy();
  for (const w of workers) policy.addWorker(w);
  const r = rng(99);
  const inputs = (id: number): SelectionInput => ({
    workers,
    model: 'bench-model',
    text: prompt(id % GROUPS, id, 4096),
    headers: {},
  });
  const step = (sel: SelectionInput, t: number): string => {
    const decision = policy.select(sel);
    const guard = new LoadGuard(decision.worker);
    policy.routed(decision, sel, t);
    guard.release();
    return decision.branch;
  };
  for (let i = 0; i < warm; i++) step(inputs(i), i);
  // Background load so the imbalance arithmetic runs over non-trivial values.
  for (const w of workers) w.load = Math.floor(r() * 8);
  const times: number[] = [];
  let hits = 0;
  for (let s = 0; s < samples; s++) {
    const sel = inputs(warm + s);
    const t0 = now();
    const branch = step(sel, warm + s);
    times.push(Number(now() - t0));
    if (branch === 'cache_hit') hits += 1;
  }
  return {
    workers: workerCount,
    warm_requests: warm,
    select_routed_us: stats(times, 1),
    hit_rate: round(hits / samples),
  };
}

function main(): void {
  const started = Date.now();
  const sizes = quick
    ? [
        { length: 1024, cached: 1000, samples: 100 },
        { length: 32768, cached: 200, samples: 50 },
        { length: 262144, cached: 40, samples: 10 },
      ]
    : [
        { length: 1024, cached: 10_000, samples: 1000 },
        { length: 32768, cached: 10_000, samples: 300 },
        { length: 262144, cached: 10_000, samples: 100 },
      ];
  const tree = sizes.map((s) => benchTree(s.length, s.cached, s.samples));
  fullGc();
  const retention = benchRetention(quick ? 50 : 200);
  fullGc();
  const policy = [8, 64, 512].map((n) => benchPolicy(n, quick ? 300 : 3000, quick ? 200 : 2000));
  const out = {
    bench: 'radix-tree',
    quick,
    node: process.version,
    notes: [
      'prompt_units are UTF-16 code units; per_kb = per 1024 units',
      quick
        ? 'quick mode: counts scaled down'
        : '256 KB prompts: 1,000 cached (10,000 x 256 KB does not fit the heap)',
    ],
    tree,
    retention,
    policy,
    elapsed_s: round((Date.now() - started) / 1000),
  };
  process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
}

main();
