/**
 * A/B of router settings on the routing benchmark's stack, printed only (never written to
 * bench/results or docs/benchmarks.md): what a change to the cost model is measured with before it
 * lands.
 *
 *   npx tsx bench/routing-ab.ts --workloads=hot-burst,eviction-pressure --repeats=2 \
 *     'rr={"policy":"round_robin"}' 'default={"policy":"cache_aware"}' \
 *     'off={"policy":"cache_aware","router":{"costIdleQueue":0}}'
 *
 * Each variant is `label=JSON`, the JSON a PolicyVariant without its label (`policy`, `router`: config
 * keys as in docs/configuration.md, `replicas`, `kvEvents`, `simTiming`: the simulators' timing for
 * that variant, e.g. `{"prefillMsPerToken":0}` for an upper bound; `sessionAffinity`: requests carry
 * `x-session-id` and Envoy hashes ext_proc streams over the replicas on it). Runs are interleaved (run 1 of every
 * variant, then run 2, ...) and each cell is their mean, as in `npm run bench -- routing --repeats=N`;
 * one line per cell: output tokens/s with its ratio to the first variant, hit rate, max/mean processed,
 * TTFT p50/p90, router CPU per request (every replica's, /proc), the host's steal time, the decisions by
 * branch (vllm_router_policy_decisions_total, summed over replicas), then each run's tokens/s and the
 * requests per worker (summed over the runs).
 * `--shared-pool` / `--no-shared-pool`: the simulators' running requests and prefix caches share one
 * block pool, as vLLM's (SimulatorOptions.sharedBlockPool), or not, on every workload (default:
 * routing-bench.ts SHARED_POOL_WORKLOADS); `--cache-blocks=N`: N blocks per worker (before the KV runs'
 * scaling) instead of the workload's default. `--slow=N:F`: a fleet of mixed hardware, the first N
 * simulators F times slower in everything (prefill, decode steps, overhead). `--peers`: the reference
 * router and the SGLang gateway too (their cache_aware and round_robin, one run each, after the
 * variants; bench/peers.ts installs them into `.venv-peers`, skipped with a note where it cannot).
 * `--no-stream`: every request asks for a whole response (`stream: false`), as batch clients do.
 * `--kv-events`: the simulators publish KV events (needed by variants with `"kvEvents": true`).
 * With KV events, the mean lag of the live event batches the routers decoded (vllm_router_kv_event_lag_seconds).
 * `BENCH_DUMP_DECISIONS=<file>` appends one JSON line per request (routing-bench.ts `dumpDecisions`; add
 * `"decisionHeader": true` to a variant's router config to get each decision's inputs in it).
 */
import { exitOnSignals } from './bench-stack.js';
import { runRoutingBench, type PolicyVariant } from './routing-bench.js';
import { isWorkloadName, type WorkloadName } from './workloads.js';

function usage(message: string): never {
  process.stderr.write(
    `${message}\nusage: npx tsx bench/routing-ab.ts --workloads=a,b [--repeats=N] [--seed=N] [--kv-events] 'label={"policy":"..."}' ...\n`,
  );
  process.exit(2);
}

function parseVariant(arg: string): PolicyVariant {
  const at = arg.indexOf('=');
  if (at <= 0) usage(`not label=JSON: ${arg}`);
  let spec: unknown;
  try {
    spec = JSON.parse(arg.slice(at + 1));
  } catch (err) {
    usage(`variant ${arg.slice(0, at)}: ${(err as Error).message}`);
  }
  if (typeof spec !== 'object' || spec === null || typeof (spec as { policy?: unknown }).policy !== 'string')
    usage(`variant ${arg.slice(0, at)}: needs at least {"policy": "..."}`);
  return { ...(spec as Omit<PolicyVariant, 'label'>), label: arg.slice(0, at) };
}

const args = process.argv.slice(2);
const flag = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const workloads = (flag('workloads') ?? '').split(',').filter((w) => w.length > 0);
for (const w of workloads) {
  if (!isWorkloadName(w)) usage(`unknown workload ${w}`);
}
if (workloads.length === 0) usage('--workloads is required');
const repeats = Number(flag('repeats') ?? 2);
const seed = Number(flag('seed') ?? 1);
if (!Number.isInteger(repeats) || repeats < 1 || repeats > 10) usage('--repeats must be 1-10');
if (!Number.isInteger(seed)) usage('--seed must be an integer');
/** `--slow=N:F`: the first N simulators F times slower (routing-bench.ts `slowWorkers`). */
function parseSlow(v: string): { count: number; factor: number } {
  const [n, f] = v.split(':').map(Number);
  if (!Number.isInteger(n) || n! < 0 || !(f! > 0)) usage(`--slow wants N:F (e.g. 4:2), got ${v}`);
  return { count: n!, factor: f! };
}
const variants = args.filter((a) => !a.startsWith('--')).map(parseVariant);
if (variants.length === 0) usage('give at least one variant');

exitOnSignals();
const result = await runRoutingBench({
  workloads: workloads as WorkloadName[],
  variants,
  repeats,
  seed,
  kvEvents: args.includes('--kv-events'),
  peers: args.includes('--peers'),
  ...(args.includes('--shared-pool') ? { sharedBlockPool: workloads as WorkloadName[] } : {}),
  ...(args.includes('--no-shared-pool') ? { sharedBlockPool: [] } : {}),
  ...(args.includes('--no-stream') ? { stream: false } : {}),
  ...(flag('slow') !== undefined ? { slowWorkers: parseSlow(flag('slow')!) } : {}),
  ...(flag('cache-blocks') !== undefined
    ? { cacheBlocks: Object.fromEntries(workloads.map((w) => [w, Number(flag('cache-blocks'))])) }
    : {}),
  log: () => {},
});
for (const workload of workloads) {
  const cells = result.cells.filter((c) => c.workload === workload);
  const base = cells[0]?.outputTokPerSec ?? 0;
  for (const c of cells) {
    const ratio = base > 0 ? (c.outputTokPerSec / base).toFixed(3) : 'n/a';
    console.log(
      [
        workload,
        c.policy,
        `tok/s ${Math.round(c.outputTokPerSec)} (${ratio}x)`,
        `hit ${(c.hitRate * 100).toFixed(1)}%`,
        `max/mean ${c.maxOverMeanProcessed.toFixed(2)}`,
        `ttft p50 ${c.ttftP50Ms.toFixed(1)} p90 ${c.ttftP90Ms.toFixed(1)}`,
        `router cpu ${c.routerCpuUsPerRequest ?? 'n/a'} us/req`,
        `steal ${c.stealFraction !== undefined ? (c.stealFraction * 100).toFixed(1) : 'n/a'}%`,
        ...(c.kvEvents ? [`kv events ${JSON.stringify(c.kvEvents)}`] : []),
        ...(c.kvEvents?.lagCount
          ? [`kv event lag mean ${((c.kvEvents.lagSumSec / c.kvEvents.lagCount) * 1000).toFixed(2)} ms`]
          : []),
        ...(c.branches ? [`branches ${JSON.stringify(c.branches)}`] : []),
        ...(c.cacheReports ? [`cache reports ${JSON.stringify(c.cacheReports)}`] : []),
        `runs ${JSON.stringify(c.runs?.outputTokPerSec.map(Math.round) ?? [])}`,
        `per worker ${JSON.stringify(c.processedPerWorker)}`,
      ].join(' | '),
    );
  }
}
process.exit(0);
