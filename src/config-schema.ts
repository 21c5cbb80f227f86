/**
 * The single source of truth for every setting: CLI flag, YAML key, type, default, help.
 * config.ts parses against it, `--help` prints it, and docs/configuration.md is generated from it
 * (scripts/gen-config-docs.ts), so the three cannot drift.
 */
export type OptionType = 'int' | 'number' | 'string' | 'bool' | 'list' | 'enum';

export interface OptionSpec {
  /** Key in the Config object and in the YAML file (camelCase). */
  readonly key: string;
  /** CLI flag without the leading dashes (kebab-case). */
  readonly flag: string;
  readonly type: OptionType;
  readonly default: unknown;
  readonly help: string;
  readonly values?: readonly string[];
  readonly group: string;
}

export const POLICY_VALUES = [
  'round_robin',
  'random',
  'power_of_two',
  'least_load',
  'consistent_hash',
  'cache_aware',
] as const;

export const OPTIONS = [
  // Server
  {
    group: 'Server',
    key: 'host',
    flag: 'host',
    type: 'string',
    default: '0.0.0.0',
    help: 'Address the gRPC and admin servers bind to.',
  },
  {
    group: 'Server',
    key: 'grpcPort',
    flag: 'grpc-port',
    type: 'int',
    default: 9002,
    help: "ext_proc gRPC port (Envoy's ext_proc cluster points here; 0 = any free port).",
  },
  {
    group: 'Server',
    key: 'adminPort',
    flag: 'admin-port',
    type: 'int',
    default: 9090,
    help: 'Admin HTTP port: /metrics, /healthz, /readyz, /workers (0 = any free port).',
  },
  {
    group: 'Server',
    key: 'logLevel',
    flag: 'log-level',
    type: 'enum',
    default: 'info',
    values: ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'],
    help: 'pino log level (debug logs one line per request).',
  },
  {
    group: 'Server',
    key: 'maxBodyBytes',
    flag: 'max-body-bytes',
    type: 'int',
    default: 32 * 1024 * 1024,
    help: "Largest request body accepted (413 above). Keep Envoy's buffer limits at or above it.",
  },
  {
    group: 'Server',
    key: 'drainTimeoutMs',
    flag: 'drain-timeout-ms',
    type: 'int',
    default: 30000,
    help: 'On SIGTERM/SIGINT, how long in-flight streams may finish before sockets close.',
  },
  {
    group: 'Server',
    key: 'decisionHeader',
    flag: 'decision-header',
    type: 'bool',
    default: false,
    help: 'Add x-vllm-router-decision (policy, branch, match rate, worker) to responses.',
  },
  // Workers & discovery
  {
    group: 'Workers and discovery',
    key: 'mode',
    flag: 'mode',
    type: 'enum',
    default: 'regular',
    values: ['regular', 'pd'],
    help: 'regular: one pool of full workers; pd: prefill/decode disaggregation.',
  },
  {
    group: 'Workers and discovery',
    key: 'workers',
    flag: 'worker',
    type: 'list',
    default: [],
    help: 'Static regular worker URL (repeatable), e.g. http://10.0.0.5:8000.',
  },
  {
    group: 'Workers and discovery',
    key: 'prefill',
    flag: 'prefill',
    type: 'list',
    default: [],
    help: 'Static prefill worker URL (repeatable).',
  },
  {
    group: 'Workers and discovery',
    key: 'decode',
    flag: 'decode',
    type: 'list',
    default: [],
    help: 'Static decode worker URL (repeatable).',
  },
  {
    group: 'Workers and discovery',
    key: 'discoveryZmq',
    flag: 'discovery-zmq',
    type: 'string',
    default: '',
    help: 'Bind a ZMQ ROUTER socket for vLLM heartbeats, e.g. tcp://0.0.0.0:30001 (empty = off).',
  },
  {
    group: 'Workers and discovery',
    key: 'discoveryTtlMs',
    flag: 'discovery-ttl-ms',
    type: 'int',
    default: 5000,
    help: 'A registration expires this long after its last heartbeat (vLLM heartbeats every 3 s).',
  },
  {
    group: 'Workers and discovery',
    key: 'discoveryAllow',
    flag: 'discovery-allow',
    type: 'list',
    default: [],
    help: 'CIDR allowed to register (repeatable; empty = any). Checked on the admin API peer and on the claimed worker address.',
  },
  {
    group: 'Workers and discovery',
    key: 'adminToken',
    flag: 'admin-token',
    type: 'string',
    default: '',
    help: 'Bearer token required by POST/DELETE /workers (empty = no token). Env: VLLM_ROUTER_ADMIN_TOKEN.',
  },
  // Policies
  {
    group: 'Policies',
    key: 'policy',
    flag: 'policy',
    type: 'enum',
    default: 'cache_aware',
    values: POLICY_VALUES,
    help: 'Policy of the regular pool.',
  },
  {
    group: 'Policies',
    key: 'prefillPolicy',
    flag: 'prefill-policy',
    type: 'enum',
    default: 'cache_aware',
    values: POLICY_VALUES,
    help: 'Policy of the prefill pool (pd mode).',
  },
  {
    group: 'Policies',
    key: 'decodePolicy',
    flag: 'decode-policy',
    type: 'enum',
    default: 'power_of_two',
    values: POLICY_VALUES,
    help: 'Policy of the decode pool (pd mode).',
  },
  {
    group: 'Policies',
    key: 'cacheThreshold',
    flag: 'cache-threshold',
    type: 'number',
    default: 0.3,
    help: 'cache_aware: minimum matched/prompt ratio to follow prefix affinity.',
  },
  {
    group: 'Policies',
    key: 'balanceAbsThreshold',
    flag: 'balance-abs-threshold',
    type: 'number',
    default: 64,
    help: 'cache_aware: the cache owner yields when its load > mean + this (and > mean * rel).',
  },
  {
    group: 'Policies',
    key: 'balanceRelThreshold',
    flag: 'balance-rel-threshold',
    type: 'number',
    default: 1.5,
    help: 'cache_aware: the cache owner yields when its load > mean * this (and > mean + abs).',
  },
  {
    group: 'Policies',
    key: 'cacheAwareMode',
    flag: 'cache-aware-mode',
    type: 'enum',
    default: 'per_request',
    values: ['per_request', 'global'],
    help: "per_request: overload escape per request; global: the reference router's fleet-wide imbalance gate.",
  },
  {
    group: 'Policies',
    key: 'evictionIntervalMs',
    flag: 'eviction-interval-ms',
    type: 'int',
    default: 120000,
    help: 'cache_aware: how often trees are trimmed to max-tree-size.',
  },
  {
    group: 'Policies',
    key: 'maxTreeSize',
    flag: 'max-tree-size',
    type: 'int',
    default: 2 ** 26,
    help: 'cache_aware: characters of prompt text kept per worker.',
  },
  // P/D
  {
    group: 'Prefill/decode',
    key: 'kvConnector',
    flag: 'kv-connector',
    type: 'enum',
    default: 'nixl',
    values: ['nixl', 'mooncake', 'moriio', 'p2pnccl'],
    help: 'vLLM KV connector of the fleet: decides the kv_transfer_params of both legs.',
  },
  {
    group: 'Prefill/decode',
    key: 'pdDispatch',
    flag: 'pd-dispatch',
    type: 'enum',
    default: 'auto',
    values: ['auto', 'sequential', 'concurrent', 'sidecar'],
    help: 'auto: sequential, or concurrent for MoRI-IO WRITE registrations.',
  },
  {
    group: 'Prefill/decode',
    key: 'prefillTimeoutMs',
    flag: 'prefill-timeout-ms',
    type: 'int',
    default: 60000,
    help: "Timeout of the prefill leg; keep it below Envoy's ext_proc message_timeout.",
  },
  {
    group: 'Prefill/decode',
    key: 'prefillRetries',
    flag: 'prefill-retries',
    type: 'int',
    default: 1,
    help: 'Sequential mode: retries of a failed prefill on another prefill worker.',
  },
  // Health
  {
    group: 'Health',
    key: 'healthCheckIntervalMs',
    flag: 'health-check-interval-ms',
    type: 'int',
    default: 10000,
    help: 'Active GET /health interval per worker (0 = off).',
  },
  {
    group: 'Health',
    key: 'healthCheckTimeoutMs',
    flag: 'health-check-timeout-ms',
    type: 'int',
    default: 5000,
    help: 'Active health check timeout.',
  },
  {
    group: 'Health',
    key: 'healthFailureThreshold',
    flag: 'health-failure-threshold',
    type: 'int',
    default: 3,
    help: 'Consecutive failed checks before a worker is unhealthy.',
  },
  {
    group: 'Health',
    key: 'healthSuccessThreshold',
    flag: 'health-success-threshold',
    type: 'int',
    default: 2,
    help: 'Consecutive passed checks before it is healthy again.',
  },
  {
    group: 'Health',
    key: 'cbFailureThreshold',
    flag: 'cb-failure-threshold',
    type: 'int',
    default: 5,
    help: "Consecutive request failures that open a worker's circuit breaker.",
  },
  {
    group: 'Health',
    key: 'cbSuccessThreshold',
    flag: 'cb-success-threshold',
    type: 'int',
    default: 2,
    help: 'Successes in half-open state that close the breaker.',
  },
  {
    group: 'Health',
    key: 'cbCooldownMs',
    flag: 'cb-cooldown-ms',
    type: 'int',
    default: 30000,
    help: 'Time an open breaker waits before half-open.',
  },
] as const satisfies readonly OptionSpec[];
