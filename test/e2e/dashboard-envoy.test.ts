/**
 * The dashboard's Envoy panels query names that a real Envoy 1.40 exports: every `envoy_*` metric in
 * a panel expression must be in /stats/prometheus of Envoy running envoy/envoy.yaml as the replicas
 * use it (two router endpoints, health checks), and with the label the panel selects on
 * (`envoy_cluster_name="vllm_router"` where it asks for it). Nothing needs to be sent: Envoy creates
 * these stats with the cluster and the filter.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { exprs, metricNames } from '../support/dashboard.js';

let envoy: EnvoyHandle | undefined;
afterEach(async () => {
  await envoy?.close();
  envoy = undefined;
});

describe('Grafana dashboard, Envoy panels', () => {
  it("queries only names in a real Envoy's /stats/prometheus, with the labels it selects on", async () => {
    const wanted = exprs.flatMap(({ panel, expr }) =>
      metricNames(expr)
        .filter((n) => n.startsWith('envoy_'))
        .map((name) => ({ panel, name, cluster: /envoy_cluster_name="([^"]+)"/.exec(expr)?.[1] })),
    );
    expect(wanted.length).toBeGreaterThan(5);
    // Ports nothing listens on: the stats exist as soon as the cluster and the filter do.
    envoy = await startEnvoy({
      routers: [
        { host: '127.0.0.1', port: 1 },
        { host: '127.0.0.1', port: 2 },
      ],
      routerHealthCheck: true,
    });
    const text = await (await fetch(`http://127.0.0.1:${envoy.adminPort}/stats/prometheus`)).text();
    const series = text.split('\n').filter((l) => l.length > 0 && !l.startsWith('#'));
    const missing = wanted.filter(
      ({ name, cluster }) =>
        !series.some(
          (l) =>
            (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) &&
            (cluster === undefined || l.includes(`envoy_cluster_name="${cluster}"`)),
        ),
    );
    expect(missing).toEqual([]);
  });
});
