/**
 * Renders the replicas benchmark (routing cells run with 1, 2 and 4 router replicas behind one Envoy)
 * into its docs/benchmarks.md section: per workload, each replica count against one replica.
 */
import type { RenderedSection } from './report-sections.js';
import { findCell, type RoutingResult } from './routing-bench.js';
import { ratio, runHeader, table, verdict } from './report-doc.js';

const pct = (v: number): string => (Number.isFinite(v) ? `${(v * 100).toFixed(1)}%` : 'n/a');

/** Without KV events each replica's prefix tree sees only its own share of the traffic. */
const APPROXIMATE_TARGET = 0.85;

export function renderReplicas(r: RoutingResult): RenderedSection {
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const lines: string[] = ['## Router replicas', '', runHeader(r.info), ''];
  lines.push(
    `Setup as in "Routing quality" (${r.setup.workers} simulated workers, concurrency ${r.setup.concurrency}), ` +
      'with 1, 2 or 4 router replicas (in-process, each with its own state, sharing nothing) behind one Envoy ' +
      "that round-robins ext_proc streams over them. A replica's prefix tree only sees the requests it " +
      'routed itself, so affinity is approximate per replica; the ratios below are against one replica.',
    '',
  );
  const targets: Array<[string, string, string, boolean]> = [];
  for (const w of workloads) {
    const one = findCell(r.cells, w, 'cache_aware');
    const rr = findCell(r.cells, w, 'round_robin');
    const rows = r.cells
      .filter((c) => c.workload === w)
      .map((c) => [
        c.policy,
        pct(c.hitRate),
        one ? ratio(c.hitRate, one.hitRate) : 'n/a',
        c.outputTokPerSec.toFixed(0),
        one ? ratio(c.outputTokPerSec, one.outputTokPerSec) : 'n/a',
        rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a',
        c.ttftP50Ms.toFixed(0),
        c.maxOverMeanProcessed.toFixed(2),
        c.errors,
      ]);
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
          'max/mean processed',
          'errors',
        ],
        rows,
      ),
      '',
    );
    const two = findCell(r.cells, w, 'cache_aware x2');
    if (one && two) {
      const v = two.hitRate / one.hitRate;
      targets.push([
        `${w}: 2 replicas' hit rate vs 1 (approximate tree)`,
        `${v.toFixed(2)}x`,
        `>= ${APPROXIMATE_TARGET}x`,
        v >= APPROXIMATE_TARGET,
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
