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
import { findEnvoy } from '../../src/envoy/envoy-process.js';

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
  /** A bootstrap holding the fragments: Envoy validates it without starting. */
  function validate(filter: Yaml, workers: Yaml): { status: number | null; output: string } {
    const bootstrap = {
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
            name: filter.typed_config.grpc_service.envoy_grpc.cluster_name,
            load_assignment: {
              ...cluster('vllm_router').load_assignment,
              cluster_name: filter.typed_config.grpc_service.envoy_grpc.cluster_name,
            },
          },
        ],
      },
    };
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
