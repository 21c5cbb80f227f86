/**
 * `npm run bench -- <routing|overhead|scale|replicas|kv-events|pd|all> [--quick] [--policies=a,b] [--workloads=a,b]`
 *
 * `--policies` / `--workloads` narrow the routing benchmark to some POLICY_VARIANTS labels / workloads
 * (a bounded run on a busy machine; both also narrow `replicas` and `kv-events`, whose variants are
 * REPLICA_VARIANTS and KV_VARIANTS); the peers (vllm-router, smg) run in a full routing run unless
 * BENCH_PEERS=0.
 *
 * Runs the named benchmark(s), writes `bench/results/<name>.json`, regenerates that benchmark's section
 * of docs/benchmarks.md (tables + SVG charts in docs/) and the generated summary. `--quick` shrinks every
 * size (seconds, for smoke runs; the doc marks such a run as quick). `overhead --cpu` runs only the
 * router-vs-Envoy CPU comparison (small, 64-chunk streams, 220 KB prompts at concurrency 16);
 * `overhead --scenarios=long-prompt` (or small, stream64, stream256) runs only those scenarios' plans
 * and profile pass (with --cpu: the CPU plans of those scenarios);
 * `overhead --response-body-sample=N` passes the router that flag (1: every response body watched, as
 * before the router let Envoy skip bodies). `pd` is the
 * P/D benchmark per KV connector (bench/pd-bench.ts); `--connectors=nixl,mooncake` narrows it to some
 * PD_VARIANTS labels. `replicas` also runs router throughput per host with replicas pinned to cores
 * (bench/replica-saturation.ts); `replicas --saturation` runs only that part. `--repeats=N` (routing,
 * replicas, kv-events) runs every router cell N times, interleaved, and reports their means with the
 * hit rates' range (bench/merge-cells.ts): one cell's hit rate moves by 5-10 points between runs here.
 * Those three measure every cell after a warm-up pass on the same stack (RoutingBenchOptions.warmUp);
 * `--no-warm-up` measures fresh processes instead.
 *
 * `npm run bench -- render` runs nothing: it publishes every section again from its last result in
 * bench/results/ (what a change to a report is published with), the routing targets recomputed from
 * the cells (routingTargets).
 */
import {
  isOverheadScenario,
  runOverheadBench,
  type OverheadResult,
  type OverheadScenario,
} from './overhead-bench.js';
import { exitOnSignals } from './bench-stack.js';
import { readResult, writeAsset, writeResult, writeSection, type SectionName } from './report-doc.js';
import {
  renderOverhead,
  renderRouting,
  renderScale,
  renderSummary,
  type RenderedSection,
} from './report-sections.js';
import { renderReplicas } from './report-replicas.js';
import { runReplicaSaturation, type SaturationResult } from './replica-saturation.js';
import { kvEventTargets, renderKvEvents } from './report-kv-events.js';
import {
  KV_VARIANTS,
  POLICY_VARIANTS,
  REPLICA_VARIANTS,
  routingTargets,
  runRoutingBench,
  type PolicyVariant,
  type RoutingResult,
} from './routing-bench.js';
import { runScaleBench, type ScaleResult } from './scale-bench.js';
import { runPdBench, type PdResult } from './pd-bench.js';
import { PD_VARIANTS } from './pd-fleet.js';
import { renderPd } from './report-pd.js';
import { isWorkloadName, type WorkloadName } from './workloads.js';

const NAMES = ['routing', 'overhead', 'scale', 'replicas', 'kv-events', 'pd'] as const;
type BenchName = (typeof NAMES)[number];

/** The routing-style benchmarks and their variants (what `--policies` / `--workloads` narrow). */
const VARIANTS_OF: Readonly<Record<string, readonly PolicyVariant[]>> = {
  routing: POLICY_VARIANTS,
  replicas: REPLICA_VARIANTS,
  'kv-events': KV_VARIANTS,
};

function usage(): never {
  process.stderr.write(
    'usage: npm run bench -- <routing|overhead|scale|replicas|kv-events|pd|all|render> [--quick] ' +
      '[--policies=a,b] [--workloads=a,b] (routing, replicas, kv-events) [--cpu] (overhead only) ' +
      '[--saturation] (replicas only: the pinned-replica throughput run alone) ' +
      "[--response-body-sample=N] (overhead only: the router's flag; 1 = every body watched) " +
      '[--scenarios=a,b] (overhead only: small, stream64, stream256, long-prompt) ' +
      '[--connectors=a,b] (pd only) [--repeats=N] (routing, replicas, kv-events: N runs per router cell, 1-10) ' +
      '[--no-warm-up] (routing, replicas, kv-events: measure each cell on fresh processes)\n',
  );
  process.exit(2);
}

async function publish(name: SectionName, section: RenderedSection): Promise<void> {
  for (const a of section.assets) writeAsset(a.file, a.svg);
  await writeSection(name, section.markdown);
}

async function publishSummary(): Promise<void> {
  await writeSection(
    'summary',
    renderSummary(
      readResult<RoutingResult>('routing'),
      readResult<OverheadResult>('overhead'),
      readResult<ScaleResult>('scale'),
      readResult<RoutingResult>('kv-events'),
    ),
  );
}

interface Narrowing {
  policies?: string[];
  workloads?: WorkloadName[];
  /** overhead: only the router-vs-Envoy CPU plans (cpuPlans in overhead-bench.ts). */
  cpuOnly?: boolean;
  /** pd: only these PD_VARIANTS labels. */
  connectors?: string[];
  /** replicas: only the pinned-replica saturation run (bench/replica-saturation.ts). */
  saturationOnly?: boolean;
  /** routing, replicas, kv-events: runs per router cell, merged (bench/merge-cells.ts). */
  repeats?: number;
  /** routing, replicas, kv-events: false = cells measured on fresh processes (`--no-warm-up`). */
  warmUp?: boolean;
  /** overhead: the router's --response-body-sample (1 = every response body watched). */
  responseBodySample?: number;
  /** overhead: only these scenarios. */
  scenarios?: OverheadScenario[];
}

/** Where the replicas benchmark keeps its saturation part (bench/results/<name>.json). */
const SATURATION_RESULT = 'replicas-saturation';

async function runOne(
  name: BenchName,
  quick: boolean,
  command: string,
  narrow: Narrowing = {},
): Promise<void> {
  const log = (line: string): void => {
    process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`);
  };
  const t0 = performance.now();
  log(`${name}: start${quick ? ' (quick)' : ''}`);
  switch (name) {
    case 'routing': {
      const r = await runRoutingBench({ quick, command, log, peers: !quick, ...narrow });
      writeResult('routing', r);
      await publish('routing', renderRouting(r));
      break;
    }
    case 'overhead': {
      const r = await runOverheadBench({
        quick,
        command,
        log,
        cpuOnly: narrow.cpuOnly,
        profile: !narrow.cpuOnly,
        responseBodySample: narrow.responseBodySample,
        scenarios: narrow.scenarios,
      });
      writeResult('overhead', r);
      await publish('overhead', renderOverhead(r));
      break;
    }
    case 'replicas': {
      // The routing cells, then the pinned-replica saturation run; `--saturation` runs only the latter,
      // a narrowed run (--policies/--workloads) only the former (the other part's last result is kept).
      let r = readResult<RoutingResult>('replicas');
      if (!narrow.saturationOnly) {
        r = await runRoutingBench({
          quick,
          command,
          log,
          variants: REPLICA_VARIANTS,
          kvEvents: true,
          workloads: narrow.workloads ?? ['shared-prefix', 'multi-turn', 'eviction-pressure'],
          ...(narrow.policies ? { policies: narrow.policies } : {}),
          ...(narrow.repeats ? { repeats: narrow.repeats } : {}),
          ...(narrow.warmUp === false ? { warmUp: false } : {}),
        });
        writeResult('replicas', r);
      }
      let saturation = readResult<SaturationResult>(SATURATION_RESULT);
      if (narrow.saturationOnly || (!narrow.policies && !narrow.workloads)) {
        saturation = await runReplicaSaturation({ quick, command, log });
        writeResult(SATURATION_RESULT, saturation);
      }
      await publish('replicas', renderReplicas(r, saturation));
      break;
    }
    case 'kv-events': {
      const r = await runRoutingBench({
        quick,
        command,
        log,
        variants: KV_VARIANTS,
        kvEvents: true,
        targets: kvEventTargets,
        ...(narrow.workloads ? { workloads: narrow.workloads } : {}),
        ...(narrow.policies ? { policies: narrow.policies } : {}),
        ...(narrow.repeats ? { repeats: narrow.repeats } : {}),
        ...(narrow.warmUp === false ? { warmUp: false } : {}),
      });
      writeResult('kv-events', r);
      await publish('kv-events', renderKvEvents(r));
      break;
    }
    case 'pd': {
      const r = await runPdBench({ quick, command, log, peers: !quick, connectors: narrow.connectors });
      writeResult('pd', r);
      await publish('pd', renderPd(r));
      break;
    }
    case 'scale': {
      const r = await runScaleBench({ quick, command, log });
      writeResult('scale', r);
      await publish('scale', renderScale(r));
      break;
    }
  }
  await publishSummary();
  log(`${name}: done in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
}

/** `render`: every section from its last result, no benchmark run. */
async function renderAll(): Promise<void> {
  const routing = readResult<RoutingResult>('routing');
  if (routing) {
    routing.targets = routingTargets(routing.cells, routing.setup.workloads);
    writeResult('routing', routing);
    await publish('routing', renderRouting(routing));
  }
  const overhead = readResult<OverheadResult>('overhead');
  if (overhead) await publish('overhead', renderOverhead(overhead));
  const replicas = readResult<RoutingResult>('replicas');
  const saturation = readResult<SaturationResult>(SATURATION_RESULT);
  if (replicas || saturation) await publish('replicas', renderReplicas(replicas, saturation));
  const kv = readResult<RoutingResult>('kv-events');
  if (kv) await publish('kv-events', renderKvEvents(kv));
  const pd = readResult<PdResult>('pd');
  if (pd) await publish('pd', renderPd(pd));
  const scale = readResult<ScaleResult>('scale');
  if (scale) await publish('scale', renderScale(scale));
  await publishSummary();
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.length === 1 && args[0] === 'render') return renderAll();
  const quick = args.includes('--quick');
  const listFlag = (flag: string): string[] | undefined =>
    args
      .find((a) => a.startsWith(`--${flag}=`))
      ?.slice(flag.length + 3)
      .split(',');
  const narrow: Narrowing = { policies: listFlag('policies') };
  const workloads = listFlag('workloads');
  if (workloads && !workloads.every(isWorkloadName)) usage();
  if (workloads) narrow.workloads = workloads as WorkloadName[];
  if (args.includes('--cpu')) narrow.cpuOnly = true;
  if (args.includes('--saturation')) narrow.saturationOnly = true;
  if (args.includes('--no-warm-up')) narrow.warmUp = false;
  const repeats = args.find((a) => a.startsWith('--repeats='))?.slice('--repeats='.length);
  if (repeats !== undefined) {
    const n = Number(repeats);
    if (!Number.isInteger(n) || n < 1 || n > 10) usage();
    narrow.repeats = n;
  }
  const sample = args.find((a) => a.startsWith('--response-body-sample='));
  if (sample !== undefined) {
    const n = Number(sample.slice('--response-body-sample='.length));
    if (!Number.isInteger(n) || n < 1) usage();
    narrow.responseBodySample = n;
  }
  const scenarios = listFlag('scenarios');
  if (scenarios && !scenarios.every(isOverheadScenario)) usage();
  if (scenarios) narrow.scenarios = scenarios as OverheadScenario[];
  narrow.connectors = listFlag('connectors');
  if (narrow.connectors?.some((c) => !PD_VARIANTS.some((v) => v.label === c))) usage();
  const known = (a: string): boolean =>
    a === '--quick' ||
    a === '--cpu' ||
    a === '--saturation' ||
    a === '--no-warm-up' ||
    a.startsWith('--policies=') ||
    a.startsWith('--workloads=') ||
    a.startsWith('--repeats=') ||
    a.startsWith('--response-body-sample=') ||
    a.startsWith('--scenarios=') ||
    a.startsWith('--connectors=');
  const positional = args.filter((a) => !a.startsWith('--'));
  if (positional.length !== 1 || args.some((a) => a.startsWith('--') && !known(a))) usage();
  const name = positional[0]!;
  const variants = VARIANTS_OF[name];
  if (narrow.policies && !narrow.policies.every((p) => variants?.some((v) => v.label === p))) usage();
  if (narrow.workloads && variants === undefined) usage();
  if ((narrow.cpuOnly || narrow.responseBodySample || narrow.scenarios) && name !== 'overhead') usage();
  if (narrow.connectors && name !== 'pd') usage();
  if (narrow.repeats && !['routing', 'replicas', 'kv-events'].includes(name)) usage();
  if (narrow.warmUp === false && !['routing', 'replicas', 'kv-events'].includes(name)) usage();
  if (narrow.saturationOnly && (name !== 'replicas' || narrow.policies || narrow.workloads)) usage();
  const command = `npm run bench -- ${args.join(' ')}`;
  if (name === 'all') {
    for (const n of NAMES) await runOne(n, quick, command);
  } else if ((NAMES as readonly string[]).includes(name)) {
    await runOne(name as BenchName, quick, command, narrow);
  } else {
    usage();
  }
}

exitOnSignals();
main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`bench failed: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
