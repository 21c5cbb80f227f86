/**
 * Renders envoy/envoy.yaml (the one reference config) with other ports and modes, for tests, the demo
 * and the benchmarks. Edits are structural (parsed YAML), never a second copy of the file.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { parse, stringify } from 'yaml';

export const ENVOY_YAML = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  fileURLToPath(import.meta.url).includes(`${path.sep}dist${path.sep}`)
    ? '../../../envoy/envoy.yaml'
    : '../../envoy/envoy.yaml',
);

export type BodyMode = 'NONE' | 'STREAMED' | 'BUFFERED' | 'FULL_DUPLEX_STREAMED';

export interface EnvoyRenderOptions {
  /** Listener port (0 = any free port). */
  listenerPort?: number;
  listenerAddress?: string;
  adminPort?: number;
  /** ext_proc servers (host:port); several = Envoy balances streams across them. */
  routers?: Array<{ host: string; port: number }>;
  /** Drop the ext_proc filter entirely (the "Envoy without router" baseline). */
  withoutExtProc?: boolean;
  /** For the baseline: a fixed upstream instead of ORIGINAL_DST. */
  staticUpstream?: { host: string; port: number };
  requestBodyMode?: BodyMode;
  responseBodyMode?: BodyMode;
  /** Trailer modes (FULL_DUPLEX_STREAMED needs SEND). */
  trailerMode?: 'SEND' | 'SKIP';
  messageTimeout?: string;
  /** gRPC health-check the router cluster (rolling restarts). */
  routerHealthCheck?: boolean;
  /**
   * Fail open (`failure_mode_allow: true`): a request no router replica answered goes to Envoy's own
   * load balancer over these workers (never to an address the client supplied).
   */
  failOpen?: { fallbackWorkers: Array<{ host: string; port: number }> };
  /**
   * A plain ext_proc setup: without the two settings envoy.yaml recommends for the router cluster
   * (`max_requests_per_connection`, and the `ext_proc_graceful_grpc_close` runtime flag), so Envoy
   * resets every finished ext_proc stream on long-lived connections (issue 15's "Envoy's defaults").
   */
  envoyDefaults?: boolean;
  /**
   * Session affinity across router replicas: Envoy copies this request header into the ext_proc
   * stream's gRPC metadata and Maglev-hashes the router cluster on it, so every request of a session
   * goes to the same replica (its prefix tree then sees the whole session). Requests without the
   * header spread as before (no hash: a random replica).
   */
  replicaAffinityHeader?: string;
}

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const HTTP_PROTOCOL_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';

export function renderEnvoyConfig(opts: EnvoyRenderOptions = {}): string {
  const doc = parse(readFileSync(ENVOY_YAML, 'utf8')) as Yaml;
  doc.admin.address.socket_address.port_value = opts.adminPort ?? 0;
  const listener = doc.static_resources.listeners[0];
  listener.address.socket_address.port_value = opts.listenerPort ?? 0;
  if (opts.listenerAddress) listener.address.socket_address.address = opts.listenerAddress;
  const hcm = listener.filter_chains[0].filters[0].typed_config;
  const filters = hcm.http_filters as Yaml[];
  const extProc = filters.find((f) => f.name === 'envoy.filters.http.ext_proc') as Yaml;
  const pm = extProc.typed_config.processing_mode;
  if (opts.requestBodyMode) pm.request_body_mode = opts.requestBodyMode;
  if (opts.responseBodyMode) pm.response_body_mode = opts.responseBodyMode;
  if (opts.trailerMode) {
    pm.request_trailer_mode = opts.trailerMode;
    pm.response_trailer_mode = opts.trailerMode;
  }
  if (opts.messageTimeout) extProc.typed_config.message_timeout = opts.messageTimeout;
  if (opts.withoutExtProc) hcm.http_filters = filters.filter((f) => f !== extProc);

  const clusters = doc.static_resources.clusters as Yaml[];
  const routerCluster = clusters.find((c) => c.name === 'vllm_router') as Yaml;
  if (opts.routers) {
    routerCluster.type = 'STATIC';
    routerCluster.load_assignment.endpoints[0].lb_endpoints = opts.routers.map((r) => ({
      endpoint: { address: { socket_address: { address: r.host, port_value: r.port } } },
    }));
  }
  if (opts.routerHealthCheck) {
    routerCluster.health_checks = [
      {
        timeout: '1s',
        interval: '0.5s',
        unhealthy_threshold: 1,
        healthy_threshold: 1,
        no_traffic_interval: '0.5s',
        grpc_health_check: { service_name: 'envoy.service.ext_proc.v3.ExternalProcessor' },
      },
    ];
    routerCluster.common_lb_config = {
      healthy_panic_threshold: { value: 0 },
      // Hand health changes to the worker threads' load balancers at once. Envoy's default merges
      // them for up to 1 s: a replica back in rotation got no stream for that long, and if the other
      // one died in that second, every request failed (docs/deploy-envoy.md).
      update_merge_window: '0s',
    };
  }
  if (opts.envoyDefaults) {
    const protocol = routerCluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS] as Yaml;
    delete protocol.common_http_protocol_options;
    for (const layer of (doc.layered_runtime?.layers ?? []) as Yaml[]) {
      delete layer.static_layer?.['envoy.reloadable_features.ext_proc_graceful_grpc_close'];
    }
  }
  if (opts.replicaAffinityHeader) {
    const header = opts.replicaAffinityHeader;
    extProc.typed_config.grpc_service.initial_metadata = [{ key: header, value: `%REQ(${header})%` }];
    routerCluster.lb_policy = 'MAGLEV';
    const protocol = routerCluster.typed_extension_protocol_options[HTTP_PROTOCOL_OPTIONS] as Yaml;
    protocol.hash_policy = [{ header: { header_name: header } }];
  }
  if (opts.failOpen) {
    extProc.typed_config.failure_mode_allow = true;
    const routes = hcm.route_config.virtual_hosts[0].routes as Yaml[];
    const steered = routes[0] as Yaml;
    steered.match.headers = [{ name: 'x-gateway-destination-endpoint', present_match: true }];
    routes.push({
      match: { prefix: '/' },
      route: { ...steered.route, cluster: 'vllm_workers_fallback' },
    });
    clusters.push({
      name: 'vllm_workers_fallback',
      type: 'STATIC',
      lb_policy: 'LEAST_REQUEST',
      connect_timeout: '5s',
      per_connection_buffer_limit_bytes: 33554432,
      // As vllm_workers: close idle worker connections before the worker's 5 s keep-alive does.
      common_http_protocol_options: { idle_timeout: '4s' },
      load_assignment: {
        cluster_name: 'vllm_workers_fallback',
        endpoints: [
          {
            lb_endpoints: opts.failOpen.fallbackWorkers.map((w) => ({
              endpoint: { address: { socket_address: { address: w.host, port_value: w.port } } },
            })),
          },
        ],
      },
    });
  }
  if (opts.staticUpstream) {
    const workers = clusters.find((c) => c.name === 'vllm_workers') as Yaml;
    delete workers.original_dst_lb_config;
    workers.type = 'STATIC';
    workers.lb_policy = 'ROUND_ROBIN';
    workers.load_assignment = {
      cluster_name: 'vllm_workers',
      endpoints: [
        {
          lb_endpoints: [
            {
              endpoint: {
                address: {
                  socket_address: { address: opts.staticUpstream.host, port_value: opts.staticUpstream.port },
                },
              },
            },
          ],
        },
      ],
    };
  }
  return stringify(doc);
}
