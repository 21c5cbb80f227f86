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
  /**
   * With `replicaAffinityHeader`: a request WITHOUT that header is hashed on the opening of its
   * prompt instead (a Lua filter before ext_proc copies the body's first PREFIX_KEY_BYTES from its
   * `"messages"` or `"prompt"` field into PREFIX_KEY_HEADER), so requests that start alike reach the
   * same replica, whose picture then holds all of them; Maglev's bounded load
   * (`hash_balance_factor`) spills a hot opening to the next replica. See PREFIX_KEY_LUA.
   */
  replicaPrefixKey?: boolean;
  /**
   * Fallback endpoints (the router's `--fallback-endpoints`): `vllm_workers` becomes a cluster of these
   * known workers with Envoy's override_host policy on `x-gateway-destination-endpoint` (each attempt
   * takes the next endpoint of the list), which reports the endpoint that served in the `envoy.lb`
   * metadata (`x-gateway-destination-endpoint-served`, forwarded to the router), and the route retries
   * a request a worker refused or reset before answering `retries` times.
   */
  fallback?: { workers: Array<{ host: string; port: number }>; retries: number };
}

/**
 * A `vllm_workers` cluster of known workers on Envoy's override_host policy (`EnvoyRenderOptions.fallback`;
 * InferencePool gateways route this way): the host comes from the router's destination header (or
 * `source`: its `envoy.lb` metadata), one endpoint of the list per attempt, and the endpoint that
 * served is written back to the `envoy.lb` metadata for the router.
 */
export function overrideHostCluster(
  workers: ReadonlyArray<{ host: string; port: number }>,
  source: { header: string } | { metadata: Yaml } = { header: 'x-gateway-destination-endpoint' },
): Yaml {
  return {
    type: 'STATIC',
    load_assignment: {
      cluster_name: 'vllm_workers',
      endpoints: [
        {
          lb_endpoints: workers.map((w) => ({
            endpoint: { address: { socket_address: { address: w.host, port_value: w.port } } },
          })),
        },
      ],
    },
    load_balancing_policy: {
      policies: [
        {
          typed_extension_config: {
            name: 'envoy.load_balancing_policies.override_host',
            typed_config: {
              '@type':
                'type.googleapis.com/envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost',
              override_host_sources: [source],
              selected_host_key: {
                key: 'envoy.lb',
                path: [{ key: 'x-gateway-destination-endpoint-served' }],
              },
              // Once the list is used up: Envoy's own choice (the router still moves the load there).
              // The router fills its list to --fallback-endpoints + 1 entries, so with num_retries at
              // most that, only a one-endpoint list (--fallback-endpoints 0) gets here.
              fallback_policy: {
                policies: [
                  {
                    typed_extension_config: {
                      name: 'envoy.load_balancing_policies.least_request',
                      typed_config: {
                        '@type':
                          'type.googleapis.com/envoy.extensions.load_balancing_policies.least_request.v3.LeastRequest',
                      },
                    },
                  },
                ],
              },
            },
          },
        },
      ],
    },
  };
}

/** A retry on another endpoint of the list: the worker refused the connection or reset the request. */
export const FALLBACK_RETRY_ON = 'connect-failure,refused-stream,reset-before-request';

/** The header the prefix-key Lua filter sets (and the route strips before the worker). */
export const PREFIX_KEY_HEADER = 'x-vllm-router-prefix-key';
/** Bytes of the body, from its `"messages"` / `"prompt"` key, that make the prefix key. */
export const PREFIX_KEY_BYTES = 256;
/** Maglev bounded load: a replica takes at most this % of the mean active streams before spilling. */
export const PREFIX_KEY_BALANCE_FACTOR = 150;

/**
 * The session header Claude Code sends on every request of a coding session (and the Anthropic SDKs'
 * agents built on it): with no client session key, it is the affinity key.
 */
export const AGENT_SESSION_HEADER = 'x-claude-code-session-id';
/** Characters of a session id (header or prompt_cache_key) the key keeps (Claude Code's are 36-character UUIDs). */
export const AGENT_SESSION_KEY_CHARS = 128;

/**
 * The prefix key, in Envoy's Lua filter: no key when the client named its session (that hash wins).
 * A request that names its session otherwise is keyed by that: Claude Code's AGENT_SESSION_HEADER (the
 * body is not read), else the body's `"prompt_cache_key"` (OpenAI's key for requests that share a
 * prefix, which agents such as Codex set per conversation; looked for in the body's last 4 KiB, where
 * the SDKs write it after the prompt). Any other request is keyed by its prompt's opening: the
 * PREFIX_KEY_BYTES from its `"messages"`, `"prompt"` or (Responses API) `"input"` key, none when the
 * body's first 4 KiB have none of them. Control characters (a pretty-printed body's newlines) are
 * dropped: they are not valid in a header value. Bytes above 0x7f (raw UTF-8: JSON.stringify keeps
 * it) are written as hex, so the key is printable ASCII, as gRPC metadata values are meant to be.
 */
export const PREFIX_KEY_LUA = (sessionHeader: string) => `
local function printable(s)
  s = string.gsub(s, "%c", "")
  return (string.gsub(s, "[\\128-\\255]", function(c) return string.format("%02x", string.byte(c)) end))
end
function envoy_on_request(request_handle)
  request_handle:headers():remove("${PREFIX_KEY_HEADER}")
  if request_handle:headers():get("${sessionHeader}") ~= nil then return end
  local agent = request_handle:headers():get("${AGENT_SESSION_HEADER}")
  if agent ~= nil and agent ~= "" then
    request_handle:headers():add("${PREFIX_KEY_HEADER}", "session " .. printable(string.sub(agent, 1, ${AGENT_SESSION_KEY_CHARS})))
    return
  end
  local body = request_handle:body()
  if body == nil then return end
  -- A headers object taken before body() is out of scope once it has waited for the body.
  local headers = request_handle:headers()
  local length = body:length()
  local tail = body:getBytes(math.max(0, length - 4096), math.min(length, 4096))
  local cache_key = string.match(tail, '"prompt_cache_key"%s*:%s*"([^"]+)"')
  if cache_key ~= nil then
    headers:add("${PREFIX_KEY_HEADER}", "session " .. printable(string.sub(cache_key, 1, ${AGENT_SESSION_KEY_CHARS})))
    return
  end
  local head = body:getBytes(0, math.min(length, 4096))
  local at = string.find(head, '"messages"', 1, true) or string.find(head, '"prompt"', 1, true)
    or string.find(head, '"input"', 1, true)
  if at == nil then return end
  headers:add("${PREFIX_KEY_HEADER}", printable(string.sub(head, at, at + ${PREFIX_KEY_BYTES} - 1)))
end
`;

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
        // Two timeouts or failed connections in a row: one slow answer under load must not take a
        // replica out (with another replica down that left none, and every request failed until the
        // next check). NOT_SERVING (a drain) still takes it out at the first check.
        unhealthy_threshold: 2,
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
    if (opts.replicaPrefixKey) {
      extProc.typed_config.grpc_service.initial_metadata.push({
        key: PREFIX_KEY_HEADER,
        value: `%REQ(${PREFIX_KEY_HEADER})%`,
      });
      // The session's hash, when the client sent one, is the only one (terminal).
      protocol.hash_policy = [
        { header: { header_name: header }, terminal: true },
        { header: { header_name: PREFIX_KEY_HEADER } },
      ];
      routerCluster.common_lb_config = {
        ...routerCluster.common_lb_config,
        consistent_hashing_lb_config: { hash_balance_factor: PREFIX_KEY_BALANCE_FACTOR },
      };
      const at = (hcm.http_filters as Yaml[]).indexOf(extProc);
      (hcm.http_filters as Yaml[]).splice(at, 0, {
        name: 'envoy.filters.http.lua',
        typed_config: {
          '@type': 'type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua',
          default_source_code: { inline_string: PREFIX_KEY_LUA(header) },
        },
      });
      // The key is for choosing a replica; the worker never sees it.
      hcm.route_config.request_headers_to_remove = [PREFIX_KEY_HEADER];
    }
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
      typed_extension_protocol_options: {
        [HTTP_PROTOCOL_OPTIONS]: {
          '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
          common_http_protocol_options: { idle_timeout: '4s' },
          explicit_http_config: { http_protocol_options: {} },
        },
      },
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
  if (opts.fallback) {
    const i = clusters.findIndex((c) => c.name === 'vllm_workers');
    const old = clusters[i] as Yaml;
    delete old.type;
    delete old.lb_policy;
    delete old.original_dst_lb_config;
    clusters[i] = { ...old, ...overrideHostCluster(opts.fallback.workers) };
    // Envoy's default allows 3 retries in flight per cluster: a worker that dies under load fails
    // over many requests at once.
    for (const t of (clusters[i] as Yaml).circuit_breakers.thresholds as Yaml[]) t.max_retries = 1024;
    const route = (hcm.route_config.virtual_hosts[0].routes as Yaml[])[0] as Yaml;
    route.route.retry_policy = { retry_on: FALLBACK_RETRY_ON, num_retries: opts.fallback.retries };
    const metadata = extProc.typed_config.metadata_options as Yaml;
    metadata.forwarding_namespaces = { untyped: ['envoy.lb'] };
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
