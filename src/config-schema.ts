/**
 * The single source of truth for every setting: CLI flag, YAML key, type, default, help.
 * config.ts parses against it, `--help` prints it, docs/configuration.md is generated from it
 * (scripts/gen-config-docs.ts), and the `Config` type is derived from it (below), so none can drift.
 *
 * Adding a setting is ONE entry in OPTIONS: the key appears in `Config` with the type its `type`
 * (and `values`) imply; then regenerate the docs. A default or a set of values that a module owns
 * (policy names, cache-aware thresholds, breaker thresholds) is imported from that module, never
 * written here a second time.
 */
import { POLICY_NAMES } from './routing/policy.js';
import { CACHE_AWARE_MODES, DEFAULT_CACHE_AWARE_OPTIONS as CACHE_AWARE } from './routing/cache-aware.js';
import { DEFAULT_BREAKER_OPTIONS as BREAKER } from './health/circuit-breaker.js';
import { DEFAULT_SCRAPE_OPTIONS as SCRAPE } from './load/metrics-scraper.js';
import { DEFAULT_METRIC_NAMES as METRIC_NAMES } from './load/metrics-parse.js';
import { DEFAULT_STALE_AFTER_MS } from './load/load-board.js';
import { DEFAULT_TIMING_PRIORS as PRIORS } from './load/timing-estimates.js';
import { DEFAULT_RESPONSE_BODY_SAMPLE, DEFAULT_RESPONSE_BODY_WATCH_MAX } from './load/timing-dispatcher.js';

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
  /**
   * Lists only: false when an item may itself contain commas (`WORKER_URL=EP1,EP2`), so each repeated
   * flag or YAML list item is one item. Default true: `--workers a,b` is two items.
   */
  readonly splitCommas?: boolean;
}

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
    help: 'On SIGTERM/SIGINT, how long in-flight streams may finish before sockets close. Routed requests still streaming then are handed back to Envoy (their ext_proc stream ends with gRPC OK), which finishes them without the router.',
  },
  {
    group: 'Server',
    key: 'drainGraceMs',
    flag: 'drain-grace-ms',
    type: 'int',
    default: 5000,
    help: 'On SIGTERM/SIGINT, keep accepting streams this long after readiness turns off, so Envoy health checks and readiness probes stop sending first.',
  },
  {
    group: 'Server',
    key: 'warmupTimeoutMs',
    flag: 'warmup-timeout-ms',
    type: 'int',
    default: 10000,
    help: 'Readiness (gRPC health, /readyz) waits until the router has rebuilt its picture of the fleet from the workers (Kubernetes pods listed, every worker scraped once, KV-event streams replayed), at most this long.',
  },
  {
    group: 'Server',
    key: 'closeGraceMs',
    flag: 'close-grace-ms',
    type: 'int',
    default: 5000,
    help: 'After a drain, how long closing lets open gRPC calls deliver their last replies before cancelling them.',
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
    help: 'Static prefill worker: URL [BOOTSTRAP_PORT] (repeatable), e.g. --prefill http://10.0.0.5:8000 8998; the port is the instance\'s Mooncake bootstrap server (VLLM_MOONCAKE_BOOTSTRAP_PORT, default 8998). YAML: "URL PORT" or {url, bootstrapPort}.',
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
  // Kubernetes discovery (the reference router's flag names)
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscovery',
    flag: 'service-discovery',
    type: 'bool',
    default: false,
    help: 'Discover worker pods from the Kubernetes API (list + watch; in-cluster config or kubeconfig). A pod is a worker while Running, with a pod IP, Ready, matching its role selector and not terminating.',
  },
  {
    group: 'Kubernetes discovery',
    key: 'selector',
    flag: 'selector',
    type: 'list',
    default: [],
    help: 'Label selector key=value of regular worker pods (repeatable or comma-separated; all must match). Required in regular mode.',
  },
  {
    group: 'Kubernetes discovery',
    key: 'prefillSelector',
    flag: 'prefill-selector',
    type: 'list',
    default: [],
    help: 'Label selector key=value of prefill pods (pd mode; required there).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'decodeSelector',
    flag: 'decode-selector',
    type: 'list',
    default: [],
    help: 'Label selector key=value of decode pods (pd mode; required there).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryPort',
    flag: 'service-discovery-port',
    type: 'int',
    default: 8000,
    help: "vLLM's HTTP port in the pods: workers are http://<podIP>:<port>.",
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryNamespace',
    flag: 'service-discovery-namespace',
    type: 'string',
    default: '',
    help: 'Namespace to watch (empty = all namespaces, which needs deploy/kubernetes/rbac-cluster.yaml).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryKubeconfig',
    flag: 'service-discovery-kubeconfig',
    type: 'string',
    default: '',
    help: 'kubeconfig file (empty = $KUBECONFIG, ~/.kube/config, then the in-cluster service account).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryMetricsPort',
    flag: 'service-discovery-metrics-port',
    type: 'int',
    default: 0,
    help: 'Metrics port of worker pods without a vllm.ai/metrics-port annotation (0 = none; vLLM serves /metrics on its HTTP port).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryKvEventsPort',
    flag: 'service-discovery-kv-events-port',
    type: 'int',
    default: 0,
    help: 'KV-events (ZMQ publisher) port of worker pods without a vllm.ai/kv-events-port annotation (0 = none).',
  },
  {
    group: 'Kubernetes discovery',
    key: 'serviceDiscoveryResyncMs',
    flag: 'service-discovery-resync-ms',
    type: 'int',
    default: 300000,
    help: 'Each pod watch is restarted with a full relist at least this often (a watch also relists on every reconnect and on 410 Gone).',
  },
  // Policies
  {
    group: 'Policies',
    key: 'policy',
    flag: 'policy',
    type: 'enum',
    default: 'cache_aware',
    values: POLICY_NAMES,
    help: 'Policy of the regular pool.',
  },
  {
    group: 'Policies',
    key: 'prefillPolicy',
    flag: 'prefill-policy',
    type: 'enum',
    default: 'cache_aware',
    values: POLICY_NAMES,
    help: 'Policy of the prefill pool (pd mode).',
  },
  {
    group: 'Policies',
    key: 'decodePolicy',
    flag: 'decode-policy',
    type: 'enum',
    default: 'power_of_two',
    values: POLICY_NAMES,
    help: 'Policy of the decode pool (pd mode).',
  },
  {
    group: 'Policies',
    key: 'cacheThreshold',
    flag: 'cache-threshold',
    type: 'number',
    default: CACHE_AWARE.cacheThreshold,
    help: 'cache_aware: minimum matched/prompt ratio to follow prefix affinity.',
  },
  {
    group: 'Policies',
    key: 'balanceAbsThreshold',
    flag: 'balance-abs-threshold',
    type: 'number',
    default: CACHE_AWARE.balanceAbsThreshold,
    help: "cache_aware: the cache owner yields when its load > mean + this (and > mean * rel). Size it near the in-flight requests per worker: the default (the reference router's) never fires when workers average fewer than ~64 (docs/benchmarks.md, multi-turn).",
  },
  {
    group: 'Policies',
    key: 'balanceRelThreshold',
    flag: 'balance-rel-threshold',
    type: 'number',
    default: CACHE_AWARE.balanceRelThreshold,
    help: 'cache_aware: the cache owner yields when its load > mean * this (and > mean + abs).',
  },
  {
    group: 'Policies',
    key: 'cacheAwareMode',
    flag: 'cache-aware-mode',
    type: 'enum',
    default: CACHE_AWARE.mode,
    values: CACHE_AWARE_MODES,
    help: "cost: lowest predicted time to first token (prefill tokens queued ahead + uncached tokens, x learned prefill cost; + requests queued by others x learned wait; running sequences as a fuller decode batch); per_request: the reference router's rule with the owner's overload escape per request; global: the reference router's fleet-wide imbalance gate.",
  },
  {
    group: 'Policies',
    key: 'evictionIntervalMs',
    flag: 'eviction-interval-ms',
    type: 'int',
    default: CACHE_AWARE.evictionIntervalMs,
    help: 'cache_aware: how often trees are trimmed to max-tree-size.',
  },
  {
    group: 'Policies',
    key: 'maxTreeSize',
    flag: 'max-tree-size',
    type: 'int',
    default: CACHE_AWARE.maxTreeSize,
    help: 'cache_aware: characters of prompt text kept per worker.',
  },
  // KV events (exact prefix routing)
  {
    group: 'KV events',
    key: 'kvEventSource',
    flag: 'kv-event-source',
    type: 'list',
    splitCommas: false,
    default: [],
    help: "A worker's KV-event publishers: WORKER_URL=ENDPOINT[,ENDPOINT...] (one per data-parallel rank, e.g. http://10.0.0.5:8000=tcp://10.0.0.5:5557; repeatable). Workers that publish are routed on their exact cache by kv_aware.",
  },
  {
    group: 'KV events',
    key: 'kvEventReplay',
    flag: 'kv-event-replay',
    type: 'list',
    splitCommas: false,
    default: [],
    help: "Replay endpoints (vLLM's replay_endpoint) for a --kv-event-source worker, same rank order: WORKER_URL=ENDPOINT[,ENDPOINT...] (repeatable). Without one, a sequence gap or reconnect drops that worker's entries.",
  },
  {
    group: 'KV events',
    key: 'kvEventPort',
    flag: 'kv-event-port',
    type: 'int',
    default: 0,
    help: 'Default rule for workers without --kv-event-source: subscribe to tcp://<worker host>:<port + rank> (vLLM default 5557; 0 = off).',
  },
  {
    group: 'KV events',
    key: 'kvEventReplayPort',
    flag: 'kv-event-replay-port',
    type: 'int',
    default: 0,
    help: 'Default rule: replay endpoint tcp://<worker host>:<port + rank> (0 = no replay).',
  },
  {
    group: 'KV events',
    key: 'kvEventDpSize',
    flag: 'kv-event-dp-size',
    type: 'int',
    default: 1,
    help: 'Default rule: data-parallel ranks per worker (one publisher each, at consecutive ports).',
  },
  {
    group: 'KV events',
    key: 'kvEventTopic',
    flag: 'kv-event-topic',
    type: 'string',
    default: '',
    help: "ZMQ topic prefix to subscribe to (vLLM's kv-events-config topic; empty = all).",
  },
  {
    group: 'KV events',
    key: 'kvEventBlockSize',
    flag: 'kv-event-block-size',
    type: 'int',
    default: 0,
    help: "Tokens per KV block to hash requests at (0 = learn each worker's block size from its BlockStored events).",
  },
  {
    group: 'KV events',
    key: 'kvPendingTtlMs',
    flag: 'kv-pending-ttl-ms',
    type: 'int',
    default: 3000,
    help: "How long the blocks of a prompt routed to a worker count as held there before the worker's KV events confirm them (its queue wait and prefill); 0 = only what events show.",
  },
  {
    group: 'KV events',
    key: 'kvIndexMaxBlocks',
    flag: 'kv-index-max-blocks',
    type: 'int',
    default: 262144,
    help: 'Exact index bound: blocks kept per publisher (least recently stored forgotten beyond).',
  },
  {
    group: 'KV events',
    key: 'kvTierCredit',
    flag: 'kv-tier-credit',
    type: 'list',
    default: ['GPU=1', 'CPU=0.5'],
    help: 'Credit per KV medium, MEDIUM=0..1 (repeatable): a block held only on CPU/storage counts as this fraction of a GPU hit. Unlisted media get 0.5.',
  },
  {
    group: 'KV events',
    key: 'tokenizer',
    flag: 'tokenizer',
    type: 'list',
    default: [],
    help: "MODEL=PATH (repeatable): a directory with the model's tokenizer.json and tokenizer_config.json, to tokenize requests (chat template included) as vLLM does. Requests for models without one fall back to the approximate tree.",
  },
  {
    group: 'KV events',
    key: 'tokenizerCacheChars',
    flag: 'tokenizer-cache-chars',
    type: 'int',
    default: 16 * 1024 * 1024,
    help: 'Characters of tokenized prompt pieces (lines, messages) each tokenizer keeps, ~4 bytes of heap each, so shared text is tokenized once. When full, a piece replaces older ones only if it was seen twice.',
  },
  // Load signals and the cost model
  {
    group: 'Load and cost model',
    key: 'scrapeIntervalMs',
    flag: 'scrape-interval-ms',
    type: 'int',
    default: SCRAPE.intervalMs,
    help: "How often every worker's Prometheus /metrics is scraped for its queue and KV usage (0 = off: in-flight counts only).",
  },
  {
    group: 'Load and cost model',
    key: 'scrapeTimeoutMs',
    flag: 'scrape-timeout-ms',
    type: 'int',
    default: SCRAPE.timeoutMs,
    help: 'Whole-request timeout of one scrape; a timed-out or failed scrape counts as a failed health check.',
  },
  {
    group: 'Load and cost model',
    key: 'scrapeConcurrency',
    flag: 'scrape-concurrency',
    type: 'int',
    default: SCRAPE.concurrency,
    help: 'Scrapes in flight at once (one per worker at most; a slow worker never delays the others).',
  },
  {
    group: 'Load and cost model',
    key: 'loadStaleMs',
    flag: 'load-stale-ms',
    type: 'int',
    default: DEFAULT_STALE_AFTER_MS,
    help: "A scraped sample older than this is ignored; the worker's load is then this router's in-flight count.",
  },
  {
    group: 'Load and cost model',
    key: 'metricWaiting',
    flag: 'metric-waiting',
    type: 'list',
    default: [...METRIC_NAMES.waiting],
    help: 'Metric names of the waiting queue, first found wins (vLLM, then SGLang).',
  },
  {
    group: 'Load and cost model',
    key: 'metricRunning',
    flag: 'metric-running',
    type: 'list',
    default: [...METRIC_NAMES.running],
    help: 'Metric names of the running requests, first found wins.',
  },
  {
    group: 'Load and cost model',
    key: 'metricKvUsage',
    flag: 'metric-kv-usage',
    type: 'list',
    default: [...METRIC_NAMES.kvUsage],
    help: 'Metric names of the KV-cache usage (0..1), first found wins.',
  },
  {
    group: 'Load and cost model',
    key: 'overloadWaiting',
    flag: 'overload-waiting',
    type: 'number',
    default: CACHE_AWARE.overloadWaiting,
    help: 'cache_aware cost: skip a worker with more scraped waiting requests than this while at least half the candidates have fewer (a saturated fleet is scored whole).',
  },
  {
    group: 'Load and cost model',
    key: 'overloadKvUsage',
    flag: 'overload-kv-usage',
    type: 'number',
    default: CACHE_AWARE.overloadKvUsage,
    help: 'cache_aware cost: skip a worker with scraped KV-cache usage above this while at least half the candidates are below (a saturated fleet is scored whole).',
  },
  {
    group: 'Load and cost model',
    key: 'charsPerToken',
    flag: 'chars-per-token',
    type: 'number',
    default: CACHE_AWARE.charsPerToken,
    help: 'cache_aware cost: characters per token for the prefix tree and prompts of unknown token count; the starting value when --chars-per-token-learn is on.',
  },
  {
    group: 'Load and cost model',
    key: 'charsPerTokenLearn',
    flag: 'chars-per-token-learn',
    type: 'bool',
    default: true,
    help: "cache_aware cost: learn characters per token per model from the usage.prompt_tokens of the responses the router watches (a stream's usage needs the client's stream_options.include_usage); --chars-per-token until 4 samples.",
  },
  {
    group: 'Load and cost model',
    key: 'cacheReports',
    flag: 'cache-reports',
    type: 'bool',
    default: true,
    help: "cache_aware: correct the prefix tree from the workers' usage.prompt_tokens_details.cached_tokens (vLLM --enable-prompt-tokens-details) on the responses the router watches: a prefix the tree believed a worker held that it had lost drops, with everything sent to that worker before its last use.",
  },
  {
    group: 'Load and cost model',
    key: 'cacheFillOwnShare',
    flag: 'cache-fill-own-share',
    type: 'bool',
    default: true,
    help: "cache_aware cost, without KV events: a worker's cache fill is the prefix tree's picture of it over this router's share of the worker's scraped load (traffic from other replicas or direct clients fills the rest).",
  },
  {
    group: 'Load and cost model',
    key: 'costBalanceRel',
    flag: 'cost-balance-rel',
    type: 'number',
    default: CACHE_AWARE.costBalanceRel,
    help: 'cache_aware cost: skip a worker whose requests ahead exceed this multiple of the mean (and the mean + --cost-balance-abs) while another does not.',
  },
  {
    group: 'Load and cost model',
    key: 'costBalanceAbs',
    flag: 'cost-balance-abs',
    type: 'number',
    default: CACHE_AWARE.costBalanceAbs,
    help: "cache_aware cost: the imbalance filter's margin over the mean, in requests.",
  },
  {
    group: 'Load and cost model',
    key: 'costIdleQueue',
    flag: 'cost-idle-queue',
    type: 'int',
    default: CACHE_AWARE.costIdleQueue,
    help: 'cache_aware cost: while some worker has nothing queued or running, skip a worker with at least this many prefills queued (a burst on one prefix seeds every worker); 0 = off.',
  },
  {
    group: 'Load and cost model',
    key: 'costDecodeWeight',
    flag: 'cost-decode-weight',
    type: 'number',
    default: CACHE_AWARE.costDecodeWeight,
    help: "cache_aware cost: fraction of a worker's decode step each request ahead adds to its score (the slowdown of a fuller batch).",
  },
  {
    group: 'Load and cost model',
    key: 'costRecomputeWeight',
    flag: 'cost-recompute-weight',
    type: 'number',
    default: CACHE_AWARE.costRecomputeWeight,
    help: 'cache_aware cost: extra weight, in prefill times, of the prompt tokens a worker would recompute, times how full its prefix cache is (the cached contexts they displace; nothing on a cache with room); 0 = only the time they take.',
  },
  {
    group: 'Load and cost model',
    key: 'prefixHomeMargin',
    flag: 'prefix-home-margin',
    type: 'number',
    default: CACHE_AWARE.prefixHomeMargin,
    help: "cache_aware cost: a prompt whose best-scored worker does not hold its opening (nobody holds it, or the holders are busy) goes to its rendezvous home, the same worker on every router replica, when the home's score is within this multiple of the prompt's prefill time of the best, scaled by the share of recent prompts whose opening was seen shortly before (unique prompts pay nothing); 0 = off. kv_aware: a prompt nobody holds goes to its home when the home has at most this many requests more than the least loaded.",
  },
  {
    group: 'Load and cost model',
    key: 'prefixHomeMarginAlone',
    flag: 'prefix-home-margin-alone',
    type: 'number',
    default: CACHE_AWARE.prefixHomeMarginAlone,
    help: "cache_aware cost: the prefix home's margin while the workers' own /metrics show no load this router did not send (no other replica or client to agree with); it rises to --prefix-home-margin as that foreign share of the candidates' load reaches 0.2. Never above --prefix-home-margin. kv_aware keeps the whole margin (its home also groups a lone router's concurrent requests before their KV events arrive).",
  },
  {
    group: 'Load and cost model',
    key: 'prefixHomeMarginExact',
    flag: 'prefix-home-margin-exact',
    type: 'number',
    default: CACHE_AWARE.prefixHomeMarginExact,
    help: "cache_aware cost: the most the prefix home's margin may be when every candidate's cache is known from its KV events (--kv-event-source): the other replicas see a seeded prefix in the events within milliseconds, so agreement needs only the home of prompts seeded at the same moment, and a wider margin queues new prompts behind busy homes. Never above --prefix-home-margin.",
  },
  {
    group: 'Load and cost model',
    key: 'prefixHomeKeyChars',
    flag: 'prefix-home-key-chars',
    type: 'int',
    default: CACHE_AWARE.prefixHomeKeyChars,
    help: "cache_aware cost and kv_aware: characters of the prompt's start that key its rendezvous home (the rule applies when the best-scored worker holds less of the prompt than that; shorter prompts never have a home).",
  },
  {
    group: 'Load and cost model',
    key: 'priorTtftFloorMs',
    flag: 'prior-ttft-floor-ms',
    type: 'number',
    default: PRIORS.ttftFloorMs,
    help: 'Starting estimate of the fixed part of time to first token (learned per worker from responses).',
  },
  {
    group: 'Load and cost model',
    key: 'priorPrefillMsPerToken',
    flag: 'prior-prefill-ms-per-token',
    type: 'number',
    default: PRIORS.prefillMsPerToken,
    help: 'Starting estimate of prefill time per uncached prompt token (learned per worker).',
  },
  {
    group: 'Load and cost model',
    key: 'priorWaitMsPerRequest',
    flag: 'prior-wait-ms-per-request',
    type: 'number',
    default: PRIORS.waitMsPerRequest,
    help: 'Starting estimate of the wait per request queued ahead by others (scraped queue minus own; learned per worker).',
  },
  {
    group: 'Load and cost model',
    key: 'priorInterChunkMs',
    flag: 'prior-inter-chunk-ms',
    type: 'number',
    default: PRIORS.interChunkMs,
    help: 'Starting estimate of the time between streamed chunks (learned per worker).',
  },
  {
    group: 'Load and cost model',
    key: 'responseBodySample',
    flag: 'response-body-sample',
    type: 'int',
    default: DEFAULT_RESPONSE_BODY_SAMPLE,
    help: "Watch the body of one streamed response in N per worker, for the timing estimates; Envoy skips the other bodies the router does not need (needs the ext_proc filter's allow_mode_override). 1 = watch every response body.",
  },
  {
    group: 'Load and cost model',
    key: 'responseBodyWatchMax',
    flag: 'response-body-watch-max',
    type: 'int',
    default: DEFAULT_RESPONSE_BODY_WATCH_MAX,
    help: 'Watch at most this many sampled response bodies at a time per worker (--response-body-sample); the rest of its streams are skipped.',
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
    help: 'auto: overlapped for Mooncake (the decode leg starts once the prefill request is sent), concurrent for MoRI-IO WRITE registrations, else sequential.',
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
    default: BREAKER.failureThreshold,
    help: "Consecutive request failures that open a worker's circuit breaker.",
  },
  {
    group: 'Health',
    key: 'cbSuccessThreshold',
    flag: 'cb-success-threshold',
    type: 'int',
    default: BREAKER.successThreshold,
    help: 'Successes in half-open state that close the breaker.',
  },
  {
    group: 'Health',
    key: 'cbCooldownMs',
    flag: 'cb-cooldown-ms',
    type: 'int',
    default: BREAKER.cooldownMs,
    help: 'Time an open breaker waits before half-open.',
  },
] as const satisfies readonly OptionSpec[];

/** One entry of OPTIONS, with its literal key, type and values. */
export type Option = (typeof OPTIONS)[number];

/** The TypeScript type of a setting, from its option entry. */
export type OptionValue<O extends OptionSpec> = O extends {
  readonly type: 'enum';
  readonly values: readonly (infer V)[];
}
  ? V
  : O extends { readonly type: 'int' | 'number' }
    ? number
    : O extends { readonly type: 'bool' }
      ? boolean
      : O extends { readonly type: 'list' }
        ? string[]
        : string;

/** Every setting, typed from OPTIONS (config.ts parses into it). */
export type Config = { [O in Option as O['key']]: OptionValue<O> };
