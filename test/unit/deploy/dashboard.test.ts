/**
 * The Grafana dashboard may only query metrics that exist: every metric name in a panel expression
 * must be registered in src/observability/metrics.ts (histograms: with _bucket/_sum/_count), be
 * one the simulator exposes with vLLM's names (src/sim/metrics-text.ts), or be Envoy's (`envoy_*`:
 * test/e2e/dashboard-envoy.test.ts finds each in a real Envoy's /stats/prometheus). And it covers what issue 8
 * asks for: load per worker and role, decisions by branch, cache hit rate, P/D legs, errors, discovery;
 * and each worker's pace (a fleet of mixed hardware).
 */
import { describe, expect, it } from 'vitest';
import { RouterMetrics } from '../../../src/observability/metrics.js';
import { metricsText } from '../../../src/sim/metrics-text.js';
import { requestOutcome } from '../../../src/request/request-end.js';
import { dashboard, exprs, metricNames, panels } from '../../support/dashboard.js';
import { registeredMetricNames } from '../../support/router-metric-names.js';

/** Names a scrape can return: the router's registry (every metric, incl. optional ones) + the simulator's. */
async function knownMetricNames(): Promise<Set<string>> {
  const names = await registeredMetricNames();
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

describe('Grafana dashboard', () => {
  it('has panels with queries and unique ids', () => {
    expect(exprs.length).toBeGreaterThan(10);
    const ids = panels.map((p) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
  });

  it('queries only metrics that the router or the workers expose (or Envoy: checked end to end)', async () => {
    const known = await knownMetricNames();
    const unknown = exprs.flatMap(({ panel, expr }) =>
      metricNames(expr)
        .filter((n) => !known.has(n) && !n.startsWith('envoy_'))
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
    ['errors by outcome', 'vllm_router_requests_total', /outcome!~"/],
    ['P/D errors', 'vllm_router_pd_errors_total', /error_type/],
    ["each worker's pace (mixed hardware)", 'vllm_router_worker_estimate', /estimate="pace"/],
    ['discovery events', 'vllm_router_discovery_updates_total', /event/],
    ['rejected registrations', 'vllm_router_discovery_rejected_total', /reason/],
    ['router replicas in rotation', 'envoy_cluster_membership_healthy', /envoy_cluster_name="vllm_router"/],
    ['failed ext_proc streams', 'envoy_http_ext_proc_streams_failed', /rate/],
    ['stream retry overflow', 'envoy_cluster_upstream_rq_retry_overflow', /envoy_cluster_name="vllm_router"/],
  ])('shows %s', (_what, metric, shape) => {
    expect(exprs.some(({ expr }) => metricNames(expr).includes(metric) && shape.test(expr))).toBe(true);
  });

  it('counts no successful request as an error, and times the 2xx responses whose bodies the router skipped', () => {
    // With allow_mode_override (envoy/envoy.yaml), most 2xx responses end `unwatched`: the router
    // skips their bodies (all but --response-body-sample of them per worker).
    const success = [
      requestOutcome({ kind: 'response', status: 200 }, 'routed'),
      requestOutcome({ kind: 'unwatched', status: 200 }, 'routed'),
      requestOutcome({ kind: 'answered', status: 200 }, 'unrouted'),
      requestOutcome({ kind: 'released', status: 200 }, 'routed'),
    ];
    const matchers = exprs.flatMap(({ panel, expr }) =>
      [...expr.matchAll(/\boutcome(!~|=~|!=|=)"([^"]*)"/g)].map((m) => ({
        panel,
        op: m[1] as string,
        re: new RegExp(`^(?:${m[2] as string})$`), // PromQL regexes are anchored
        duration: expr.includes('vllm_router_request_duration_seconds'),
      })),
    );
    expect(matchers.length).toBeGreaterThan(0);
    for (const { panel, op, re, duration } of matchers) {
      if (op === '!~' || op === '!=')
        for (const o of success) expect(re.test(o), `${panel}: counts ${o} as an error`).toBe(true);
      if (duration)
        for (const o of ['ok', 'unwatched']) expect(re.test(o), `${panel}: leaves out ${o}`).toBe(true);
    }
  });

  it("counts each worker once however many router replicas report it (every replica exports the fleet's state)", () => {
    // Two replicas of one router job (deploy/kubernetes/router-replicas.yaml, docker-compose.replicas.yml),
    // each exporting the same two decode workers; one of them asleep, serving two models.
    const series: Series[] = [];
    for (const instance of ['router-1:9090', 'router-2:9090']) {
      const at = { job: 'vllm-router', instance };
      for (const role of ['prefill', 'decode', 'regular'])
        series.push({
          name: 'vllm_router_pool_workers',
          labels: { ...at, role },
          value: role === 'decode' ? 2 : 0,
        });
      for (const [worker, asleep] of [
        ['http://d1:8000', 1],
        ['http://d2:8000', 0],
      ] as const) {
        const w = { ...at, role: 'decode', worker, generation: instance === 'router-1:9090' ? '1' : '7' };
        series.push({ name: 'vllm_router_worker_health', labels: w, value: 1 - asleep });
        series.push({ name: 'vllm_router_worker_asleep', labels: w, value: asleep });
        series.push({ name: 'vllm_router_worker_cordoned', labels: w, value: 0 });
        series.push({ name: 'vllm_router_worker_paused', labels: w, value: 0 });
        for (const model of ['m', 'm-lora'])
          series.push({
            name: 'vllm_router_worker_served_model',
            labels: { ...w, model, parent: model === 'm' ? '' : 'm' },
            value: 1,
          });
      }
    }
    const shown = (title: string): Record<string, number> => {
      const out: Record<string, number> = {};
      const panel = panels.find((p) => p.title === title);
      for (const t of panel?.targets ?? []) {
        for (const r of evaluate(t.expr, series)) {
          if (r.value === 0) continue;
          out[`${t.refId} ${Object.values(r.labels).join(' ')}`] = r.value;
        }
      }
      return out;
    };
    expect(shown('Workers per pool')).toEqual({ 'A decode': 2, 'B decode': 1, 'C decode': 1 });
    expect(shown('Models served per worker')).toEqual({
      'A http://d1:8000 decode': 2,
      'A http://d2:8000 decode': 2,
    });
  });

  it('names every registry event the discovery counter counts (restarted too) in its panel', async () => {
    const m = new RouterMetrics({ workers: () => [] });
    const help = (await m.registry.getMetricsAsJSON()).find(
      (x) => x.name === 'vllm_router_discovery_updates_total',
    )?.help as string;
    // 'Registry events: registered, heartbeat, replaced (...), restarted (...), expired, deregistered.'
    const events = help
      .replace(/^[^:]*:/, '')
      .replace(/\([^)]*\)/g, '')
      .replace(/\.$/, '')
      .split(',')
      .map((e) => e.trim());
    expect(events).toContain('restarted');
    const panel = panels.find((p) =>
      exprs.some((e) => e.panel === p.title && e.expr.includes('discovery_updates')),
    );
    const description = (panel as { description?: string } | undefined)?.description ?? '';
    for (const e of events) expect(description, e).toMatch(new RegExp(`\\b${e}\\b`));
  });

  it('uses the provisioned datasource through the $datasource variable', () => {
    const ds = dashboard.templating.list.find((v) => v.name === 'datasource');
    expect(ds?.query).toBe('prometheus');
    for (const p of panels.filter((x) => x.type !== 'row')) expect(p.datasource?.uid).toBe('${datasource}');
  });
});

interface Series {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/**
 * The panels' instant value over `series`, for the PromQL they use on gauges: a selector with
 * `=` / `=~` matchers (dashboard variables match anything), nested in `sum`, `max`, `min` or
 * `count` `by (labels)`. Throws on anything else (a panel this cannot read must not pass unread).
 */
function evaluate(expr: string, series: readonly Series[]): Array<Omit<Series, 'name'>> {
  const e = expr.trim();
  const agg = /^(sum|max|min|count) by \(([^)]*)\) \((.*)\)$/s.exec(e);
  if (agg) {
    const [, op, by, inner] = agg as unknown as [string, string, string, string];
    const keys = by.split(',').map((k) => k.trim());
    const groups = new Map<string, { labels: Record<string, string>; values: number[] }>();
    for (const s of evaluate(inner, series)) {
      const labels = Object.fromEntries(keys.map((k) => [k, s.labels[k] ?? '']));
      const id = JSON.stringify(labels);
      const g = groups.get(id) ?? { labels, values: [] };
      g.values.push(s.value);
      groups.set(id, g);
    }
    return [...groups.values()].map(({ labels, values }) => ({
      labels,
      value:
        op === 'sum'
          ? values.reduce((a, b) => a + b, 0)
          : op === 'max'
            ? Math.max(...values)
            : op === 'min'
              ? Math.min(...values)
              : values.length,
    }));
  }
  const sel = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?$/.exec(e);
  if (!sel) throw new Error(`cannot evaluate ${e}`);
  const [, name, matchers = ''] = sel as unknown as [string, string, string | undefined];
  const tests = [...matchers.matchAll(/(\w+)(=~|=)"([^"]*)"/g)].map(([, label, op, v]) => {
    const pattern = (v as string).replace(/\$\w+/g, '.*');
    const re = new RegExp(`^(?:${op === '=' ? pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') : pattern})$`);
    return (labels: Record<string, string>) => re.test(labels[label as string] ?? '');
  });
  return series
    .filter((s) => s.name === name && tests.every((t) => t(s.labels)))
    .map(({ labels, value }) => ({ labels, value }));
}
