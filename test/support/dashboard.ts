/**
 * The Grafana dashboard (deploy/grafana/dashboards/vllm-extproc-router.json) as its tests read it:
 * its panels, their PromQL expressions, and the metric names an expression references. Shared by
 * test/unit/deploy/dashboard.test.ts (the router's and the workers' names) and
 * test/e2e/dashboard-envoy.test.ts (Envoy's names, against a real Envoy).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

export interface Panel {
  id?: number;
  type: string;
  title: string;
  datasource?: { uid: string };
  targets?: Array<{ expr: string; refId: string }>;
  panels?: Panel[];
}
export const dashboard = JSON.parse(
  readFileSync(path.join(ROOT, 'deploy/grafana/dashboards/vllm-extproc-router.json'), 'utf8'),
) as { uid: string; panels: Panel[]; templating: { list: Array<{ name: string; query: unknown }> } };
export const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
export const exprs = panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));

const PROMQL_WORDS = new Set([
  'sum', 'rate', 'increase', 'histogram_quantile', 'clamp_min', 'by', 'without', 'le', 'avg', 'max', 'min',
  'label_values', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'count', 'topk',
]); // prettier-ignore

/** Metric names referenced by a PromQL expression (identifiers outside label matchers and strings). */
export function metricNames(expr: string): string[] {
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
