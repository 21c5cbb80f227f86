/**
 * The Grafana dashboard may only query metrics that exist: every metric name in a panel expression
 * must be registered in src/observability/metrics.ts (histograms: with _bucket/_sum/_count) or be
 * one the simulator exposes with vLLM's names (src/sim/metrics-text.ts). And it covers what issue 8
 * asks for: load per worker and role, decisions by branch, cache hit rate, P/D legs, errors, discovery.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { RouterMetrics } from '../../../src/observability/metrics.js';
import { metricsText } from '../../../src/sim/metrics-text.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');

interface Panel {
  id?: number;
  type: string;
  title: string;
  datasource?: { uid: string };
  targets?: Array<{ expr: string; refId: string }>;
  panels?: Panel[];
}
const dashboard = JSON.parse(
  readFileSync(path.join(ROOT, 'deploy/grafana/dashboards/vllm-extproc-router.json'), 'utf8'),
) as { uid: string; panels: Panel[]; templating: { list: Array<{ name: string; query: unknown }> } };
const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
const exprs = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));

/** Names a scrape can return: the router's registry (every metric, incl. optional ones) + the simulator's. */
async function knownMetricNames(): Promise<Set<string>> {
  const m = new RouterMetrics({ workers: () => [], treeChars: () => [], processMetrics: false });
  const names = new Set<string>();
  for (const metric of await m.registry.getMetricsAsJSON()) {
    names.add(metric.name);
    if (String(metric.type) === 'histogram')
      for (const s of ['_bucket', '_sum', '_count']) names.add(metric.name + s);
  }
  const sim = metricsText({
    model: 'm',
    running: 0,
    waiting: 0,
    kvCacheUsage: 0,
    prefixCacheQueries: 0,
    prefixCacheHits: 0,
    promptTokens: 0,
    generationTokens: 0,
  });
  for (const line of sim.split('\n')) {
    const name = /^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]/.exec(line)?.[1];
    if (name && !line.startsWith('#')) names.add(name);
  }
  return names;
}

const PROMQL_WORDS = new Set([
  'sum', 'rate', 'increase', 'histogram_quantile', 'clamp_min', 'by', 'without', 'le', 'avg', 'max', 'min',
  'label_values', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'count', 'topk',
]); // prettier-ignore

/** Metric names referenced by a PromQL expression (identifiers outside label matchers and strings). */
function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, '')
    .replace(/\[[^\]]*\]/g, '')
    .replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, '')
    .replace(/(?<![a-zA-Z0-9_:])\d+(?:\.\d+)?(?:e[+-]?\d+)?/gi, '');
  return [...stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)]
    .map((m) => m[0])
    .filter((w) => !PROMQL_WORDS.has(w) && !/^\d/.test(w) && !w.startsWith('$'));
}

describe('Grafana dashboard', () => {
  it('has panels with queries and unique ids', () => {
    expect(exprs.length).toBeGreaterThan(10);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('queries only metrics that the router or the workers expose', async () => {
    const known = await knownMetricNames();
    const unknown = exprs.flatMap(({ panel, expr }) =>
      metricNames(expr)
        .filter((n) => !known.has(n))
        .map((n) => `${panel}: ${n}`),
    );
    expect(unknown).toEqual([]);
  });

  it('extracts metric names from PromQL (self-check of the parser above)', () => {
    expect(
      metricNames(
        'sum by (role) (rate(a_total{job=~"$job",x="y{z}"}[$__rate_interval])) / clamp_min(sum(rate(vllm:b[5m])), 1e-9)',
      ),
    ).toEqual(['a_total', 'vllm:b']);
    expect(metricNames('histogram_quantile(0.95, sum by (le) (rate(c_bucket[1m])))')).toEqual(['c_bucket']);
  });

  it.each([
    ['load per worker and role', 'vllm_router_worker_load', /by \(role, worker\)/],
    ['decisions by branch', 'vllm_router_policy_decisions_total', /branch/],
    ['router cache hit rate', 'vllm_router_cache_misses_total', /vllm_router_cache_hits_total/],
    ['worker cache hit rate', 'vllm:prefix_cache_queries_total', /vllm:prefix_cache_hits_total/],
    ['P/D prefill leg latency', 'vllm_router_pd_prefill_duration_seconds_bucket', /histogram_quantile/],
    ['errors by outcome', 'vllm_router_requests_total', /outcome!="ok"/],
    ['P/D errors', 'vllm_router_pd_errors_total', /error_type/],
    ['discovery events', 'vllm_router_discovery_updates_total', /event/],
    ['rejected registrations', 'vllm_router_discovery_rejected_total', /reason/],
  ])('shows %s', (_what, metric, shape) => {
    expect(exprs.some(({ expr }) => metricNames(expr).includes(metric) && shape.test(expr))).toBe(true);
  });

  it('uses the provisioned datasource through the $datasource variable', () => {
    const ds = dashboard.templating.list.find((v) => v.name === 'datasource');
    expect(ds?.query).toBe('prometheus');
    for (const p of panels.filter((x) => x.type !== 'row')) expect(p.datasource?.uid).toBe('${datasource}');
  });
});
