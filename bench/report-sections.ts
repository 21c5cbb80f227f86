/**
 * Renders each benchmark's result into its docs/benchmarks.md section (markdown tables, verdicts) and
 * its SVG charts, plus the summary section built from every result file present. Pure formatting:
 * the returned `assets` are written by the caller (bench/run.ts).
 */
import {
  saturationBudget,
  STREAMS_THROUGHPUT_TARGET,
  type OverheadResult,
  type OverheadRun,
  type RouterProfile,
} from './overhead-bench.js';
import { BOUND_LABEL, findCell, THROUGHPUT_TARGETS, type RoutingResult } from './routing-bench.js';
import type { ScaleResult } from './scale-bench.js';
import type { TimingModel } from '../src/sim/timing-model.js';
import { renderBarChart } from './svg-chart.js';
import {
  hitRateText,
  pct,
  ratio,
  repeatsNote,
  routerCpuText,
  passesNote,
  poolNote,
  stealNote,
  warmUpNote,
  runHeader,
  table,
  targetsBlock,
  targetVerdict,
  verdict,
} from './report-doc.js';

export interface RenderedSection {
  markdown: string;
  assets: Array<{ file: string; svg: string }>;
}

const num = (v: number | undefined, digits = 1): string =>
  v !== undefined && Number.isFinite(v) ? v.toFixed(digits) : 'n/a';

export function renderRouting(r: RoutingResult): RenderedSection {
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const policies = [...new Set(r.cells.map((c) => c.policy))];
  const lines: string[] = ['## Routing quality', '', runHeader(r.info), ''];
  const t = r.setup.timing;
  lines.push(
    `Setup: ${r.setup.workers} simulated vLLM workers (in the benchmark's process) behind the router ` +
      `(${r.setup.routerProcess === true ? 'its own process, compiled, like the peers' : 'in-process'}) and real ` +
      `Envoy; closed-loop client at concurrency ${r.setup.concurrency} sending every request of the workload ` +
      `(streaming, SSE parsed at the client). Simulator: TTFT = ${t.overheadMs} ms + ${t.prefillMsPerToken} ms x ` +
      `uncached prompt tokens on ${t.prefillLanes} prefill lane per worker (prefill capacity is finite), decode ` +
      `${t.baseItlMs} ms per step +${(t.itlGrowthPerSeq ?? 0) * 100}% per extra running sequence, at most ` +
      `${t.maxRunningSeqs} running; ${stepBudgetNote(t)}; time scale ${r.setup.timeScale}. Prefix cache per worker (blocks of 16 ` +
      `tokens, LRU): ${Object.entries(r.setup.cacheBlocks)
        .map(([w, b]) => `${w} ${b}`)
        .join(
          ', ',
        )}. A fresh stack per cell.${warmUpNote(r.setup.warmUp)}${passesNote(r.setup.workloads)}${poolNote(r.setup.workloads)}${stealNote(r.cells)} \`cache_aware\` runs with the router's defaults; ` +
      `\`cache_aware_per_request\` and \`cache_aware_global\` are the reference router's rules as explicit modes ` +
      `(\`--cache-aware-mode per_request|global\`, threshold 0.3, balance abs 64 / rel 1.5); \`cache_aware_per_request_abs8\` ` +
      `is \`per_request\` with \`--balance-abs-threshold 8\` (its default 64 cannot fire when a worker averages 8 ` +
      `requests). ` +
      (r.cells.some((c) => c.policy === BOUND_LABEL)
        ? `\`${BOUND_LABEL}\` is not a policy but the bound: round robin on simulators whose prefill costs ` +
          'nothing (every prompt token as if cached), what no routing can exceed on that workload in this run' +
          (r.cells.some((c) => c.policy === BOUND_LABEL && c.workload === 'external-load')
            ? ", except on external-load: there round robin still sends an eighth of the router's traffic to " +
              'each worker the direct clients fill, where it waits for KV blocks however free its prefill is, ' +
              'and a routing that reads their load can exceed it. '
            : '. ')
        : '') +
      peersLine(r) +
      repeatsNote(r.setup.repeats),
    '',
    ...workloadsAndTargets(r),
    ...sideBySide(r),
    'Peers for scale: SGLang cache-aware vs round robin on 64x16 shared-prefix, 8 workers: hit rate 20% -> 75% ' +
      '(3.8x), throughput 1.9x.',
    '',
  );
  for (const w of workloads) {
    const rr = findCell(r.cells, w, 'round_robin');
    lines.push(`### ${w}`, '');
    lines.push(
      table(
        [
          'policy',
          'hit rate',
          'vs RR',
          'TTFT p50 ms',
          'TTFT p99 ms',
          'ITL p50 ms',
          'output tok/s',
          'vs RR',
          'max/mean processed',
          'in-flight stddev/mean',
          'router CPU µs/request',
          'errors',
        ],
        policies.map((p) => {
          const c = findCell(r.cells, w, p);
          if (!c) return [p, 'n/a', '', '', '', '', '', '', '', '', '', ''];
          return [
            p,
            hitRateText(c),
            rr ? ratio(c.hitRate, rr.hitRate) : 'n/a',
            num(c.ttftP50Ms),
            num(c.ttftP99Ms),
            num(c.itlP50Ms),
            num(c.outputTokPerSec, 0),
            rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a',
            num(c.maxOverMeanProcessed, 2),
            num(c.inFlightCv, 2),
            routerCpuText(c.routerCpuUsPerRequest),
            c.errors > 0 ? `${c.errors} (${(c.firstError ?? '').slice(0, 60)})` : '0',
          ];
        }),
      ),
      '',
    );
  }
  const series = (f: (w: string, p: string) => number) =>
    policies.map((p) => ({ name: p, values: workloads.map((w) => f(w, p)) }));
  const cellOf = (w: string, p: string) => findCell(r.cells, w, p);
  const assets = [
    {
      file: 'bench-routing-hit-rate.svg',
      svg: renderBarChart({
        title: 'Prefix-cache hit rate by policy',
        yLabel: 'hit rate (%)',
        categories: workloads,
        series: series((w, p) => (cellOf(w, p)?.hitRate ?? NaN) * 100),
        format: (v) => (Number.isFinite(v) ? v.toFixed(0) : 'n/a'),
      }),
    },
    {
      file: 'bench-routing-throughput.svg',
      svg: renderBarChart({
        title: 'Output tokens/s relative to round robin',
        yLabel: 'x round robin',
        categories: workloads,
        series: series(
          (w, p) =>
            (cellOf(w, p)?.outputTokPerSec ?? NaN) / (cellOf(w, 'round_robin')?.outputTokPerSec ?? NaN),
        ),
        format: (v) => (Number.isFinite(v) ? v.toFixed(2) : 'n/a'),
        reference: {
          value: THROUGHPUT_TARGETS['shared-prefix']!,
          label: `target ${THROUGHPUT_TARGETS['shared-prefix']!.toFixed(1)}x (shared-prefix)`,
        },
      }),
    },
    {
      file: 'bench-routing-ttft-p50.svg',
      svg: renderBarChart({
        title: 'TTFT p50 at the client',
        yLabel: 'ms',
        categories: workloads,
        series: series((w, p) => cellOf(w, p)?.ttftP50Ms ?? NaN),
      }),
    },
  ];
  lines.push(
    '![hit rate](bench-routing-hit-rate.svg)',
    '',
    '![throughput vs round robin](bench-routing-throughput.svg)',
    '',
    '![TTFT p50](bench-routing-ttft-p50.svg)',
  );
  return { markdown: lines.join('\n'), assets };
}

/** Whether the simulators' prefill stalled their decode steps in a run (timing-model.ts `maxNumBatchedTokens`). */
export function stepBudgetNote(t: Partial<TimingModel>): string {
  const budget = t.maxNumBatchedTokens ?? 0;
  return budget > 0
    ? `prefill and decode share each engine step as in vLLM (a decode step taken while a prefill computes ` +
        `carries up to ${budget} of its tokens, \`--max-num-batched-tokens\`, so an uncached prompt stalls ` +
        'every sequence decoding on its worker)'
    : 'prefill never delays a decode step (a run from before the simulator modelled the shared step)';
}

/** The seeded workloads' parameters, then the targets table (routing and kv-events sections). */
export function workloadsAndTargets(r: RoutingResult): string[] {
  return [
    'Workloads (seeded, `bench/workloads.ts`):',
    '',
    ...Object.entries(r.setup.workloads).map(
      ([w, p]) =>
        `- \`${w}\`: ${Object.entries(p)
          .map(([k, v]) => `${k} ${String(v)}`)
          .join(', ')}`,
    ),
    '',
    ...targetsBlock(r.targets),
  ];
}

function peersLine(r: RoutingResult): string {
  const peers = Object.entries(r.setup.peers ?? {});
  if (peers.length === 0) {
    return 'Peers: not run in this run (optional; installed by `scripts/install-peers.sh`, skipped in CI).';
  }
  return (
    `Peers in the same run: ${peers.map(([p, v]) => `\`${p}\` ${v}`).join(', ')} (PyPI, \`.venv-peers\`), each ` +
    'as a whole proxy in front of a fresh set of the same simulators (no Envoy), with its own `cache_aware` ' +
    '(its defaults) and `round_robin`; rows `<peer> <policy>`.'
  );
}

/** One row per workload: output tokens/s of each front door's policies, and x its own round robin. */
function sideBySide(r: RoutingResult): string[] {
  const ours = ['cache_aware', 'cache_aware_per_request', 'cache_aware_global'];
  const peers = [
    ...new Set(r.cells.map((c) => c.policy).filter((p) => / (cache_aware|round_robin)$/.test(p))),
  ]
    .map((p) => p.replace(/ (cache_aware|round_robin)$/, ''))
    .filter((p, i, a) => a.indexOf(p) === i);
  const bound = r.cells.some((c) => c.policy === BOUND_LABEL) ? [BOUND_LABEL] : [];
  const columns = [...ours, ...peers.map((p) => `${p} cache_aware`), ...bound];
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const own = (label: string): string => {
    const peer = peers.find((p) => label.startsWith(`${p} `));
    return peer ? `${peer} round_robin` : 'round_robin';
  };
  const rows = workloads.map((w) => [
    w,
    ...columns.map((label) => {
      const c = findCell(r.cells, w, label);
      const rr = findCell(r.cells, w, own(label));
      if (!c) return 'n/a';
      return `${num(c.outputTokPerSec, 0)} (${rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a'}, hit ${pct(c.hitRate)})`;
    }),
  ]);
  return [
    '### Side by side',
    '',
    "Output tokens/s (x the same front door's own round robin, prefix-cache hit rate), one run:",
    '',
    table(['workload', ...columns], rows),
    '',
  ];
}

/** A `--cpu-prof` pass as markdown: heading, what ran, top functions and modules by self time. */
function profileSection(title: string, p: RouterProfile): string[] {
  return [
    `### ${title}`,
    '',
    `\`--cpu-prof\` of a separate router process (never of the measured runs): ${p.load}; ` +
      `${p.samples} busy samples in the load window, idle excluded.`,
    '',
    table(
      ['function (self time)', '% of busy'],
      p.topFunctions.map((e) => [`\`${e.name}\``, e.percent]),
    ),
    '',
    table(
      ['module', '% of busy'],
      p.byModule.map((e) => [`\`${e.name}\``, e.percent]),
    ),
    '',
  ];
}

const runLabel = (x: OverheadRun): string => `${x.scenario} c=${x.concurrency}`;

/** The concurrency-64 CPU budget paragraph (overhead-bench.ts saturationBudget), when the run has it. */
function budgetBlock(r: OverheadResult): string[] {
  const run = r.runs.find((x) => x.scenario === 'small' && x.concurrency === 64);
  const b = run ? saturationBudget(run, r.info.cores) : undefined;
  if (b === undefined) return [];
  const pct = (f: number): string => `${Math.round(f * 100)}%`;
  return [
    `Concurrency ${b.concurrency}, small requests, as a CPU budget (overhead-bench.ts \`saturationBudget\`): ` +
      `arm b kept the host's ${b.cores} cores ${pct(b.busyEnvoy)} busy and arm c ${pct(b.busyRouter)}; by ` +
      `Little's law the added median is about ${b.concurrency} / throughput c - ${b.concurrency} / throughput ` +
      `b = ${num(b.littleMs, 1)} ms (measured c-b p50: ${num(b.measuredP50Ms, 1)} ms). +${b.targetMs} ms needs ` +
      `arm c to serve ${num(b.neededReqPerSec, 0)} requests/s, which at the ${pct(b.busyRouter)} it reached ` +
      `allows ${num(b.allowedUs, 0)} us more host CPU per request than arm b. Arm c spent ` +
      `${num(b.hostAddedUs, 0)} us more (every process, /proc/stat), of which Envoy's own ext_proc work ` +
      `${num(b.envoyAddedUs, 0)} us (Envoy with the filter - without, /proc/<pid>/stat) and the router ` +
      `${num(b.routerUs, 0)} us.`,
    '',
  ];
}

export function renderOverhead(r: OverheadResult): RenderedSection {
  const lines: string[] = ['## Router overhead', '', runHeader(r.info), ''];
  lines.push(
    'Arms: (a) the simulated worker directly, (b) Envoy without ext_proc (static upstream = the worker), ' +
      '(c) Envoy + ext_proc + this router (child process, default config: policy cache_aware). Same client, ' +
      'same request list, one arm after the other. Added latency = per-request differences paired by request ' +
      'index (latency for non-streaming, TTFT for streams), then their median / p99 (never subtracted ' +
      'percentiles). Throughput c/b: requests/s, or streamed tokens/s for streams. Router CPU and the ' +
      "routed Envoy's CPU from /proc/<pid>/stat (10 ms ticks) over the same arm (c) run (in parentheses: the " +
      "plain Envoy's over arm b); per chunk = (stream " +
      'CPU - requests x small CPU per request) / chunks.',
    '',
    ...Object.entries(r.setup).map(([k, v]) => `- ${k}: ${String(v)}`),
    '',
    ...targetsBlock(r.targets),
    ...budgetBlock(r),
    'Peers: Envoy as a plain proxy +0.11 ms mean over direct (Nighthawk, 1000 rps); Envoy ext_proc with an ' +
      'echo processor ~+3 ms mean (~0.75 ms per round trip); GIE EPP with 220 KB prompts ~286 ms per request ' +
      'in the picker at 1200 concurrency.',
    '',
    '### Runs',
    '',
    table(
      [
        'scenario',
        'conc.',
        'requests',
        'errors a/b/c',
        'b-a p50 ms',
        'b-a p99 ms',
        'c-b p50 ms',
        'c-b p99 ms',
        'c-b mean ms',
        'thr. c/b',
        'req/s a / b / c',
        'CPU us/req router / Envoy (Envoy in b)',
        'CPU us/chunk router / Envoy',
      ],
      r.runs.map((x) => [
        x.scenario,
        x.concurrency,
        x.requests,
        `${x.arms.direct.errors}/${x.arms.envoy.errors}/${x.arms.router.errors}`,
        num(x.addedByEnvoyP50Ms, 2),
        num(x.addedByEnvoyP99Ms, 2),
        num(x.addedByRouterP50Ms, 2),
        num(x.addedByRouterP99Ms, 2),
        num(x.addedByRouterMeanMs, 2),
        num(x.throughputRatioRouterOverEnvoy, 2),
        `${num(x.arms.direct.reqPerSec, 0)} / ${num(x.arms.envoy.reqPerSec, 0)} / ${num(x.arms.router.reqPerSec, 0)}`,
        `${num(x.routerCpuPerRequestUs, 0)} / ${num(x.envoyCpuPerRequestUs, 0)}` +
          (x.envoyPlainCpuPerRequestUs === undefined ? '' : ` (${num(x.envoyPlainCpuPerRequestUs, 0)})`),
        x.routerCpuPerTokenEventUs === undefined
          ? ''
          : `${num(x.routerCpuPerTokenEventUs, 1)} / ${num(x.envoyCpuPerTokenEventUs, 1)}`,
      ]),
    ),
    '',
  );
  if (r.profile) lines.push(...profileSection('Router CPU profile (hot path)', r.profile));
  if (r.longPromptProfile) {
    lines.push(...profileSection('Router CPU profile (220 KB prompts)', r.longPromptProfile));
  }
  const labels = r.runs.map(runLabel);
  const assets = [
    {
      file: 'bench-overhead-added-latency.svg',
      svg: renderBarChart({
        title: 'Added latency, median of paired differences',
        yLabel: 'ms',
        categories: labels,
        series: [
          { name: 'Envoy over direct (b-a)', values: r.runs.map((x) => x.addedByEnvoyP50Ms) },
          { name: 'router over Envoy (c-b)', values: r.runs.map((x) => x.addedByRouterP50Ms) },
        ],
      }),
    },
    {
      file: 'bench-overhead-throughput.svg',
      svg: renderBarChart({
        title: 'Throughput of Envoy + router relative to Envoy alone (c/b)',
        yLabel: 'c / b',
        categories: labels,
        series: [{ name: 'c / b', values: r.runs.map((x) => x.throughputRatioRouterOverEnvoy) }],
        reference: {
          value: STREAMS_THROUGHPUT_TARGET,
          label: `target ${STREAMS_THROUGHPUT_TARGET} (256 streams)`,
        },
      }),
    },
  ];
  lines.push(
    '![added latency](bench-overhead-added-latency.svg)',
    '',
    '![throughput c/b](bench-overhead-throughput.svg)',
  );
  return { markdown: lines.join('\n'), assets };
}

export function renderScale(r: ScaleResult): RenderedSection {
  const lines: string[] = ['## Scale of state', '', runHeader(r.info), ''];
  const sizes = [...new Set(r.selection.map((c) => c.workers))];
  const policies = [...new Set(r.selection.map((c) => c.policy))];
  const cell = (p: string, n: number) => r.selection.find((c) => c.policy === p && c.workers === n);
  lines.push(
    'Selection: `select()` + `routed()` per request (what a pool does), 2 KB prompts over 64 shared ' +
      'prefixes, random loads 0-7. Membership: adding all N workers one by one with `addWorker()` ' +
      '(what pool reconciliation does), budget 30 s. Heap: after forced GC, workers + policy state.',
    '',
    table(
      ['policy', ...sizes.flatMap((n) => [`us/select @${n}`, `membership ms @${n}`, `heap KB @${n}`])],
      policies.map((p) => [
        p,
        ...sizes.flatMap((n) => {
          const c = cell(p, n);
          if (!c) return ['n/a', 'n/a', 'n/a'];
          if (!c.complete)
            return ['not measured', `**> ${c.membershipMs} (only ${c.added} of ${n} added)**`, 'n/a'];
          return [num(c.usPerSelection, 2), num(c.membershipMs, 2), num(c.heapBytes / 1024, 0)];
        }),
      ]),
    ),
    '',
  );
  const t = r.tree;
  lines.push(
    '### cache_aware tree at its size bound',
    '',
    table(
      ['measure', 'value'],
      [
        ['workers (tenants)', t.workers],
        ['maxTreeSize per worker (chars)', t.maxTreeSizeChars],
        [
          'prompt text routed through the tree',
          `${(t.fedBytes / 2 ** 20).toFixed(0)} MiB in ${t.requests} requests`,
        ],
        ['cached chars after maintain() (summed per worker)', t.cachedChars],
        ['bound (workers x maxTreeSize)', t.boundChars],
        ['evicted chars', t.evictedChars],
        ['heap held by tree + policy', `${(t.heapBytes / 2 ** 20).toFixed(1)} MiB`],
        ['heap bytes per cached char', t.heapBytesPerCachedChar],
        ['select + insert cost per KB of prompt', `${t.usPerKbRouted} us`],
        ['wall time', `${(t.wallMs / 1000).toFixed(1)} s`],
      ],
    ),
    '',
    'Peers: SGLang radix tree (Rust) insert 0.6 us (10 chars) to 1.08 us (100 chars); GIE approximate index ' +
      '~350 B per entry (a 64-char block).',
    '',
  );
  const assets = [
    {
      file: 'bench-scale-selection.svg',
      svg: renderBarChart({
        title: 'Selection cost (select + routed) by fleet size',
        yLabel: 'us per selection',
        categories: sizes.map((n) => `${n} workers`),
        series: policies.map((p) => ({
          name: p,
          values: sizes.map((n) => cell(p, n)?.usPerSelection ?? NaN),
        })),
      }),
    },
  ];
  lines.push('![selection cost](bench-scale-selection.svg)');
  return { markdown: lines.join('\n'), assets };
}

export function renderSummary(
  routing: RoutingResult | undefined,
  overhead: OverheadResult | undefined,
  scale: ScaleResult | undefined,
  /** The exact-prefix run (`kv-events`): its targets are routing targets of its own. */
  kvEvents?: RoutingResult,
): string {
  const lines: string[] = ['## Summary (generated from the latest results)', ''];
  if (routing) {
    const rr = findCell(routing.cells, 'shared-prefix', 'round_robin');
    const ca = findCell(routing.cells, 'shared-prefix', 'cache_aware');
    if (rr && ca) {
      lines.push(
        `- Routing (${routing.info.date.slice(0, 10)}${routing.info.quick ? ', quick' : ''}): cache_aware vs ` +
          `round robin on shared-prefix: hit rate ${pct(rr.hitRate)} -> ${pct(ca.hitRate)} ` +
          `(${ratio(ca.hitRate, rr.hitRate)}), output tokens/s ${ratio(ca.outputTokPerSec, rr.outputTokPerSec)}, ` +
          `TTFT p50 ${num(rr.ttftP50Ms, 0)} -> ${num(ca.ttftP50Ms, 0)} ms, max/mean load ${num(ca.maxOverMeanProcessed, 2)}.`,
      );
    }
  }
  if (overhead) {
    const small = overhead.runs.find((x) => x.scenario === 'small' && x.concurrency === 64);
    if (small) {
      lines.push(
        `- Overhead (${overhead.info.date.slice(0, 10)}${overhead.info.quick ? ', quick' : ''}): small requests at ` +
          `concurrency 64, router adds ${num(small.addedByRouterP50Ms, 2)} ms median (p99 ${num(small.addedByRouterP99Ms, 1)} ms) ` +
          `over Envoy alone; throughput c/b ${num(small.throughputRatioRouterOverEnvoy, 2)}; router CPU ` +
          `${num(small.routerCpuPerRequestUs, 0)} us per request.`,
      );
    }
  }
  if (scale) {
    lines.push(
      `- Scale (${scale.info.date.slice(0, 10)}${scale.info.quick ? ', quick' : ''}): cache_aware tree fed ` +
        `${(scale.tree.fedBytes / 2 ** 20).toFixed(0)} MiB stayed at ${(scale.tree.cachedChars / 2 ** 20).toFixed(1)} M chars ` +
        `(bound ${(scale.tree.boundChars / 2 ** 20).toFixed(0)} M), ${scale.tree.heapBytesPerCachedChar} heap bytes per cached char.`,
    );
  }
  const targets = [
    ...(routing?.targets.map((t) => ({ ...t, bench: 'routing' })) ?? []),
    ...(overhead?.targets.map((t) => ({ ...t, bench: 'overhead' })) ?? []),
    ...(kvEvents?.targets.map((t) => ({ ...t, bench: 'kv-events' })) ?? []),
  ];
  const incomplete = scale?.selection.filter((c) => !c.complete) ?? [];
  lines.push('', '### Every target', '');
  lines.push(
    table(
      ['benchmark', 'target', 'measured', 'wanted', 'verdict'],
      [
        ...targets.map((t) => [t.bench, t.name, t.value, t.target, targetVerdict(t)]),
        ...incomplete.map((c) => [
          'scale',
          `${c.policy}: membership of ${c.workers} workers`,
          `${c.added} added in ${c.membershipMs} ms`,
          'completes',
          verdict(false),
        ]),
      ],
    ),
  );
  const missed = targets.filter((t) => !t.met).length + incomplete.length;
  const unreachable = targets.filter((t) => !t.met && 'unreachable' in t && t.unreachable).length;
  lines.push(
    '',
    missed === 0
      ? 'Every target met.'
      : `${missed} target(s) missed${unreachable > 0 ? `, ${unreachable} of them beyond what any routing could reach in that run (the ceiling in the verdict)` : ''}: see "Analysis" below for the causes.`,
    'The router-replicas targets (hit rate kept with a second replica) are in "Router replicas" below.',
  );
  return lines.join('\n');
}
