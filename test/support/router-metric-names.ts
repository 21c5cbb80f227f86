/**
 * Every metric name the router can put on its /metrics (the optional ones too: cache reports, breaker
 * state, Mooncake bootstrap, the load signals and timing estimates, KV events), histograms with their
 * `_bucket`, `_sum` and `_count` series: what docs and dashboards may name.
 */
import { RouterMetrics } from '../../src/observability/metrics.js';
import { registerLoadMetrics } from '../../src/observability/load-metrics.js';
import { createKvEventMetrics } from '../../src/observability/kv-event-metrics.js';
import { LoadBoard } from '../../src/load/load-board.js';
import { TimingEstimates } from '../../src/load/timing-estimates.js';
import { CharsPerToken } from '../../src/load/chars-per-token.js';

export async function registeredMetricNames(): Promise<Set<string>> {
  const m = new RouterMetrics({
    workers: () => [],
    treeChars: () => [],
    cacheReports: () => [],
    breakerState: () => 0,
    bootstrapReady: () => undefined,
    servedModels: () => undefined,
    poolSaturated: () => [],
    objectives: () => [],
    flowHeld: () => 0,
    processMetrics: false,
  });
  registerLoadMetrics({
    registry: m.registry,
    workers: () => [],
    board: new LoadBoard(1000),
    timing: new TimingEstimates(),
    clock: () => 0,
    charsPerToken: new CharsPerToken({ prior: 4 }),
  });
  createKvEventMetrics(m.registry, () => new Map());
  const names = new Set<string>();
  for (const metric of await m.registry.getMetricsAsJSON()) {
    names.add(metric.name);
    if (String(metric.type) === 'histogram')
      for (const s of ['_bucket', '_sum', '_count']) names.add(metric.name + s);
  }
  return names;
}
