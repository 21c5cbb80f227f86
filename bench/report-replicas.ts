/**
 * Renders the replicas benchmark (routing cells run with 1, 2 and 4 router replicas behind one Envoy,
 * with and without KV events) into its docs/benchmarks.md section: per workload, each replica count
 * against one replica of the same mode (approximate tree only, or exact KV events), and issue 14's
 * targets: two replicas keep >= 97% of one replica's hit rate with exact events, >= 85% without.
 */
import type { RenderedSection } from './report-sections.js';
import { findCell, type RoutingCell, type RoutingResult } from './routing-bench.js';
import { ratio, runHeader, table, verdict } from './report-doc.js';

const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : 'n/a');

/** Without KV events each replica's prefix tree sees only its own share of the traffic. */
const APPROXIMATE_TARGET = 0.85;
/** With KV events every replica sees every worker's cache. */
const EXACT_TARGET = 0.97;

/** The single-replica cell of a variant's mode ('cache_aware exact x2' -> 'cache_aware exact'). */
function baseLabel(label: string): string {
  return label.replace(/ x\d+$/, '');
}

export function renderReplicas(r: RoutingResult): RenderedSection {
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const lines: string[] = ['## Router replicas', '', runHeader(r.info), ''];
  lines.push(
    `Setup as in "Routing quality" (${r.setup.workers} simulated workers, concurrency ${r.setup.concurrency}), ` +
      'with 1, 2 or 4 router replicas (in-process, each with its own state, sharing nothing) behind one Envoy ' +
      'that round-robins ext_proc streams over them. Every simulator tokenizes with the fixture tokenizer and ' +
      'publishes KV events in every cell (as in "Exact prefix routing from KV events"). `cache_aware xN`: ' +
      "the replicas only have their own prefix trees, and a replica's tree sees only the requests it " +
      "routed itself; `cache_aware exact xN` and `kv_aware xN`: every replica subscribes to every worker's " +
      "KV events, so all of them see the workers' caches. Ratios are against one replica of the same mode; spread is the " +
      "busiest worker's processed requests over the mean.",
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
          pct(c.hitRate),
          base ? ratio(c.hitRate, base.hitRate) : 'n/a',
          c.outputTokPerSec.toFixed(0),
          base ? ratio(c.outputTokPerSec, base.outputTokPerSec) : 'n/a',
          rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a',
          c.ttftP50Ms.toFixed(0),
          Number.isFinite(c.ttftP90Ms) ? c.ttftP90Ms.toFixed(0) : 'n/a',
          c.maxOverMeanProcessed.toFixed(2),
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
          'errors',
        ],
        rows,
      ),
      '',
    );
    for (const [mode, label, want] of [
      ['approximate tree', 'cache_aware', APPROXIMATE_TARGET],
      ['exact KV events', 'cache_aware exact', EXACT_TARGET],
      ['exact KV events', 'kv_aware', EXACT_TARGET],
    ] as const) {
      const base = findCell(r.cells, w, label);
      const two = findCell(r.cells, w, `${label} x2`);
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
  lines.push(
    '### Targets',
    '',
    table(
      ['target', 'measured', 'wanted', 'verdict'],
      targets.map(([n, m, t, ok]) => [n, m, t, verdict(ok)]),
    ),
    '',
  );
  return { markdown: lines.join('\n'), assets: [] };
}
