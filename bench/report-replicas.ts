/**
 * Renders the replicas benchmark (routing cells run with 1, 2 and 4 router replicas behind one Envoy,
 * with and without KV events) into its docs/benchmarks.md section: per workload, each replica count
 * against one replica of the same mode (approximate tree only, or exact KV events), and issue 14's
 * targets: two replicas keep >= 97% of one replica's hit rate with exact events, >= 85% without; then
 * router throughput per host with replicas pinned to cores (bench/replica-saturation.ts), its own run.
 */
import { stepBudgetNote, type RenderedSection } from './report-sections.js';
import type { SaturationResult } from './replica-saturation.js';
import { findCell, type RoutingCell, type RoutingResult } from './routing-bench.js';
import {
  hitRateText,
  ratio,
  repeatsNote,
  routerCpuText,
  runHeader,
  table,
  targetsBlock,
  passesNote,
  poolNote,
  stealNote,
  warmUpNote,
} from './report-doc.js';

/** Without KV events each replica's prefix tree sees only its own share of the traffic. */
const APPROXIMATE_TARGET = 0.85;
/** With KV events every replica sees every worker's cache. */
const EXACT_TARGET = 0.97;

/** The single-replica cell of a variant's mode ('cache_aware exact x2 no-home' -> 'cache_aware exact'). */
function baseLabel(label: string): string {
  return label.replace(/ x\d+( .*)?$/, '');
}

export function renderReplicas(r: RoutingResult | undefined, saturation?: SaturationResult): RenderedSection {
  const lines: string[] = ['## Router replicas', ''];
  if (r !== undefined) lines.push(...routingPart(r));
  if (saturation !== undefined) lines.push(...saturationPart(saturation));
  return { markdown: lines.join('\n'), assets: [] };
}

function saturationPart(s: SaturationResult): string[] {
  const [one, two] = s.arms;
  const rows = s.arms.map((a) => [
    a.label,
    a.reqPerSec.toFixed(0),
    one ? ratio(a.reqPerSec, one.reqPerSec) : 'n/a',
    a.routerCpuPerRequestUs.toFixed(0),
    one ? ratio(a.routerCpuPerRequestUs, one.routerCpuPerRequestUs) : 'n/a',
    a.replicaCpuMs.map((ms) => ms.toFixed(0)).join(' + '),
    a.envoyCpuPerRequestUs.toFixed(0),
    a.workersCpuPerRequestUs.toFixed(0),
    a.clientCpuPerRequestUs.toFixed(0),
    `${(a.hostBusy * 100).toFixed(0)}%`,
    a.latencyP50Ms.toFixed(1),
    a.latencyP99Ms.toFixed(1),
    `${a.errors}/${a.requests}`,
  ]);
  return [
    '### Router throughput per host, replicas pinned to cores',
    '',
    runHeader(s.info),
    '',
    `Small requests (${s.setup.request}), closed loop at concurrency ${s.setup.concurrency} through Envoy ` +
      `to one router replica pinned to core 0 (\`taskset -c 0\`) or two replicas pinned to cores 0 and 1, ` +
      `${s.setup.workers} simulated workers (${s.setup.simulator}). The arms alternate, ${s.setup.rounds} ` +
      `rounds of ${s.setup.requestsPerRound} requests each (fresh processes, ${s.setup.warmupPerReplica ?? 0} ` +
      'warm-up requests per replica discarded per round, so both arms measure JIT-warm processes), summed. Envoy (`--concurrency 2`), the workers and the ' +
      `client are not pinned: on this ${s.info.cores}-core host they share the replicas' cores, so the ` +
      'ratio is what a second pinned replica buys on a host that also runs its Envoy and load, not a ' +
      'router alone. Router CPU = utime + stime of every replica from /proc (10 ms ticks) per completed ' +
      'request; host busy = CPU of routers, Envoy, workers and client over wall time x cores.',
    '',
    table(
      [
        'arm',
        'requests/s',
        'vs 1 replica',
        'router CPU µs/request',
        'vs 1 replica',
        'CPU ms per replica',
        'Envoy µs/request',
        'workers µs/request',
        'client µs/request',
        'host busy',
        'latency p50 ms',
        'latency p99 ms',
        'errors',
      ],
      rows,
    ),
    '',
    two && one
      ? `Two pinned replicas vs one: **${s.throughputRatio.toFixed(2)}x requests/s** ` +
        `at saturation, router CPU per request ${s.routerCpuPerRequestRatio.toFixed(2)}x.`
      : '',
    '',
  ];
}

function routingPart(r: RoutingResult): string[] {
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const lines: string[] = [runHeader(r.info), ''];
  lines.push(
    `Setup as in "Routing quality" (${r.setup.workers} simulated workers, concurrency ${r.setup.concurrency}; ` +
      `${stepBudgetNote(r.setup.timing)}), ` +
      `with 1, 2 or 4 router replicas (${r.setup.routerProcess === false ? 'in-process' : 'each its own process'}, each with its own state, sharing nothing) behind one Envoy ` +
      'that round-robins ext_proc streams over them. Every simulator tokenizes with the fixture tokenizer and ' +
      'publishes KV events in every cell (as in "Exact prefix routing from KV events"). `cache_aware xN`: ' +
      "the replicas only have their own prefix trees, and a replica's tree sees only the requests it " +
      "routed itself; `cache_aware exact xN` and `kv_aware xN`: every replica subscribes to every worker's " +
      "KV events, so all of them see the workers' caches. `no-home`: the same with the prefix home off " +
      "(`--prefix-home-margin 0`: a prompt no worker holds goes to the best-scored worker of each replica's own " +
      'view instead of the rendezvous home every replica agrees on; src/routing/prefix-home.ts). ' +
      '`affinity`: every request carries a session key (`x-session-id`: its conversation, tenant or prompt ' +
      'group) and Envoy Maglev-hashes ext_proc streams over the replicas on it (docs/deploy-envoy.md, ' +
      '"Session affinity across replicas"), so each replica\'s tree sees every request of its sessions. ' +
      '`prefix`: no session key, as the generated envoy/envoy-replicas*.yaml: Envoy hashes each request on its ' +
      'prompt\'s opening (its body\'s first 256 bytes from `"messages"` or `"prompt"`) with bounded load, so ' +
      'requests that start alike reach one replica (docs/deploy-envoy.md, "Prefix affinity"). Ratios are ' +
      "against one replica of the same mode (prefix home on); spread is the busiest worker's processed " +
      'requests over the mean; router CPU sums the replicas.' +
      warmUpNote(r.setup.warmUp) +
      passesNote(r.setup.workloads) +
      poolNote(r.setup.workloads) +
      stealNote(r.cells) +
      repeatsNote(r.setup.repeats),
    '',
  );
  const targets: Array<[string, string, string, boolean]> = [];
  for (const w of workloads) {
    const rr = findCell(r.cells, w, 'round_robin');
    const one = (c: RoutingCell): RoutingCell | undefined => findCell(r.cells, w, baseLabel(c.policy));
    const rows = r.cells
      .filter((c) => c.workload === w)
      .map((c) => {
        const base = one(c);
        return [
          c.policy,
          hitRateText(c),
          base ? ratio(c.hitRate, base.hitRate) : 'n/a',
          c.outputTokPerSec.toFixed(0),
          base ? ratio(c.outputTokPerSec, base.outputTokPerSec) : 'n/a',
          rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a',
          c.ttftP50Ms.toFixed(0),
          Number.isFinite(c.ttftP90Ms) ? c.ttftP90Ms.toFixed(0) : 'n/a',
          c.maxOverMeanProcessed.toFixed(2),
          routerCpuText(c.routerCpuUsPerRequest),
          c.errors,
        ];
      });
    lines.push(
      `### ${w}`,
      '',
      table(
        [
          'variant',
          'hit rate',
          'hit vs 1 replica',
          'output tok/s',
          'tok/s vs 1 replica',
          'tok/s vs round_robin',
          'TTFT p50 ms',
          'TTFT p90 ms',
          'spread (max/mean processed)',
          'router CPU µs/request',
          'errors',
        ],
        rows,
      ),
      '',
    );
    for (const [mode, label, want, suffix] of [
      ['approximate tree', 'cache_aware', APPROXIMATE_TARGET, ''],
      ['exact KV events', 'cache_aware exact', EXACT_TARGET, ''],
      ['exact KV events', 'kv_aware', EXACT_TARGET, ''],
      ['approximate tree, session affinity', 'cache_aware', APPROXIMATE_TARGET, ' affinity'],
      ['exact KV events, session affinity', 'cache_aware exact', EXACT_TARGET, ' affinity'],
      ['approximate tree, prefix affinity', 'cache_aware', APPROXIMATE_TARGET, ' prefix'],
      ['exact KV events, prefix affinity', 'cache_aware exact', EXACT_TARGET, ' prefix'],
    ] as const) {
      const base = findCell(r.cells, w, label);
      const two = findCell(r.cells, w, `${label} x2${suffix}`);
      if (!base || !two) continue;
      const v = two.hitRate / base.hitRate;
      targets.push([
        `${w}: ${label} 2 replicas' hit rate vs 1 (${mode})`,
        `${v.toFixed(3)}x`,
        `>= ${want}x`,
        v >= want,
      ]);
    }
  }
  lines.push(...targetsBlock(targets.map(([name, value, target, met]) => ({ name, value, target, met }))));
  return lines;
}
