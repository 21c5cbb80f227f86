/**
 * The Envoy fragments that the Envoy Gateway and Istio manifests inject (deploy/kubernetes) are valid
 * Envoy 1.40 configuration: each is placed in a minimal bootstrap beside envoy/envoy.yaml's router
 * cluster and checked by the real Envoy binary (`--mode validate`). Moved out of test/unit because it
 * runs Envoy.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments, stringify } from 'yaml';
import { DESTINATION_HEADER, LB_METADATA_NAMESPACE } from '../../src/extproc/headers.js';
import { findEnvoy, startEnvoy } from '../../src/envoy/envoy-process.js';
import { startSimulator } from '../../src/sim/simulator.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');
const yamlDocs = (rel: string) =>
  parseAllDocuments(read(rel)).map((d) => {
    if (d.errors.length) throw d.errors[0];
    return d.toJS() as Yaml;
  });

const envoy = parse(read('envoy/envoy.yaml'), { merge: true }) as Yaml;
const extProc = (() => {
  const hcm = envoy.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  return (hcm.http_filters as Yaml[]).find((f) => f.name === 'envoy.filters.http.ext_proc')?.typed_config;
})();
const cluster = (name: string) =>
  (envoy.static_resources.clusters as Yaml[]).find((c) => c.name === name) as Yaml;

describe('Envoy fragments injected by the Gateway and Istio manifests', () => {
  /** A bootstrap holding the fragments, its router cluster at 127.0.0.1:`routerPort`. */
  function bootstrapOf(filter: Yaml, workers: Yaml, routerPort = 9002): Yaml {
    const routerCluster = filter.typed_config.grpc_service.envoy_grpc.cluster_name as string;
    return {
      admin: { address: { socket_address: { address: '127.0.0.1', port_value: 0 } } },
      static_resources: {
        listeners: [
          {
            name: 'l',
            address: { socket_address: { address: '127.0.0.1', port_value: 0 } },
            filter_chains: [
              {
                filters: [
                  {
                    name: 'envoy.filters.network.http_connection_manager',
                    typed_config: {
                      '@type':
                        'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
                      stat_prefix: 'l',
                      route_config: {
                        virtual_hosts: [
                          {
                            name: 'v',
                            domains: ['*'],
                            routes: [{ match: { prefix: '/' }, route: { cluster: workers.name } }],
                          },
                        ],
                      },
                      http_filters: [
                        filter,
                        {
                          name: 'envoy.filters.http.router',
                          typed_config: {
                            '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router',
                          },
                        },
                      ],
                    },
                  },
                ],
              },
            ],
          },
        ],
        clusters: [
          workers,
          {
            ...cluster('vllm_router'),
            // Istio names the router's cluster after the Service.
            name: routerCluster,
            load_assignment: {
              cluster_name: routerCluster,
              endpoints: [
                {
                  lb_endpoints: [
                    {
                      endpoint: {
                        address: { socket_address: { address: '127.0.0.1', port_value: routerPort } },
                      },
                    },
                  ],
                },
              ],
            },
          },
        ],
      },
    };
  }

  /** Envoy validates the bootstrap holding the fragments without starting. */
  function validate(filter: Yaml, workers: Yaml): { status: number | null; output: string } {
    const bootstrap = bootstrapOf(filter, workers);
    const dir = mkdtempSync(path.join(tmpdir(), 'vllm-router-validate-'));
    try {
      const file = path.join(dir, 'envoy.yaml');
      writeFileSync(file, stringify(bootstrap));
      const r = spawnSync(findEnvoy(), ['--mode', 'validate', '-c', file, '-l', 'error'], {
        encoding: 'utf8',
        timeout: 30_000,
      });
      return { status: r.status, output: `${r.stdout}${r.stderr}` };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it('Istio EnvoyFilter: the ext_proc filter and the ORIGINAL_DST cluster are valid Envoy 1.40 config', () => {
    const f = yamlDocs('deploy/kubernetes/istio-envoyfilter.yaml').find(
      (d) => d.kind === 'EnvoyFilter',
    ) as Yaml;
    const patches = f.spec.configPatches as Yaml[];
    const filter = patches.find((p) => p.applyTo === 'HTTP_FILTER')?.patch.value as Yaml;
    const workers = patches.find((p) => p.applyTo === 'CLUSTER')?.patch.value as Yaml;
    expect(workers.original_dst_lb_config.http_header_name).toBe(DESTINATION_HEADER);
    expect(filter.typed_config.metadata_options.receiving_namespaces.untyped).toContain(
      LB_METADATA_NAMESPACE,
    );
    expect(filter.typed_config.failure_mode_allow).toBe(false);
    // With router replicas, an unanswered stream opens on another replica, as in envoy/envoy.yaml;
    // with none reachable, the same clear 503.
    expect(filter.typed_config.grpc_service.retry_policy).toEqual(extProc.grpc_service.retry_policy);
    expect(filter.typed_config.status_on_error).toEqual(extProc.status_on_error);
    const r = validate(filter, workers);
    expect(r.status, r.output).toBe(0);
  });

  it("Istio EnvoyFilter: requests are routed through the ext_proc stream on Istio's router cluster (its name, with `|`, is no valid :authority)", async () => {
    const f = yamlDocs('deploy/kubernetes/istio-envoyfilter.yaml').find(
      (d) => d.kind === 'EnvoyFilter',
    ) as Yaml;
    const patches = f.spec.configPatches as Yaml[];
    const filter = patches.find((p) => p.applyTo === 'HTTP_FILTER')?.patch.value as Yaml;
    const workers = patches.find((p) => p.applyTo === 'CLUSTER')?.patch.value as Yaml;
    const sim = await startSimulator();
    const router = await startTestRouter({ workers: [sim.url] });
    const envoyProc = await startEnvoy({ config: stringify(bootstrapOf(filter, workers, router.grpcPort)) });
    try {
      const res = await fetch(`http://127.0.0.1:${envoyProc.listenerPort}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: 'hello', max_tokens: 2 }),
      });
      // Without an `authority` Envoy sends the cluster name (`outbound|9002||...`) as the gRPC
      // stream's :authority, which Node's HTTP/2 server refuses (PROTOCOL_ERROR): every request a 503.
      expect(res.status, await res.clone().text()).toBe(200);
      expect(((await res.json()) as { choices: unknown[] }).choices).toHaveLength(1);
      expect(sim.records).toHaveLength(1);
      await expectAllLoadsZero(router);
    } finally {
      await envoyProc.close();
      await router.close();
      await sim.close();
    }
  });

  it('Envoy Gateway EnvoyPatchPolicy: the ORIGINAL_DST cluster is valid Envoy 1.40 config', () => {
    const p = yamlDocs('deploy/kubernetes/envoy-gateway.yaml').find(
      (d) => d.kind === 'EnvoyPatchPolicy',
    ) as Yaml;
    const workers = (p.spec.jsonPatches as Yaml[]).find((j) => j.type.endsWith('Cluster'))?.operation
      .value as Yaml;
    expect(workers.original_dst_lb_config.http_header_name).toBe(DESTINATION_HEADER);
    const r = validate({ name: 'envoy.filters.http.ext_proc', typed_config: { ...extProc } }, workers);
    expect(r.status, r.output).toBe(0);
  });
});
