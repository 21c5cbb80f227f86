/**
 * Cost of one routing step over a persistent discovery pool: reconcile (registry snapshot -> pool
 * membership) + select + reserve (guard taken, policy.routed) + release, with 1,000 registered workers
 * per pool. Prints one JSON object to stdout (progress and a table on stderr).
 *
 *   npx tsx bench/pool-select.bench.ts           full run (~20-40 s on 2 shared cores)
 *   npx tsx bench/pool-select.bench.ts --quick   seconds-long smoke run (fewer iterations)
 *
 * Setup: a real ServiceRegistry (TTL 5 s) on a fake clock that never moves (nothing expires unless a
 * scenario says so), 1,000 workers registered per role (prefill, decode, regular), one WorkerPool per
 * role with a policy from createPolicy. 64 requests stay outstanding (a ring of held guards: each step
 * releases the oldest), so loads are not all 0 and least-loaded comparisons do real work.
 *
 * Policies: round_robin, power_of_two (seeded rng), cache_aware (default thresholds) with realistic
 * prompts: ~4 KB = a 2 KB system prompt from one of 64 groups + a 2 KB unique tail; the tree is
 * warmed with 2,000 routed prompts before timing.
 *
 * Scenarios (only the request path is timed; registry writes happen just before t0):
 * - steady:        the snapshot is unchanged (the common case: reconcile is an identity check);
 * - pd_pair:       steady, but one P/D request: reconcile + select + reserve on prefill AND decode;
 * - heartbeat:     a plain heartbeat of one worker each step (same generation; the registry keeps its
 *                  cached snapshot, see service-registry.ts);
 * - heartbeat_invalidating: a heartbeat whose metadata changed each step, which drops the registry's
 *                  cached snapshot: the step pays a snapshot rebuild (1,000 entries, sorted) and a full
 *                  reconcile (1,000 entries, all kept);
 * - churn:         each step one worker deregisters and a new url registers (pool size stays 1,000):
 *                  snapshot rebuild, reconcile, one policy removeWorker + one addWorker.
 * Figures are per step, in microseconds (median, p99, mean) from process.hrtime.bigint().
 * Absolute figures on a shared 2-core machine are noisy: compare within one run.
 */
import { ServiceRegistry } from '../src/discovery/service-registry.js';
import { createPolicy } from '../src/routing/create-policy.js';
import type { PolicyName } from '../src/routing/policy.js';
import { choose, reserve, type RoutingContext } from '../src/routing/selector.js';
import type { LoadGuard } from '../src/workers/load-guard.js';
import { ROLES, type Role } from '../src/workers/role.js';
import { WorkerPool } from '../src/workers/worker-pool.js';
import { seededRandom as rng } from '../src/util/seeded-random.js';

const quick = process.argv.includes('--quick');
const WORKERS = 1000;
const OUTSTANDING = 64;
const GROUPS = 64;
const PROMPT_HALF = 2048;
const WARM_PROMPTS = quick ? 500 : 2000;
const ITER = {
  steady: quick ? 2000 : 20_000,
  changed: quick ? 200 : 2000,
  warmup: quick ? 200 : 1000,
};
const POLICIES: readonly PolicyName[] = ['round_robin', 'power_of_two', 'cache_aware'];
const SCENARIOS = ['steady', 'pd_pair', 'heartbeat', 'heartbeat_invalidating', 'churn'] as const;
type Scenario = (typeof SCENARIOS)[number];

function log(msg: string): void {
  process.stderr.write(`${msg}\n`);
}

function words(r: () => number, chars: number): string {
  const parts: string[] = [];
  let n = 0;
  while (n < chars) {
    const w = Math.floor(r() * 2 ** 40).toString(36);
    parts.push(w, ' ');
    n += w.length + 1;
  }
  return parts.join('').slice(0, chars);
}

const SYSTEM_PROMPTS = Array.from({ length: GROUPS }, (_, g) => words(rng(1000 + g), PROMPT_HALF));

/** Prompt i: the system prompt of group i % 64 + a unique 2 KB tail (a fresh flat string). */
function promptText(i: number): string {
  return [SYSTEM_PROMPTS[i % GROUPS], words(rng(7_000_000 + i), PROMPT_HALF)].join('');
}

function quantile(sorted: readonly number[], q: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i] as number;
}

const round = (x: number): number => Math.round(x * 100) / 100;

interface Fixture {
  registry: ServiceRegistry;
  pools: Record<Role, WorkerPool>;
  nextPort: number;
  live: Record<Role, string[]>;
  held: LoadGuard[];
}

const url = (port: number): string =>
  `http://10.${(port >> 16) & 255}.${(port >> 8) & 255}.${port & 255}:8000`;
const endpoint = (port: number): string => url(port).slice('http://'.length);

function fixture(policy: PolicyName): Fixture {
  const clock = 1_000_000;
  const registry = new ServiceRegistry({ ttlMs: 5000, clock: () => clock });
  const live = { prefill: [], decode: [], regular: [] } as Record<Role, string[]>;
  let port = 1;
  for (const role of ROLES) {
    for (let i = 0; i < WORKERS; i++, port++) {
      registry.register({ role, url: url(port), endpoint: endpoint(port), zmqAddress: `${endpoint(port)}1` });
      live[role].push(url(port));
    }
  }
  const pools = {} as Record<Role, WorkerPool>;
  ROLES.forEach((role, k) => {
    pools[role] = new WorkerPool(role, createPolicy(policy, { rng: rng(17 + k) }), registry);
    pools[role].reconcile();
  });
  return { registry, pools, nextPort: port, live, held: [] };
}

/** One request on one pool: reconcile, choose, reserve; the guard joins the outstanding ring. */
function step(f: Fixture, role: Role, ctx: RoutingContext, now: number): void {
  const pool = f.pools[role];
  pool.reconcile();
  const chosen = choose(pool, ctx);
  if (chosen === undefined) throw new Error(`empty ${role} pool`);
  f.held.push(reserve(pool, chosen, {}, now).guard);
  if (f.held.length > OUTSTANDING) f.held.shift()?.release();
}

function contexts(policy: PolicyName, n: number, seed: number): RoutingContext[] {
  // Prompts matter only to cache_aware; the others get the same request shape without text work.
  const r = rng(seed);
  return Array.from({ length: n }, () => {
    const i = Math.floor(r() * 1_000_000);
    return { model: 'm', text: policy === 'cache_aware' ? promptText(i) : '', headers: {} };
  });
}

function run(
  policy: PolicyName,
  scenario: Scenario,
): { median_us: number; p99_us: number; mean_us: number; iterations: number } {
  const f = fixture(policy);
  // Warm the tree (cache_aware) and the JIT.
  const warm = contexts(policy, WARM_PROMPTS, 99);
  warm.forEach((c, i) => step(f, i % 2 === 0 ? 'regular' : 'decode', c, i));
  warm.forEach((c, i) => step(f, 'prefill', c, i));

  const iterations =
    scenario === 'steady' || scenario === 'pd_pair' || scenario === 'heartbeat' ? ITER.steady : ITER.changed;
  // A bounded pool of distinct prompts, cycled (building 20,000 4 KB prompts up front would dominate).
  const ctxs = contexts(policy, Math.min(iterations + ITER.warmup, 2000), 5);
  const samples = new Float64Array(iterations);
  const r = rng(3);
  let seq = 0;
  const before = (): void => {
    switch (scenario) {
      case 'heartbeat':
      case 'heartbeat_invalidating': {
        const u = f.live.regular[Math.floor(r() * WORKERS)] as string;
        const e = u.slice('http://'.length);
        const res = f.registry.register({
          role: 'regular',
          url: u,
          endpoint: e,
          zmqAddress: `${e}1`,
          ...(scenario === 'heartbeat_invalidating' ? { metadata: { seq: seq++ } } : {}),
        });
        if ('rejected' in res || res.event !== 'heartbeat') throw new Error('expected a heartbeat');
        return;
      }
      case 'churn': {
        const k = Math.floor(r() * f.live.regular.length);
        const gone = f.live.regular[k] as string;
        f.registry.deregister('regular', gone);
        const port = f.nextPort++;
        f.registry.register({ role: 'regular', url: url(port), endpoint: endpoint(port) });
        f.live.regular[k] = url(port);
        return;
      }
      default:
        return;
    }
  };
  const once = (i: number): void => {
    const c = ctxs[i % ctxs.length] as RoutingContext;
    if (scenario === 'pd_pair') {
      step(f, 'prefill', c, i);
      step(f, 'decode', c, i);
    } else {
      step(f, 'regular', c, i);
    }
  };
  for (let i = 0; i < ITER.warmup; i++) {
    before();
    once(i);
  }
  for (let i = 0; i < iterations; i++) {
    before();
    const t0 = process.hrtime.bigint();
    once(i);
    samples[i] = Number(process.hrtime.bigint() - t0) / 1000;
  }
  for (const g of f.held.splice(0)) g.release();
  for (const role of ROLES) {
    if (f.pools[role].size !== WORKERS) throw new Error(`${role} pool has ${f.pools[role].size} workers`);
    if (f.pools[role].workers.some((w) => w.load !== 0)) throw new Error(`${role} pool has load left`);
  }
  const sorted = Array.from(samples).sort((a, b) => a - b);
  const mean = sorted.reduce((s, x) => s + x, 0) / sorted.length;
  return {
    median_us: round(quantile(sorted, 0.5)),
    p99_us: round(quantile(sorted, 0.99)),
    mean_us: round(mean),
    iterations,
  };
}

const results: Array<{
  policy: PolicyName;
  scenario: Scenario;
  median_us: number;
  p99_us: number;
  mean_us: number;
  iterations: number;
}> = [];
for (const policy of POLICIES) {
  for (const scenario of SCENARIOS) {
    const res = run(policy, scenario);
    results.push({ policy, scenario, ...res });
    log(
      `${policy.padEnd(13)} ${scenario.padEnd(23)} median ${String(res.median_us).padStart(8)} us   p99 ${String(res.p99_us).padStart(8)} us`,
    );
  }
}

process.stdout.write(
  `${JSON.stringify(
    {
      bench: 'pool-select',
      quick,
      node: process.version,
      workers_per_pool: WORKERS,
      outstanding_requests: OUTSTANDING,
      prompt_chars: { cache_aware: 2 * PROMPT_HALF, others: 0 },
      unit: 'microseconds per step (reconcile + select + reserve + release; pd_pair = both roles)',
      results,
    },
    null,
    2,
  )}\n`,
);
