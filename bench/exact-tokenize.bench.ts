/**
 * Router CPU per request in exact prefix mode (KV events + `--tokenizer`). Prints one JSON object to
 * stdout (progress on stderr).
 *
 *   npx tsx bench/exact-tokenize.bench.ts            full run (~10 s)
 *   npx tsx bench/exact-tokenize.bench.ts --quick    seconds-long smoke run (fewer requests)
 *   --workloads multi-turn,no-sharing                 only these workloads
 *   --repeat 3                                        each workload 3 times (fresh tokenizer and
 *                                                     index each time), samples pooled
 *
 * What the router does per request before it chooses (kv-prefix-source.ts), timed per request with
 * hrtime: tokenize it with the fixture tokenizer (test/fixtures/tokenizer, what the routing benchmarks
 * give the router and the simulator; chat requests rendered with the chat template first), compute
 * the chained block keys at block size 16, and look them up over 8 workers in a KvBlockIndex.
 *
 * Requests are the routing benchmarks' own (bench/workloads.ts), sent in order through ONE tokenizer,
 * so its caches warm as they do in a router: shared-prefix (completions: 8 KB group system prompt +
 * question), multi-turn (chat: 4 KB system prompt + the user's earlier turns), eviction-pressure (chat:
 * 12 KB tenant context + question), no-sharing (never-seen 8.7 KB completion prompts). After each
 * request (untimed) its blocks are stored on one of the 8 workers (by group / user), as the worker's
 * events would report them, so lookups walk real runs.
 *
 * Memory (pinning check): 200 completion prompts of 64 KB (80-character lines) that share all lines
 * but their last are tokenized, then the heap retained by the tokenizer is measured (gc exposed at
 * run time). Cached pieces and words are flat copies, so the shared lines are held once (~64 KB of
 * text plus their ids) and each unique last line holds only itself, not its 64 KB prompt (which
 * would retain ~13 MB).
 *
 * JIT warm-up: the same workloads with another seed, on another tokenizer instance, run first.
 * Reported per workload: median and p99 microseconds per request (tokenize + keys + lookup), wall
 * clock and process CPU time (process.cpuUsage, microsecond resolution: on a loaded machine the wall
 * clock also counts time the process waited for a core), the mean of each phase, and the mean prompt
 * length in tokens.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare ratios within one run.
 */
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { keySeed, promptKeys } from '../src/kv-events/block-keys.js';
import { KvBlockIndex } from '../src/kv-events/kv-block-index.js';
import { HfTokenizer } from '../src/tokenize/hf-tokenizer.js';
import { RequestTokenizer } from '../src/tokenize/request-tokens.js';
import { generateWorkload, type WorkloadName } from './workloads.js';

const quick = process.argv.includes('--quick');
const BS = 16;
const WORKERS = Array.from({ length: 8 }, (_, w) => `w${w}`);
const FIXTURE = fileURLToPath(new URL('../test/fixtures/tokenizer', import.meta.url));
const ALL: readonly WorkloadName[] = ['shared-prefix', 'multi-turn', 'eviction-pressure', 'no-sharing'];
const log = (m: string): void => void process.stderr.write(`${m}\n`);

function selected(): readonly WorkloadName[] {
  const i = process.argv.indexOf('--workloads');
  if (i === -1) return ALL;
  const names = (process.argv[i + 1] ?? '').split(',');
  for (const n of names) if (!ALL.includes(n as WorkloadName)) throw new RangeError(`unknown workload ${n}`);
  return names as WorkloadName[];
}

/** Workload sizes: the routing benchmarks' defaults, scaled down by --quick. */
function requestsOf(name: WorkloadName, seed: number): ReturnType<typeof generateWorkload>['requests'] {
  const opts = quick ? { seed, groups: 8, count: 48, users: 8, tenants: 12, activeTenants: 6 } : { seed };
  return generateWorkload(name, { ...opts, model: 'm' }).requests;
}

interface Result {
  requests: number;
  meanTokens: number;
  medianUs: number;
  p99Us: number;
  /** Process CPU time (user + system, all threads) per request: robust to other processes' load. */
  cpuMedianUs: number;
  cpuP99Us: number;
  meanTokenizeUs: number;
  meanKeysUs: number;
  meanLookupUs: number;
}

function run(name: WorkloadName, seed: number, repeats: number): Result {
  const seedKey = keySeed(undefined);
  const requests = requestsOf(name, seed);
  const totals: number[] = [];
  const cpu: number[] = [];
  let tok = 0;
  let keysUs = 0;
  let lookupUs = 0;
  let tokens = 0;
  let engineHash = 1;
  for (let rep = 0; rep < repeats; rep++) {
    const tokenizer = new RequestTokenizer(new Map([['m', HfTokenizer.load(FIXTURE)]]));
    const index = new KvBlockIndex();
    for (const r of requests) {
      const c0 = process.cpuUsage();
      const t0 = process.hrtime.bigint();
      const ids = tokenizer.tokenize('m', r.body);
      const t1 = process.hrtime.bigint();
      if (!ids.ok) throw new Error(`${name} request ${r.index} not tokenized: ${ids.reason}`);
      const keys = promptKeys(ids.ids, BS, seedKey);
      const t2 = process.hrtime.bigint();
      index.cachedTokens(keys, BS, WORKERS);
      const t3 = process.hrtime.bigint();
      const c1 = process.cpuUsage(c0);
      totals.push(Number(t3 - t0) / 1000);
      cpu.push(c1.user + c1.system);
      tok += Number(t1 - t0) / 1000;
      keysUs += Number(t2 - t1) / 1000;
      lookupUs += Number(t3 - t2) / 1000;
      tokens += ids.ids.length;
      const worker = WORKERS[(r.group ?? r.user ?? r.index) % WORKERS.length] as string;
      index.apply(worker, [
        {
          type: 'stored',
          hashes: keys.map(() => engineHash++),
          parent: undefined,
          tokens: Array.from(ids.ids).slice(0, keys.length * BS),
          blockSize: BS,
          medium: 'GPU',
          loraName: undefined,
          extraKeys: undefined,
        },
      ]);
    }
  }
  const sorted = [...totals].sort((a, b) => a - b);
  const cpuSorted = [...cpu].sort((a, b) => a - b);
  const n = totals.length;
  const p99 = Math.min(n - 1, Math.floor(n * 0.99));
  const r1 = (x: number): number => Number(x.toFixed(1));
  return {
    requests: n,
    meanTokens: Math.round(tokens / n),
    medianUs: r1(sorted[n >> 1] as number),
    p99Us: r1(sorted[p99] as number),
    cpuMedianUs: cpuSorted[n >> 1] as number,
    cpuP99Us: cpuSorted[p99] as number,
    meanTokenizeUs: r1(tok / n),
    meanKeysUs: r1(keysUs / n),
    meanLookupUs: r1(lookupUs / n),
  };
}

function getGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}

/** Heap retained by a tokenizer after 200 64 KB prompts sharing all lines but the last. */
function memory(): { prompts: number; promptChars: number; retainedBytes: number } {
  const gc = getGc();
  const fullGc = (): void => {
    for (let i = 0; i < 4; i++) gc();
  };
  const line = (i: number): string => `line ${i}: ${'the router sends requests to workers '.repeat(2)}`;
  const shared = Array.from({ length: 800 }, (_, i) => line(i).slice(0, 79)).join('\n');
  const prompts = quick ? 50 : 200;
  fullGc();
  const before = process.memoryUsage().heapUsed;
  let tok: HfTokenizer | undefined = HfTokenizer.load(FIXTURE);
  for (let p = 0; p < prompts; p++) {
    // A fresh string per prompt (not one shared rope): what a request body parse produces.
    const prompt = [shared, `unique question number ${p} about caching?`].join('\n');
    tok.encode(prompt);
  }
  fullGc();
  const retainedBytes = process.memoryUsage().heapUsed - before;
  tok = undefined;
  void tok;
  const out = { prompts, promptChars: shared.length + 40, retainedBytes };
  log(`memory: ${(retainedBytes / 1e6).toFixed(2)} MB retained after ${prompts} prompts of 64 KB`);
  return out;
}

const names = selected();
const repeatAt = process.argv.indexOf('--repeat');
const repeats = repeatAt === -1 ? 1 : Number(process.argv[repeatAt + 1]);
if (!Number.isInteger(repeats) || repeats < 1) throw new RangeError('--repeat takes a positive integer');
for (const name of names) run(name, 2, 1); // JIT warm-up, its own tokenizer and index
const results: Record<string, Result> = {};
for (const name of names) {
  const r = run(name, 1, repeats);
  results[name] = r;
  log(
    `${name}: ${r.medianUs} us median, ${r.p99Us} us p99 per request (CPU ${r.cpuMedianUs} / ${r.cpuP99Us} us; ` +
      `${r.meanTokens} tokens; ` +
      `tokenize ${r.meanTokenizeUs} + keys ${r.meanKeysUs} + lookup ${r.meanLookupUs} us mean)`,
  );
}
process.stdout.write(
  `${JSON.stringify({ benchmark: 'exact-tokenize', quick, repeats, blockSize: BS, workers: WORKERS.length, results, memory: memory() }, null, 2)}\n`,
);
