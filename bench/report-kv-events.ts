/**
 * Renders the KV-events benchmark (`npm run bench -- kv-events`: exact prefix data from the workers'
 * KV events vs the approximate tree vs round robin, one run) into its docs/benchmarks.md section, and
 * computes issue 13's targets from its cells:
 * - on every workload, the exact variants' hit rate >= the approximate (`cache_aware`) one's;
 * - on `eviction-pressure`, exact (`cache_aware exact`) TTFT p90 <= 0.5x and output tokens/s >= 1.15x
 *   of approximate.
 */
import { stepBudgetNote, workloadsAndTargets, type RenderedSection } from './report-sections.js';
import { findCell, type RoutingCell, type RoutingResult, type RoutingTarget } from './routing-bench.js';
import {
  hitRateText,
  ratio,
  repeatsNote,
  routerCpuText,
  runHeader,
  table,
  passesNote,
  poolNote,
  stealNote,
  warmUpNote,
} from './report-doc.js';
import { round } from './stats.js';

const APPROX = 'cache_aware';
const EXACT = ['cache_aware exact', 'kv_aware'] as const;
const EVICTION = 'eviction-pressure';
const TTFT_P90_MAX = 0.5;
const THROUGHPUT_MIN = 1.15;

const num = (v: number, digits = 0): string => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a');

export function kvEventTargets(cells: readonly RoutingCell[]): RoutingTarget[] {
  const out: RoutingTarget[] = [];
  for (const w of [...new Set(cells.map((c) => c.workload))]) {
    const approx = findCell(cells, w, APPROX);
    if (!approx) continue;
    for (const label of EXACT) {
      const exact = findCell(cells, w, label);
      if (!exact) continue;
      // Hit rates are rounded to 3 decimals in the cells; equal counts as met.
      out.push({
        name: `${label} ${w} hit rate vs ${APPROX} (approximate)`,
        value: round(exact.hitRate - approx.hitRate),
        target: '>= 0 (difference)',
        met: exact.hitRate >= approx.hitRate,
      });
      if (w !== EVICTION) continue;
      const ttft = exact.ttftP90Ms / approx.ttftP90Ms;
      out.push({
        name: `${label} ${w} TTFT p90 vs ${APPROX}`,
        value: round(ttft),
        target: `<= ${TTFT_P90_MAX}x`,
        met: ttft <= TTFT_P90_MAX,
      });
      const tput = exact.outputTokPerSec / approx.outputTokPerSec;
      out.push({
        name: `${label} ${w} throughput vs ${APPROX}`,
        value: round(tput),
        target: `>= ${THROUGHPUT_MIN}x`,
        met: tput >= THROUGHPUT_MIN,
      });
    }
  }
  return out;
}

export function renderKvEvents(r: RoutingResult): RenderedSection {
  const workloads = [...new Set(r.cells.map((c) => c.workload))];
  const lines: string[] = ['## Exact prefix routing from KV events', '', runHeader(r.info), ''];
  const kv = r.setup.kvEvents;
  lines.push(
    `Setup as in "Routing quality" (${r.setup.workers} simulated workers, concurrency ${r.setup.concurrency}, ` +
      'one fresh stack per cell), except that every simulator, in every cell, tokenizes with the fixture ' +
      `tokenizer (\`${kv?.tokenizer ?? 'test/fixtures/tokenizer'}\`, vocabulary 512, ~1.8 characters per ` +
      'token), keeps its prefix cache in 16-token blocks and publishes KV events (BlockStored, BlockRemoved ' +
      `on eviction) with a replay endpoint; cache capacity, prefill cost per token and the step budget are ` +
      `scaled by ${kv?.tokenRatio ?? 'n/a'} so a cache holds the same share of the working set as in the ` +
      `routing run; ${stepBudgetNote(r.setup.timing)}. ` +
      'Variants differ only in what the router knows: `cache_aware` (default cost mode) has only its ' +
      'approximate prefix tree; `cache_aware exact` is the same policy with `--kv-event-source` for every ' +
      'worker and `--tokenizer` (the cost model then uses the exact cached tokens); `kv_aware` is the ' +
      "reference router's rule on the same events. Cache per worker (blocks): " +
      Object.entries(r.setup.cacheBlocks)
        .filter(([w]) => workloads.includes(w as RoutingCell['workload']))
        .map(([w, b]) => `${w} ${b}`)
        .join(', ') +
      '.' +
      warmUpNote(r.setup.warmUp) +
      passesNote(r.setup.workloads) +
      poolNote(r.setup.workloads) +
      stealNote(r.cells) +
      repeatsNote(r.setup.repeats),
    '',
    ...workloadsAndTargets(r),
  );
  for (const w of workloads) {
    const approx = findCell(r.cells, w, APPROX);
    const rr = findCell(r.cells, w, 'round_robin');
    lines.push(
      `### ${w}`,
      '',
      table(
        [
          'variant',
          'hit rate',
          'TTFT p50 ms',
          'TTFT p90 ms',
          'p90 vs approx',
          'output tok/s',
          'vs approx',
          'vs round_robin',
          'max/mean processed',
          'router CPU µs/request',
          'errors',
        ],
        r.cells
          .filter((c) => c.workload === w)
          .map((c) => [
            c.policy,
            hitRateText(c),
            num(c.ttftP50Ms),
            num(c.ttftP90Ms),
            approx ? ratio(c.ttftP90Ms, approx.ttftP90Ms) : 'n/a',
            num(c.outputTokPerSec),
            approx ? ratio(c.outputTokPerSec, approx.outputTokPerSec) : 'n/a',
            rr ? ratio(c.outputTokPerSec, rr.outputTokPerSec) : 'n/a',
            num(c.maxOverMeanProcessed, 2),
            routerCpuText(c.routerCpuUsPerRequest),
            c.errors > 0 ? `${c.errors} (${(c.firstError ?? '').slice(0, 60)})` : '0',
          ]),
      ),
      '',
    );
  }
  return { markdown: lines.join('\n'), assets: [] };
}
