/**
 * No Docker engine or Kubernetes cluster runs here, so the deployment files are checked against each
 * other and against the code: docker-compose.yml, envoy/envoy.yaml, deploy/prometheus.yml, the Grafana
 * provisioning, the Dockerfile and deploy/kubernetes/*.yaml must agree with the router's defaults
 * (`defaultConfig()`), its header names (src/extproc/headers.ts), its CLI flags (config-schema.ts) and
 * the simulator's CLI flags (src/sim/cli.ts). The Envoy fragments that the Gateway/Istio manifests
 * inject are validated by the real Envoy binary in test/e2e/deploy-envoy-fragments.test.ts.
 */
import { execSync } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse, parseAllDocuments } from 'yaml';
import { defaultConfig, parseConfig, type Config } from '../../../src/config.js';
import { OPTIONS, type OptionSpec } from '../../../src/config-schema.js';
import { DESTINATION_HEADER, LB_METADATA_NAMESPACE } from '../../../src/extproc/headers.js';
import { HEALTH_SERVICE_NAMES } from '../../../src/extproc/server.js';

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');
// `merge: true`: docker-compose.yml shares the simulator settings through a `<<: *sim` merge key.
const yamlFile = (rel: string) => parse(read(rel), { merge: true }) as Yaml;
const yamlDocs = (rel: string) =>
  parseAllDocuments(read(rel)).map((d) => {
    if (d.errors.length) throw d.errors[0];
    return d.toJS() as Yaml;
  });

const compose = yamlFile('docker-compose.yml');
const envoy = yamlFile('envoy/envoy.yaml');
const prometheus = yamlFile('deploy/prometheus.yml');
const defaults = defaultConfig();

/** Envoy duration ("90s", "1.5s", "500ms") in ms. */
function durationMs(d: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(d);
  if (!m) throw new Error(`not an Envoy duration: ${d}`);
  return Number(m[1]) * { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
}

/** Router config the compose `router` service runs with (its command through the real parser). */
function composeRouterConfig(): Readonly<Config> {
  const parsed = parseConfig(compose.services.router.command as string[], {});
  if (parsed.help) throw new Error('router command asks for --help');
  return parsed.config;
}

/** The simulator's CLI flags, read from the parseArgs table of src/sim/cli.ts (it runs on import). */
function simFlags(): Set<string> {
  const src = read('src/sim/cli.ts');
  const block = /options:\s*\{([\s\S]*?)\n\s*\},\n\s*strict/.exec(src)?.[1] ?? '';
  return new Set([...block.matchAll(/^\s*'?([a-z][a-z-]*)'?:\s*\{\s*type:/gm)].map((m) => m[1] as string));
}

function argValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(`--${flag}`);
  return i >= 0 ? args[i + 1] : undefined;
}

const extProc = (() => {
  const hcm = envoy.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  return (hcm.http_filters as Yaml[]).find((f) => f.name === 'envoy.filters.http.ext_proc')?.typed_config;
})();
const cluster = (name: string) =>
  (envoy.static_resources.clusters as Yaml[]).find((c) => c.name === name) as Yaml;
const simServices = Object.entries(compose.services as Record<string, Yaml>).filter(
  ([, s]) => Array.isArray(s.entrypoint) && s.entrypoint.join(' ').includes('dist/src/sim/cli.js'),
);

describe('envoy/envoy.yaml agrees with the router', () => {
  it('steers by the header the router writes, fail-closed', () => {
    const workers = cluster('vllm_workers');
    expect(workers.type).toBe('ORIGINAL_DST');
    expect(workers.lb_policy).toBe('CLUSTER_PROVIDED');
    expect(workers.original_dst_lb_config).toEqual({
      use_http_header: true,
      http_header_name: DESTINATION_HEADER,
    });
    expect(extProc.failure_mode_allow).toBe(false);
  });

  it('lets the router write the envoy.lb metadata namespace', () => {
    expect(extProc.metadata_options.receiving_namespaces.untyped).toContain(LB_METADATA_NAMESPACE);
  });

  it("points the ext_proc cluster at the router's default gRPC port over HTTP/2", () => {
    expect(extProc.grpc_service.envoy_grpc.cluster_name).toBe('vllm_router');
    const router = cluster('vllm_router');
    const addr = router.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    expect(addr).toEqual({ address: '127.0.0.1', port_value: defaults.grpcPort });
    const opts =
      router.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'];
    expect(opts.explicit_http_config.http2_protocol_options).toBeDefined();
  });

  it('waits longer for the router than the router waits for a prefill leg', () => {
    expect(durationMs(extProc.message_timeout)).toBeGreaterThan(defaults.prefillTimeoutMs);
  });

  it("buffers at least the router's largest accepted body", () => {
    expect(envoy.static_resources.listeners[0].per_connection_buffer_limit_bytes).toBeGreaterThanOrEqual(
      defaults.maxBodyBytes,
    );
    expect(cluster('vllm_workers').per_connection_buffer_limit_bytes).toBeGreaterThanOrEqual(
      defaults.maxBodyBytes,
    );
  });
});

describe('docker-compose.yml', () => {
  const router = compose.services.router as Yaml;
  const envoySvc = compose.services.envoy as Yaml;

  it('runs the official Envoy image with envoy/envoy.yaml mounted, unchanged', () => {
    expect(envoySvc.image).toMatch(/^envoyproxy\/envoy:v1\.40/);
    const mount = (envoySvc.volumes as string[]).find((v) => v.startsWith('./envoy/envoy.yaml:'));
    expect(mount).toBeDefined();
    const target = (mount as string).split(':')[1];
    const args = envoySvc.command as string[];
    expect(args[args.indexOf('-c') + 1]).toBe(target);
  });

  it("shares the router's network namespace, so envoy.yaml's 127.0.0.1 router address holds", () => {
    expect(envoySvc.network_mode).toBe('service:router');
    const addr =
      cluster('vllm_router').load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    expect(addr.address).toBe('127.0.0.1');
    expect(addr.port_value).toBe(composeRouterConfig().grpcPort);
    // With network_mode: service:router, Envoy's ports are published on the router service.
    const listenerPort = envoy.static_resources.listeners[0].address.socket_address.port_value as number;
    expect(envoySvc.ports).toBeUndefined();
    expect(router.ports).toContain(`${listenerPort}:${listenerPort}`);
    expect(router.ports).toContain(`${composeRouterConfig().adminPort}:${composeRouterConfig().adminPort}`);
  });

  it('runs the router in P/D mode with ZMQ discovery on a port the workers register to', () => {
    const cfg = composeRouterConfig();
    expect(cfg.mode).toBe('pd');
    const port = /^tcp:\/\/0\.0\.0\.0:(\d+)$/.exec(cfg.discoveryZmq)?.[1];
    expect(port).toBeDefined();
    expect(simServices.length).toBeGreaterThanOrEqual(2);
    for (const [, svc] of simServices) {
      expect(argValue(svc.command as string[], 'register')).toBe(`tcp://router:${port}`);
    }
  });

  it('runs prefill and decode simulators with flags the simulator CLI knows', () => {
    const flags = simFlags();
    expect(flags.has('role')).toBe(true);
    const roles = new Set<string>();
    for (const [name, svc] of simServices) {
      const args = svc.command as string[];
      for (const a of args.filter((x) => x.startsWith('--')))
        expect(flags, `${name}: ${a}`).toContain(a.slice(2));
      roles.add(argValue(args, 'role') as string);
      // The registered http_address is --host:--port: a name the router resolves to the container IP.
      expect(argValue(args, 'host')).toBe(name);
      expect(svc.hostname ?? name).toBe(name);
      expect(argValue(args, 'kv-connector') ?? 'nixl').toBe(composeRouterConfig().kvConnector);
    }
    expect([...roles].sort()).toEqual(['decode', 'prefill']);
  });

  it('uses router flags that exist', () => {
    const flags = new Set((OPTIONS as readonly OptionSpec[]).flatMap((o) => [o.flag, `no-${o.flag}`]));
    for (const a of (router.command as string[]).filter((x) => x.startsWith('--'))) {
      expect(flags).toContain(a.slice(2));
    }
  });

  it('builds the router from the Dockerfile and runs the workers from the same image', () => {
    expect(router.build).toBeDefined();
    for (const [, svc] of simServices) {
      expect(svc.image).toBe(router.image);
      expect(svc.pull_policy).toBe('never');
    }
  });
});

describe('deploy/prometheus.yml and Grafana provisioning', () => {
  const targets = (job: string): string[] =>
    (prometheus.scrape_configs as Yaml[])
      .find((j) => j.job_name === job)
      ?.static_configs.flatMap((s: Yaml) => s.targets as string[]) ?? [];

  it("scrapes the router's admin /metrics", () => {
    const job = (prometheus.scrape_configs as Yaml[]).find((j) => j.job_name === 'vllm-router') as Yaml;
    expect(job.metrics_path ?? '/metrics').toBe('/metrics');
    expect(targets('vllm-router')).toEqual([`router:${composeRouterConfig().adminPort}`]);
  });

  it('scrapes every simulated worker at its --host:--port', () => {
    const expected = simServices.map(([, s]) => {
      const args = s.command as string[];
      return `${argValue(args, 'host')}:${argValue(args, 'port')}`;
    });
    expect(targets('vllm-workers').sort()).toEqual(expected.sort());
  });

  it("scrapes Envoy's /stats/prometheus on the admin port envoy.yaml uses, opened to the compose network only", () => {
    const job = (prometheus.scrape_configs as Yaml[]).find((j) => j.job_name === 'envoy') as Yaml;
    expect(job.metrics_path).toBe('/stats/prometheus');
    const adminPort = envoy.admin.address.socket_address.port_value as number;
    expect(targets('envoy')).toEqual([`router:${adminPort}`]);
    const envoySvc = compose.services.envoy as Yaml;
    const args = envoySvc.command as string[];
    const override = parse(args[args.indexOf('--config-yaml') + 1] as string) as Yaml;
    expect(override.admin.address.socket_address).toEqual({ address: '0.0.0.0', port_value: adminPort });
    // Not published to the host (the admin API can stop Envoy).
    expect((compose.services.router as Yaml).ports).not.toContain(`${adminPort}:${adminPort}`);
  });

  it('mounts the Prometheus config and points Grafana at the prometheus service', () => {
    const prom = compose.services.prometheus as Yaml;
    expect(prom.volumes).toContain('./deploy/prometheus.yml:/etc/prometheus/prometheus.yml:ro');
    const ds = yamlFile('deploy/grafana/provisioning/datasources/prometheus.yml').datasources[0];
    expect(ds.url).toBe('http://prometheus:9090');
    expect(ds.uid).toBe('prometheus');
  });

  it('provisions the dashboard folder Grafana mounts', () => {
    const grafana = compose.services.grafana as Yaml;
    const provider = yamlFile('deploy/grafana/provisioning/dashboards/vllm-extproc-router.yml').providers[0];
    expect(grafana.volumes).toContain(`./deploy/grafana/dashboards:${provider.options.path}:ro`);
    expect(grafana.volumes).toContain('./deploy/grafana/provisioning:/etc/grafana/provisioning:ro');
    expect(readdirSync(path.join(ROOT, 'deploy/grafana/dashboards'))).toContain('vllm-extproc-router.json');
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));

  it("exposes the router's default gRPC and admin ports", () => {
    expect(runtime).toMatch(new RegExp(`^EXPOSE ${defaults.grpcPort} ${defaults.adminPort}$`, 'm'));
  });

  it('health-checks the admin /healthz, runs as non-root, production dependencies only', () => {
    expect(runtime).toContain(`http://127.0.0.1:${defaults.adminPort}/healthz`);
    expect(runtime).toMatch(/^USER node$/m);
    expect(runtime).toMatch(/npm ci --omit=dev/);
    // node's flags between the two: test/unit/runtime/node-flags.test.ts checks them exactly.
    expect(runtime).toMatch(/^ENTRYPOINT \["node", ("--[^"]+", )*"dist\/src\/cli\.js"\]$/m);
  });

  it('ships what the compiled code loads at run time (protos, the simulator CLI)', () => {
    expect(runtime).toMatch(/^COPY protos \.\/protos$/m);
    expect(runtime).toMatch(/^COPY --from=build \/app\/dist\/src \.\/dist\/src$/m);
    const simEntry = (compose.services['prefill-1'] as Yaml).entrypoint as string[];
    expect(simEntry).toEqual(['node', 'dist/src/sim/cli.js']);
  });

  it('ships the patched dependencies patched (patches/ applied in the build stage, copied to the runtime)', () => {
    const build = dockerfile.slice(0, dockerfile.lastIndexOf('\nFROM '));
    expect(build).toMatch(/^COPY patches \.\/patches$/m);
    expect(build).toMatch(/npx patch-package --error-on-fail/);
    const patched = readdirSync(path.join(ROOT, 'patches')).map((f) =>
      f.replace(/\+[^+]+\.patch$/, '').replace('+', '/'),
    );
    expect(patched.length).toBeGreaterThan(0);
    for (const pkg of patched) {
      expect(runtime).toContain(`COPY --from=build /app/node_modules/${pkg} ./node_modules/${pkg}`);
    }
  });
});

describe('package.json', () => {
  it('installs as a dependency: postinstall applies patches/ only in a checkout that has it', () => {
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    const elsewhere = mkdtempSync(path.join(tmpdir(), 'postinstall-'));
    try {
      // A consumer's install runs the script in the package's folder, without patches/ (not in
      // `files`) and without patch-package (a dev dependency).
      const PATH = (process.env.PATH ?? '')
        .split(path.delimiter)
        .filter((dir) => !dir.includes('node_modules'))
        .join(path.delimiter);
      execSync(pkg.scripts.postinstall as string, {
        cwd: elsewhere,
        stdio: 'pipe',
        env: { ...process.env, PATH },
      });
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});

describe('deploy/kubernetes', () => {
  const router = yamlDocs('deploy/kubernetes/router.yaml');
  const deployment = router.find((d) => d.kind === 'Deployment') as Yaml;
  const service = router.find((d) => d.kind === 'Service') as Yaml;
  const container = deployment.spec.template.spec.containers[0] as Yaml;
  const portOf = (name: string) => (container.ports as Yaml[]).find((p) => p.name === name)?.containerPort;

  it('runs with flags the router accepts, on the ports it opens', () => {
    const parsed = parseConfig(container.args as string[], {});
    expect(parsed.help).toBe(false);
    const cfg = (parsed as { config: Config }).config;
    expect(portOf('grpc')).toBe(cfg.grpcPort);
    expect(portOf('admin')).toBe(cfg.adminPort);
    expect(portOf('zmq')).toBe(Number(/:(\d+)$/.exec(cfg.discoveryZmq)?.[1]));
    expect(cfg.prefillTimeoutMs).toBeLessThan(durationMs(extProc.message_timeout));
    expect(deployment.spec.template.spec.terminationGracePeriodSeconds * 1000).toBeGreaterThan(
      cfg.drainTimeoutMs,
    );
  });

  it('probes the admin /healthz and /readyz and the gRPC health service', () => {
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' });
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' });
    expect(container.startupProbe.grpc.port).toBe(portOf('grpc'));
    expect(HEALTH_SERVICE_NAMES).toContain(container.startupProbe.grpc.service);
  });

  it('exposes the gRPC port as HTTP/2 and every named container port', () => {
    const ports = service.spec.ports as Yaml[];
    expect(ports.find((p) => p.name === 'grpc')?.appProtocol).toBe('kubernetes.io/h2c');
    for (const p of ports) expect(container.ports.map((c: Yaml) => c.name)).toContain(p.targetPort);
    expect(service.spec.selector).toEqual(deployment.spec.selector.matchLabels);
  });

  it('scrapes the admin port with the PodMonitor', () => {
    const pm = yamlDocs('deploy/kubernetes/podmonitor.yaml')[0] as Yaml;
    expect(pm.kind).toBe('PodMonitor');
    expect(pm.spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels);
    expect(pm.spec.podMetricsEndpoints[0]).toMatchObject({ port: 'admin', path: '/metrics' });
  });

  it('points the gateway manifests at the router Service and its gRPC port', () => {
    const eg = yamlDocs('deploy/kubernetes/envoy-gateway.yaml');
    const policy = eg.find((d) => d.kind === 'EnvoyExtensionPolicy') as Yaml;
    const ext = policy.spec.extProc[0];
    expect(ext.backendRefs[0]).toEqual({ name: service.metadata.name, port: portOf('grpc') });
    expect(ext.failOpen).toBe(false);
    expect(ext.metadata.writableNamespaces).toContain(LB_METADATA_NAMESPACE);
    expect(durationMs(ext.messageTimeout)).toBeGreaterThan(defaults.prefillTimeoutMs);
    const pool = yamlDocs('deploy/kubernetes/inference-pool.yaml').find(
      (d) => d.kind === 'InferencePool',
    ) as Yaml;
    expect(pool.spec.endpointPickerRef).toMatchObject({
      name: service.metadata.name,
      port: { number: portOf('grpc') },
      failureMode: 'FailClose',
    });
    const istio = yamlDocs('deploy/kubernetes/istio-envoyfilter.yaml').find(
      (d) => d.kind === 'EnvoyFilter',
    ) as Yaml;
    const filter = istio.spec.configPatches[0].patch.value.typed_config;
    const host = `${service.metadata.name}.${service.metadata.namespace}.svc.cluster.local`;
    expect(filter.grpc_service.envoy_grpc.cluster_name).toBe(`outbound|${portOf('grpc')}||${host}`);
    expect(filter.grpc_service.envoy_grpc.authority).toBe(host); // not the cluster name (`|`)
    // The gateway's cluster for the router Service ejects a dead replica and gives up a connect as
    // envoy.yaml's vllm_router cluster does.
    const rule = yamlDocs('deploy/kubernetes/istio-envoyfilter.yaml').find(
      (d) => d.kind === 'DestinationRule',
    ) as Yaml;
    expect(rule.spec.host).toBe(host);
    expect(rule.metadata.namespace).toBe(service.metadata.namespace);
    const routerCluster = (envoy.static_resources.clusters as Yaml[]).find(
      (c) => c.name === 'vllm_router',
    ) as Yaml;
    const od = routerCluster.outlier_detection as Yaml;
    expect(rule.spec.trafficPolicy.outlierDetection).toEqual({
      splitExternalLocalOriginErrors: od.split_external_local_origin_errors,
      consecutiveLocalOriginFailures: od.consecutive_local_origin_failure,
      interval: od.interval,
      baseEjectionTime: od.base_ejection_time,
      maxEjectionPercent: od.max_ejection_percent,
    });
    expect(rule.spec.trafficPolicy.connectionPool.tcp.connectTimeout).toBe(routerCluster.connect_timeout);
  });

  it("gives Envoy Gateway's router cluster the retry, health check and ejection of envoy-replicas.yaml", () => {
    const replicas = yamlFile('envoy/envoy-replicas.yaml');
    const routerCluster = (replicas.static_resources.clusters as Yaml[]).find(
      (c) => c.name === 'vllm_router',
    ) as Yaml;
    const filter = (
      replicas.static_resources.listeners[0].filter_chains[0].filters[0].typed_config.http_filters as Yaml[]
    ).find((f) => f.name === 'envoy.filters.http.ext_proc') as Yaml;
    const retry = filter.typed_config.grpc_service.retry_policy as Yaml;
    const ext = (
      yamlDocs('deploy/kubernetes/envoy-gateway.yaml').find((d) => d.kind === 'EnvoyExtensionPolicy') as Yaml
    ).spec.extProc[0];
    const bs = ext.backendSettings as Yaml;
    expect(ext.statusOnError).toBe(filter.typed_config.status_on_error.code);
    expect(bs.retry.numRetries).toBe(retry.num_retries);
    expect(bs.retry.retryOn.triggers.join(',')).toBe(retry.retry_on);
    expect(durationMs(bs.retry.perRetry.backOff.baseInterval)).toBe(
      durationMs(retry.retry_back_off.base_interval),
    );
    expect(durationMs(bs.retry.perRetry.backOff.maxInterval)).toBe(
      durationMs(retry.retry_back_off.max_interval),
    );
    // The active check is patched in with a host name as :authority: Envoy Gateway's own sends the
    // cluster name, with '/' in it, which the router refuses (test/e2e/envoy-gateway.test.ts).
    expect(bs.healthCheck.active).toBeUndefined();
    const patch = (
      yamlDocs('deploy/kubernetes/envoy-gateway.yaml').find((d) => d.kind === 'EnvoyPatchPolicy') as Yaml
    ).spec.jsonPatches.find((p: Yaml) => (p.name as string).startsWith('envoyextensionpolicy/'));
    expect(patch.operation).toMatchObject({ op: 'add', path: '/health_checks' });
    const { authority, ...grpcCheck } = patch.operation.value[0].grpc_health_check;
    expect(authority).toMatch(/^[a-z0-9.-]+(:\d+)?$/);
    expect({ ...patch.operation.value[0], grpc_health_check: grpcCheck }).toEqual(
      routerCluster.health_checks[0],
    );
    const od = routerCluster.outlier_detection as Yaml;
    expect(bs.healthCheck.passive).toEqual({
      splitExternalLocalOriginErrors: od.split_external_local_origin_errors,
      consecutiveLocalOriginFailures: od.consecutive_local_origin_failure,
      interval: od.interval,
      baseEjectionTime: od.base_ejection_time,
      maxEjectionPercent: od.max_ejection_percent,
    });
    expect(bs.healthCheck.panicThreshold).toBe(routerCluster.common_lb_config.healthy_panic_threshold.value);
    // Affinity, patched in: the same Lua filter, stream metadata, hash and balance as envoy-replicas.yaml.
    const patches = (
      yamlDocs('deploy/kubernetes/envoy-gateway.yaml').find((d) => d.kind === 'EnvoyPatchPolicy') as Yaml
    ).spec.jsonPatches as Yaml[];
    const valueAt = (suffix: string) =>
      patches.find((p) => (p.operation.path as string).endsWith(suffix))?.operation.value;
    const hcm = replicas.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    const lua = (hcm.http_filters as Yaml[]).find((f) => f.name === 'envoy.filters.http.lua') as Yaml;
    expect(valueAt('/http_filters/0').typed_config.default_source_code.inline_string.trim()).toBe(
      lua.typed_config.default_source_code.inline_string.trim(),
    );
    expect(valueAt('/grpc_service/initial_metadata')).toEqual(
      filter.typed_config.grpc_service.initial_metadata,
    );
    expect(valueAt('/retry_policy/retry_host_predicate')).toEqual(retry.retry_host_predicate);
    expect(valueAt('/retry_policy/host_selection_retry_max_attempts')).toBe(
      retry.host_selection_retry_max_attempts,
    );
    const protocol = routerCluster.typed_extension_protocol_options[
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions'
    ] as Yaml;
    expect(valueAt('/hash_policy')).toEqual(protocol.hash_policy);
    expect(routerCluster.lb_policy).toBe('MAGLEV');
    expect(
      valueAt('/load_balancing_policy').policies[0].typed_extension_config.typed_config
        .consistent_hashing_lb_config,
    ).toEqual(routerCluster.common_lb_config.consistent_hashing_lb_config);
    expect(valueAt('/common_lb_config/update_merge_window')).toBe(
      routerCluster.common_lb_config.update_merge_window,
    );
    expect(valueAt('/request_headers_to_remove')).toEqual(hcm.route_config.request_headers_to_remove);
    expect(bs.timeout.tcp.connectTimeout).toBe(routerCluster.connect_timeout);
  });
});
