/** A RoutingResult around some cells, for the report tests (fixed run info, a 2-worker setup). */
import type { RoutingCell, RoutingResult, RoutingTarget } from '../../../bench/routing-bench.js';

export function routingResult(
  cells: RoutingCell[],
  targets: RoutingTarget[] = [],
  setup: Partial<RoutingResult['setup']> = {},
): RoutingResult {
  return {
    benchmark: 'routing',
    info: { command: 'x', cores: 2, cpu: 'c', node: 'v20', date: 'd', quick: true, loadAvgAtStart: 1 },
    setup: { workers: 2, concurrency: 4, timeScale: 1, timing: {}, cacheBlocks: {}, workloads: {}, ...setup },
    cells,
    targets,
  };
}
