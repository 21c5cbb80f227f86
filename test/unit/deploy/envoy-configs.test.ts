/**
 * The replica reference configurations (envoy/envoy-replicas*.yaml) are generated from envoy/envoy.yaml
 * by scripts/gen-envoy-configs.ts and must not drift from it; their safety-relevant settings are
 * checked here structurally (the real Envoy validates them in test/e2e/envoy-configs.test.ts and runs
 * the same renderings in test/e2e/replicas.test.ts).
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { envoyReplicaConfigs } from '../../../scripts/gen-envoy-configs.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

describe('envoy/envoy-replicas*.yaml', async () => {
  const configs = await envoyReplicaConfigs();

  it.each(configs.map((c) => [c.file, c] as const))(
    '%s equals the generator output (regenerate: npx tsx scripts/gen-envoy-configs.ts)',
    (file, c) => {
      expect(readFileSync(path.join(ROOT, file), 'utf8')).toBe(c.text);
    },
  );

  it.each(configs.map((c) => [c.file, c] as const))('%s: replica-safe settings', (_file, c) => {
    const doc = parse(c.text) as Yaml;
    const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    // The client's destination header is removed before route selection and before ext_proc.
    const early = hcm.early_header_mutation_extensions[0].typed_config.mutations as Yaml[];
    expect(early.map((m) => m.remove)).toContain('x-gateway-destination-endpoint');
    const extProc = (hcm.http_filters as Yaml[]).find(
      (f) => f.name === 'envoy.filters.http.ext_proc',
    )!.typed_config;
    expect(extProc.status_on_error).toEqual({ code: 503 });
    expect(extProc.failure_mode_allow).toBe(Boolean(c.options.failOpen));
    expect(extProc.grpc_service.retry_policy.retry_on).toContain('connect-failure');
    const router = (doc.static_resources.clusters as Yaml[]).find((x) => x.name === 'vllm_router')!;
    expect(router.load_assignment.endpoints[0].lb_endpoints).toHaveLength(2);
    expect(router.health_checks[0].grpc_health_check.service_name).toBe(
      'envoy.service.ext_proc.v3.ExternalProcessor',
    );
    // A crashed replica is ejected on its second refused connection in a row (each attempt is retried
    // elsewhere), a live one is not ejected by one reset; one slow health check does not take a
    // replica out; health changes reach Envoy's workers at once (no 1 s merge window).
    expect(router.outlier_detection.consecutive_local_origin_failure).toBe(2);
    expect(router.health_checks[0].unhealthy_threshold).toBe(2);
    expect(router.common_lb_config.update_merge_window).toBe('0s');
    const routes = hcm.route_config.virtual_hosts[0].routes as Yaml[];
    if (c.options.failOpen) {
      // Steered requests go to the ORIGINAL_DST cluster; everything else to Envoy's own balancer.
      expect(routes.map((r) => r.route.cluster)).toEqual(['vllm_workers', 'vllm_workers_fallback']);
      expect(routes[0]!.match.headers[0]).toEqual({
        name: 'x-gateway-destination-endpoint',
        present_match: true,
      });
    } else {
      expect(routes.map((r) => r.route.cluster)).toEqual(['vllm_workers']);
    }
  });
});
