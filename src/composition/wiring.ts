/**
 * The wiring step: builds every component of a router from its Config, in dependency order, with NO
 * I/O (nothing listens, resolves, connects or arms a timer here; router.ts's lifecycle list starts
 * them). Each builder below constructs one component from the ones before it.
 *
 *   registry (static workers, admin API, ZMQ heartbeats)
 *     -> role pools (persistent Workers, policy membership; reconciled on every registry change)
 *       -> dispatcher (regular: one pool; pd: prefill + decode legs), wrapped with passive health
 *         -> ext_proc gRPC server (sessions) <- Envoy
 *   health (passive outcomes + active checks), metrics and logs observe all of it; the admin server
 *   exposes it through the admin backend.
 *   load signals: the metrics scraper fills the load board; the timing wrapper learns per-worker
 *   response timing; the models of the requests in flight per worker (LoRA affinity); cache_aware's
 *   cost mode reads them all (role pools get them as `signals`).
 *   served models: the models poller (each worker's /v1/models) and the scraper (its metrics label)
 *   fill the model catalog; the pools narrow each request's candidates to the workers serving its
 *   model, and LoRA affinity tells base names from adapters with it.
 *
 * Adding a component: a `build...` function here taking what it needs from `Components`, a field
 * in `Components`, and a step in router.ts's lifecycle list (if it starts or holds anything).
 */
import type { Config } from '../config-schema.js';
import { createAdminBackend } from '../admin/admin-backend.js';
import { AdminServer } from '../admin/admin-server.js';
import { WorkerSleep } from '../admin/worker-sleep.js';
import { LoraFanout } from '../routing/lora-fanout.js';
import { FleetControl } from '../routing/fleet-control.js';
import { PausePoller } from '../health/pause-poller.js';
import { parseCidrList, type CidrMatcher } from '../discovery/cidr.js';
import { ServiceRegistry } from '../discovery/service-registry.js';
import { ZmqDiscovery } from '../discovery/zmq-discovery.js';
import type { Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import { ExtProcServer } from '../extproc/server.js';
import { modelListAnswer, type ModelListOptions } from '../routing/model-list.js';
import { breakerStateCode } from '../health/circuit-breaker.js';
import { withHealth } from '../health/health-dispatcher.js';
import { prefillHealthOutcome } from '../request/request-end.js';
import { mediaTokensFor, type MediaTokensFor } from '../request/media-tokens.js';
import { HealthChecker } from '../health/health-checker.js';
import { WorkerHealth } from '../health/worker-health.js';
import type { Logger } from '../observability/logger.js';
import { DEPARTED_SERIES_MS, RouterMetrics, isCacheHit } from '../observability/metrics.js';
import { PdDispatcher } from '../pd/pd-dispatcher.js';
import { PrefillClient } from '../pd/prefill-client.js';
import { BootstrapDirectory } from '../pd/mooncake-bootstrap.js';
import { prefillFailureLog } from '../pd/prefill-failure-log.js';
import { createPolicy } from '../routing/create-policy.js';
import { createExactPrefix, type ExactPrefix } from '../kv-events/exact-prefix.js';
import type { PolicyName } from '../routing/policy.js';
import { PoolDispatcher } from '../routing/pool-dispatcher.js';
import type { RoutingObserver } from '../routing/selector.js';
import { resolveEndpoint, resolveHost } from '../workers/endpoint.js';
import { ROLES, type Role } from '../workers/role.js';
import { RolePools } from '../workers/role-pools.js';
import { WorkerPool, type ModelKnowledge } from '../workers/worker-pool.js';
import { selectionLoad, type Worker } from '../workers/worker.js';
import { DrainFlag } from './lifecycle.js';
import { WarmUp } from './warm-up.js';
import { LoadBoard } from '../load/load-board.js';
import { MetricsScraper } from '../load/metrics-scraper.js';
import { DEFAULT_METRIC_NAMES } from '../load/metrics-parse.js';
import { TimingEstimates } from '../load/timing-estimates.js';
import { prefillLegLearner, withTiming } from '../load/timing-dispatcher.js';
import { CharsPerToken } from '../load/chars-per-token.js';
import { PrefillBacklog } from '../load/prefill-backlog.js';
import { hasRoom, saturated } from '../load/saturation.js';
import { FlowControl } from '../routing/flow-control.js';
import { withAdmission } from '../routing/admission.js';
import { OBJECTIVE_HEADER, ObjectiveTable, parseObjectiveSpecs } from '../routing/objectives.js';
import { vllmPriority } from '../request/worker-priority.js';
import { ModelInFlight, withModelInFlight, withPrefillModel } from '../load/model-in-flight.js';
import { adapterState } from '../routing/lora-affinity.js';
import { ModelCatalog } from '../workers/served-models.js';
import { ModelsPoller } from '../discovery/models-poller.js';
import { describeCost, type WorkerSignals } from '../routing/cost-model.js';
import { tokensFromChars, type PrefixSource } from '../routing/prefix-source.js';
import { loadView, registerLoadMetrics } from '../observability/load-metrics.js';

export interface WiringDeps {
  readonly logger: Logger;
  /** Monotonic milliseconds for the registry, health and policies. */
  readonly clock: () => number;
}

export interface Components {
  readonly config: Readonly<Config>;
  readonly logger: Logger;
  readonly clock: () => number;
  /** The one drain flag (set by the lifecycle, read by readiness). */
  readonly drain: DrainFlag;
  /** Readiness waits for it: the picture of the fleet rebuilt from the workers. */
  readonly warmUp: WarmUp;
  readonly allow: CidrMatcher;
  /** The one host-name resolver (static workers, admin API, ZMQ discovery). */
  readonly resolveHost: (host: string) => Promise<string>;
  readonly registry: ServiceRegistry;
  readonly health: WorkerHealth;
  readonly metrics: RouterMetrics;
  readonly pools: RolePools;
  /** Exact prefix routing from KV events (kv_aware pools). */
  readonly exact: ExactPrefix;
  /** Latest scraped load sample per worker URL. */
  readonly board: LoadBoard;
  /** Learned per-worker response timing. */
  readonly timing: TimingEstimates;
  /** This router's prefills queued on each worker (cost mode). */
  readonly backlog: PrefillBacklog;
  /** The models of this router's requests in flight on each worker (LoRA affinity). */
  readonly models: ModelInFlight;
  /** Characters per token learned from the workers' usage (undefined with --no-chars-per-token-learn). */
  readonly charsPerToken: CharsPerToken | undefined;
  /** Present in pd mode. */
  readonly prefillClient: PrefillClient | undefined;
  /** Mooncake (pd mode): engine ids per prefill instance from its bootstrap server. */
  readonly bootstrap: BootstrapDirectory | undefined;
  readonly grpc: ExtProcServer;
  readonly checker: HealthChecker;
  readonly scraper: MetricsScraper;
  /** What each worker serves (its /v1/models list, else its metrics label). */
  readonly catalog: ModelCatalog;
  readonly modelsPoller: ModelsPoller;
  /** Reads every worker's `GET /is_paused` (health/pause-poller.ts). */
  readonly pausePoller: PausePoller;
  /** The request objectives' priorities (--objective; --inference-pool adds Kubernetes' in its lifecycle step). */
  readonly objectives: ObjectiveTable;
  /** --flow-control: the requests held while their pool is saturated. */
  readonly flow: FlowControl | undefined;
  /** Present when --discovery-zmq is set. */
  readonly discovery: ZmqDiscovery | undefined;
  /** Admin cordon, sleep and wake of a worker (admin/worker-sleep.ts). */
  readonly workerSleep: WorkerSleep;
  /** Runtime LoRA loads and unloads sent to every worker (routing/lora-fanout.ts). */
  readonly lora: LoraFanout;
  /** vLLM's engine control calls sent to every worker (routing/fleet-control.ts); absent with --fleet-control false. */
  readonly fleet: FleetControl | undefined;
  readonly admin: AdminServer;
}

export function wireRouter(config: Readonly<Config>, deps: WiringDeps): Components {
  const { logger, clock } = deps;
  const registry = new ServiceRegistry({ ttlMs: config.discoveryTtlMs, clock });
  const bootstrap = buildBootstrap(config, logger, () => metrics);
  // A worker put to sleep has an empty KV cache: its pool's policy forgets what it thought it held
  // (the pools are built below; health changes only ever concern their members).
  // Built below; a worker back in selection gets the LoRA adapters a load skipped it for, and one
  // back from being down (a restarted process at the same registration) every adapter loaded so far.
  const late: { lora?: LoraFanout } = {};
  const health = buildHealth(
    config,
    logger,
    bootstrap,
    (w) => pools.byRole[w.role].policy.cacheCleared?.(w),
    (w, wasDown) => (wasDown ? late.lora?.recovered(w.url) : late.lora?.sync()),
  );
  const catalog = new ModelCatalog();
  // The pools' hooks count into the metrics and the metrics read the pools at scrape time (only
  // then: never during construction), so the metrics are built first.
  const metrics = new RouterMetrics({
    workers: () => pools.members(),
    breakerState: (w) => breakerStateCode(health.view(w, clock()).breaker),
    treeChars: () => pools.treeSizes(),
    cacheReports: () => pools.cacheReports(),
    servedModels: (w) => catalog.of(w.url),
    bootstrapReady: bootstrap
      ? (w) => (w.role === 'prefill' ? (bootstrap.isReady(w) ? 1 : 0) : undefined)
      : undefined,
    ...(config.scrapeIntervalMs > 0 ? { poolSaturated: () => poolSaturation(pools, saturation) } : {}),
    objectives: () => objectives.entries(),
    ...(config.flowControl ? { flowHeld: () => held.flow?.held ?? 0 } : {}),
    processMetrics: true,
  });
  // --flow-control (built with the dispatchers below; the metrics read it at scrape time).
  const held: { flow?: FlowControl } = {};
  const board = new LoadBoard(config.loadStaleMs);
  const exact = createExactPrefix(
    config,
    metrics.registry,
    () => pools.members(),
    logger,
    clock,
    (w) => board.latest(w.key)?.figures?.blockSize,
  );
  const timing = buildTiming(config);
  const backlog = new PrefillBacklog();
  const models = new ModelInFlight();
  const charsPerToken = config.charsPerTokenLearn
    ? new CharsPerToken({ prior: config.charsPerToken })
    : undefined;
  const signals: WorkerSignals = {
    // The decodes on their way to a worker count on top of what runs there (workers/worker.ts
    // `pending`); the scraper's `localAtSample` counts only what runs there (load-board.ts).
    load: (w) => board.view(w.key, selectionLoad(w), clock()),
    // Scoring reads the role's fleet estimate (every worker's responses) times the worker's pace
    // (timing-estimates.ts): per-worker three-coefficient fits from a few dozen noisy samples differ
    // by chance, and a worker whose fit drifted high would lose its cache affinity for nothing; one
    // ratio with a dead band does not, and still tells a slower GPU. Per-worker fits stay on
    // /workers and /metrics.
    timing: config.costWorkerPace ? (w) => timing.scoringOf(w, clock()) : (w) => timing.fleetOf(w.role),
    backlog: (w) => backlog.of(w, clock()),
    foreignShare: (w) => board.foreignShare(w.key),
    adapter: (w, model) => {
      const f = board.fresh(w.key, clock())?.figures;
      if (f?.lora === undefined) return undefined;
      const served = catalog.of(w.url);
      return adapterState(model, {
        lora: f.lora,
        ...(served === undefined ? {} : { baseModels: served.base }),
        inFlight: models.of(w),
      });
    },
  };
  const limits = { waiting: config.saturationWaiting, kvUsage: config.saturationKvUsage };
  const saturation = (workers: readonly Worker[]): boolean => saturated(workers, signals, limits);
  const room = { hasRoom: (w: Worker): boolean => hasRoom(w, signals, limits), saturated: saturation };
  // The exact prefix source (KV events, when configured) ahead of each cache_aware policy's radix tree.
  const prefixSources: PrefixSource[] = exact.source !== undefined ? [exact.source] : [];
  // Keys of the workers that left a pool, and when: the request path's per-worker counters of a key
  // no pool holds any more leave /metrics DEPARTED_SERIES_MS later (pod churn: new URLs), not at
  // once: a worker that dies is when its failovers count, and Prometheus must get to scrape them.
  const departedKeys = new Map<string, number>();
  // `role url` -> the registration generation of its last Worker, until a registry change finds no
  // member there (the catalog forgets the URL then too).
  const lifetimes = new Map<string, number>();
  // `role url` of the registrations restarted() replaces right now: a new process (the scraper saw it).
  const restarting = new Set<string>();
  const pools = buildPools(config, registry, metrics, health, exact, bootstrap, {
    clock,
    newProcess: (w) => restarting.has(`${w.role} ${w.url}`),
    signals,
    prefixSources,
    timing,
    ...(charsPerToken ? { charsPerToken: (model: string) => charsPerToken.of(model) } : {}),
    // What each worker serves: its /v1/models list, else its metrics label (served-models.ts).
    models: {
      get version() {
        return catalog.version;
      },
      of: (w) => catalog.of(w.url),
    },
    // A new process at the URL (a new generation) has its own models and load, not the old one's:
    // replaced in place, or seen after the old Worker left first (an expiry read before the janitor's
    // sweep) or under other keys (its data-parallel size changed).
    joined: (w) => {
      const id = `${w.role} ${w.url}`;
      const before = lifetimes.get(id);
      if (before !== undefined && before !== w.generation) {
        catalog.forget(w.url);
        board.forget(w.key);
      }
      lifetimes.set(id, w.generation);
    },
    departed: (w) => departedKeys.set(w.key, clock()),
    // The worker's KV-cache capacity from its latest scraped page (any age: it does not change):
    // vLLM's cache config, else SGLang's sglang:max_total_num_tokens.
    capacityTokens: (w) => {
      const f = board.latest(w.key)?.figures;
      return f?.numGpuBlocks !== undefined && f.blockSize !== undefined
        ? f.numGpuBlocks * f.blockSize
        : f?.capacityTokens;
    },
  });
  registerLoadMetrics({
    registry: metrics.registry,
    workers: () => pools.members(),
    board,
    timing,
    clock,
    ...(charsPerToken ? { charsPerToken } : {}),
  });
  // Pools follow the registry, so a scrape reads current members without reconciling; so do the
  // KV-event subscriptions (a re-registered worker starts with an empty exact index).
  registry.onChange(() => {
    pools.reconcile();
    if (departedKeys.size > 0) {
      const live = new Set(Array.from(pools.members(), (w) => w.key));
      const now = clock();
      for (const [key, at] of departedKeys) {
        if (live.has(key))
          departedKeys.delete(key); // back (a new process at the URL): its counts go on
        else if (now - at >= DEPARTED_SERIES_MS) {
          metrics.forgetWorker(key);
          departedKeys.delete(key);
        }
      }
    }
    if (lifetimes.size > 0) {
      const held = new Set(Array.from(pools.members(), (w) => `${w.role} ${w.url}`));
      for (const id of lifetimes.keys()) if (!held.has(id)) lifetimes.delete(id);
    }
    exact.sync();
  });

  const drain = new DrainFlag();
  const warmUp = buildWarmUp(config, logger, clock, () => grpc.setReady(!drain.draining));

  const base = {
    config,
    logger,
    clock,
    drain,
    warmUp,
    allow: parseCidrList(config.discoveryAllow),
    resolveHost,
    registry,
    health,
    metrics,
    pools,
    exact,
    bootstrap,
    board,
    timing,
    backlog,
    models,
    charsPerToken,
    catalog,
  };
  const prefillClient = config.mode === 'pd' ? new PrefillClient() : undefined;
  const dispatcher = buildDispatcher({ ...base, prefillClient });
  const objectives = new ObjectiveTable(parseObjectiveSpecs(config.objective), config.inferencePool !== '');
  const admitted = admission(
    base,
    objectives,
    room,
    withHealth(
      withTiming(
        // Only LoRA affinity reads the models in flight: with it off (--metric-lora ''), no wrapper.
        config.metricLora === '' ? dispatcher : withModelInFlight(dispatcher, models),
        timing,
        clock,
        backlog,
        config.responseBodySample,
        config.responseBodyWatchMax,
        base.charsPerToken,
      ),
      health,
      clock,
    ),
    dispatcher instanceof PdDispatcher ? (req) => dispatcher.needsPrefill(req) : undefined,
  );
  if (admitted.flow) held.flow = admitted.flow;
  // Runtime LoRA loads go to every worker; their model lists are read again at once (the poller is
  // built below; a load only comes in once the router serves).
  const lora = new LoraFanout({
    members: () => pools.workers(),
    ...(config.workerApiKey !== '' ? { apiKey: config.workerApiKey } : {}),
    timeoutMs: Math.max(1, config.loraFanoutTimeoutMs),
    onAnswered: (urls) => modelsPoller.refresh(urls),
    onReplayed: (url, name, ok, message) => {
      metrics.loraReplays.inc({ outcome: ok ? 'loaded' : 'failed' });
      if (ok) logger.info({ worker: url, lora: name }, 'LoRA adapter loaded on a worker that joined');
      else
        logger.warn({ worker: url, lora: name, message }, 'LoRA adapter not loaded on a worker that joined');
    },
  });
  // A worker that joins (or restarts) gets the adapters loaded through the router so far.
  registry.onChange(() => lora.sync());
  lora.sync();
  late.lora = lora;
  // vLLM's engine control calls (an RL trainer's pause, cache reset, resume) go to every worker.
  const fleet = config.fleetControl
    ? new FleetControl({
        members: () => pools.workers(),
        state: {
          recordPause: (w, paused, now) => health.recordPause(w, paused, now),
          recordSleep: (w, asleep, now) => health.recordSleep(w, asleep, now),
          sleepRefused: (w, now) => health.sleepRefused(w, now),
          cacheCleared: (w) => pools.byRole[w.role].policy.cacheCleared?.(w),
        },
        clock,
        ...(config.workerApiKey !== '' ? { apiKey: config.workerApiKey } : {}),
        timeoutMs: Math.max(1, config.fleetControlTimeoutMs),
        // A worker whose checks fail (a static worker that died) does not fail the fleet's answer.
        down: (w) => health.view(w, clock()).active === 'unhealthy',
        onAnswered: (path, ok, of) => {
          metrics.fleetControlCalls.inc({
            path,
            outcome: ok === of ? 'ok' : ok === 0 ? 'failed' : 'partial',
          });
          logger.info({ path, workers: of, took: ok }, 'fleet control call answered');
        },
      })
    : undefined;
  const grpc = buildGrpcServer(
    base,
    admitted.dispatcher,
    objectives,
    lora,
    fleet,
    dispatcher instanceof PdDispatcher ? dispatcher : undefined,
  );
  const pausePoller = buildPausePoller(base, fleet);
  const scraper = buildScraper(base, fleet, restarting);
  const modelsPoller = buildModelsPoller(base);
  // A worker that joins (or re-registers) is asked what it serves at once, not at the next round;
  // one that left is forgotten (the pools reconciled in the listener above).
  registry.onChange(() => {
    catalog.retain(new Set(Array.from(pools.workers(), (w) => w.url)));
    modelsPoller.pollNew();
  });
  addWarmUpConditions(warmUp, config, exact, scraper, modelsPoller);
  // Requests on their way to a worker without its load: P/D decodes chosen before their prefill
  // ends, and requests that name it as a fallback endpoint.
  const workerSleep = buildWorkerSleep(
    base,
    dispatcher instanceof PdDispatcher
      ? (w) => dispatcher.pendingDecodes(w)
      : dispatcher instanceof PoolDispatcher
        ? (w) => dispatcher.pendingFallbacks(w)
        : undefined,
  );
  return {
    ...base,
    prefillClient,
    grpc,
    objectives,
    flow: held.flow,
    checker: buildHealthChecker(base),
    scraper,
    modelsPoller,
    pausePoller,
    discovery: buildDiscovery(base),
    workerSleep,
    lora,
    fleet,
    admin: buildAdmin(base, workerSleep),
  };
}

type Base = Pick<
  Components,
  | 'config'
  | 'logger'
  | 'clock'
  | 'drain'
  | 'warmUp'
  | 'allow'
  | 'resolveHost'
  | 'registry'
  | 'health'
  | 'metrics'
  | 'pools'
  | 'exact'
  | 'bootstrap'
  | 'board'
  | 'timing'
  | 'backlog'
  | 'models'
  | 'charsPerToken'
  | 'catalog'
>;

/** Mooncake in pd mode: the bootstrap directory (pd/mooncake-bootstrap.ts); no I/O until a worker joins. */
function buildBootstrap(
  config: Readonly<Config>,
  logger: Logger,
  metrics: () => RouterMetrics,
): BootstrapDirectory | undefined {
  if (config.mode !== 'pd' || config.kvConnector !== 'mooncake') return undefined;
  return new BootstrapDirectory({
    onChange: (w, view) =>
      logger.info(
        { worker: w.id, state: view.state, dpSize: view.dpSize, error: view.lastError },
        'mooncake bootstrap changed',
      ),
    onQuery: (_w, outcome) => metrics().pdBootstrapQueries.inc({ outcome }),
  });
}

function buildHealth(
  config: Readonly<Config>,
  logger: Logger,
  bootstrap: BootstrapDirectory | undefined,
  cacheCleared: (w: Worker) => void,
  /** `wasDown`: its health checks had failed or its breaker was open (it may be a restarted process). */
  selectableAgain: (w: Worker, wasDown: boolean) => void,
): WorkerHealth {
  return new WorkerHealth({
    checkFailureThreshold: config.healthFailureThreshold,
    checkSuccessThreshold: config.healthSuccessThreshold,
    breaker: {
      failureThreshold: config.cbFailureThreshold,
      successThreshold: config.cbSuccessThreshold,
      cooldownMs: config.cbCooldownMs,
    },
    onChange: (w, view, previous) => {
      logger.info({ worker: w.id, ...view, previous }, 'worker health changed');
      // vLLM's sleep empties the prefix cache (and publishes AllBlocksCleared for the exact index).
      if (view.asleep && !previous.asleep) cacheCleared(w);
      if (view.selectable && !previous.selectable) {
        selectableAgain(w, previous.active === 'unhealthy' || previous.breaker === 'open');
      }
      // A prefill instance going down or coming back (active health, breaker opening or leaving open)
      // may be a restarted process with new engine ids: asked again before it takes Mooncake traffic.
      const open = (v: typeof view): boolean => v.breaker === 'open';
      if (
        bootstrap &&
        w.role === 'prefill' &&
        (view.active !== previous.active || open(view) !== open(previous))
      ) {
        bootstrap.invalidate(w);
      }
    },
  });
}

function policyFor(config: Readonly<Config>, role: Role): PolicyName {
  return role === 'prefill' ? config.prefillPolicy : role === 'decode' ? config.decodePolicy : config.policy;
}

function buildPools(
  config: Readonly<Config>,
  registry: ServiceRegistry,
  metrics: RouterMetrics,
  health: WorkerHealth,
  exact: ExactPrefix,
  bootstrap: BootstrapDirectory | undefined,
  load: {
    clock: () => number;
    /** Whether `w` replaces its predecessor because another process runs there (not carried over). */
    newProcess: (w: Worker) => boolean;
    signals: WorkerSignals;
    prefixSources: readonly PrefixSource[];
    timing: TimingEstimates;
    capacityTokens: (w: Worker) => number | undefined;
    charsPerToken?: (model: string) => number;
    models: ModelKnowledge;
    /** A worker left its pool (another pool may still hold its key: one URL in two roles). */
    departed: (w: Worker) => void;
    /** A Worker joined its pool (a new URL, rank or generation). */
    joined: (w: Worker) => void;
  },
): RolePools {
  return new RolePools((role) => {
    const policy = createPolicy(policyFor(config, role), {
      cacheAware: {
        cacheThreshold: config.cacheThreshold,
        balanceAbsThreshold: config.balanceAbsThreshold,
        balanceRelThreshold: config.balanceRelThreshold,
        evictionIntervalMs: config.evictionIntervalMs,
        maxTreeSize: config.maxTreeSize,
        mode: config.cacheAwareMode,
        overloadWaiting: config.overloadWaiting,
        overloadKvUsage: config.overloadKvUsage,
        charsPerToken: config.charsPerToken,
        costBalanceRel: config.costBalanceRel,
        costBalanceAbs: config.costBalanceAbs,
        costIdleQueue: config.costIdleQueue,
        costDecodeWeight: config.costDecodeWeight,
        costRecomputeWeight: config.costRecomputeWeight,
        prefixHomeMargin: config.prefixHomeMargin,
        prefixHomeMarginAlone: config.prefixHomeMarginAlone,
        prefixHomeMarginExact: config.prefixHomeMarginExact,
        prefixHomeKeyChars: config.prefixHomeKeyChars,
        loraLoadMs: config.loraLoadMs,
        cacheReports: config.cacheReports,
        cacheFillOwnShare: config.cacheFillOwnShare,
      },
      ...(exact.source !== undefined ? { exactPrefix: exact.source } : {}),
      onExactFallback: exact.fallback,
      cacheAwareDeps: {
        role,
        signals: load.signals,
        prefixSources: load.prefixSources,
        capacityTokens: load.capacityTokens,
        ...(load.charsPerToken ? { charsPerToken: load.charsPerToken } : {}),
      },
    });
    // A Worker replaced in place (a new registration lifetime: changed metadata, a re-registration
    // after a lapsed heartbeat) whose vLLM was asleep: the new lifetime may well be the same process,
    // still asleep, and a request reaching a sleeping engine crashes it on most vLLM releases. Its
    // successor starts asleep (and cordoned, if it was) until a page or a wake_up says otherwise;
    // not one the scraper saw start later (`newProcess`: a restarted vLLM is awake).
    let carried: { key: string; cordoned: boolean } | undefined;
    return new WorkerPool(role, policy, registry, {
      onAdded: (w) => {
        metrics.poolChanges.inc({ role: w.role, change: 'added' });
        load.joined(w);
        if (w.role === 'prefill') bootstrap?.track(w);
        if (carried?.key === w.key && !load.newProcess(w)) {
          const now = load.clock();
          health.recordSleep(w, true, now);
          if (carried.cordoned) health.cordon(w, true, now);
        }
        carried = undefined;
      },
      onRemoved: (w, reason) => {
        metrics.poolChanges.inc({ role: w.role, change: reason });
        const view = health.view(w, load.clock());
        carried = reason === 'replaced' && view.asleep ? { key: w.key, cordoned: view.cordoned } : undefined;
        health.forget(w);
        exact.source?.forget(w);
        bootstrap?.untrack(w);
        load.timing.forget(w);
        if (reason === 'departed') load.departed(w);
      },
      models: load.models,
      tokensOf: (model, chars) => Math.ceil(chars / (load.charsPerToken?.(model) ?? config.charsPerToken)),
      onContextFit: (role, fitted) =>
        metrics.contextFits.inc({ role, outcome: fitted ? 'fitted' : 'none_long_enough' }),
      dataParallelSize: config.intraNodeDataParallelSize,
    });
  });
}

function routingObserver({ health, metrics, clock, logger }: Base): RoutingObserver {
  return {
    decided: (pool, d) => {
      health.routed(d.worker, clock()); // half-open: takes the probe slot in the selection step
      if (d.cost !== undefined && logger.isLevelEnabled('debug')) {
        logger.debug(
          { role: pool.role, worker: d.worker.key, branch: d.branch, cost: describeCost(d.cost) },
          'cost decision',
        );
      }
      metrics.decisions.inc({ policy: pool.policy.name, role: pool.role, branch: d.branch });
      if (d.matchRate !== undefined) {
        metrics.matchRate.observe({ role: pool.role }, d.matchRate);
        (isCacheHit(d.branch) ? metrics.cacheHits : metrics.cacheMisses).inc({ role: pool.role });
      }
    },
  };
}

function buildDispatcher(c: Base & { prefillClient: PrefillClient | undefined }): Dispatcher {
  const { config, pools, health, metrics, clock, logger } = c;
  const observer = routingObserver(c);
  const passthrough = new PoolDispatcher({
    pool: config.mode === 'pd' ? pools.byRole.decode : pools.byRole.regular,
    observer,
    clock,
    decisionHeader: config.decisionHeader,
    fallbackEndpoints: config.fallbackEndpoints,
  });
  if (c.prefillClient === undefined) return passthrough;
  return new PdDispatcher({
    prefillPool: pools.byRole.prefill,
    decodePool: pools.byRole.decode,
    passthrough,
    observer,
    client: c.prefillClient,
    clock,
    connector: config.kvConnector,
    dispatch: config.pdDispatch,
    prefillTimeoutMs: config.prefillTimeoutMs,
    prefillRetries: config.prefillRetries,
    decisionHeader: config.decisionHeader,
    fallbackSlots: config.fallbackEndpoints,
    bootstrap: c.bootstrap,
    ...(config.pdLocalPrefillTokens > 0
      ? {
          localPrefill: {
            maxTokens: config.pdLocalPrefillTokens,
            tokensOf: (chars: number, model: string) =>
              tokensFromChars(chars, c.charsPerToken?.of(model) ?? config.charsPerToken),
          },
        }
      : {}),
    pd: {
      prefillStarted:
        config.metricLora === ''
          ? prefillLegLearner(c.timing, c.backlog, clock)
          : withPrefillModel(prefillLegLearner(c.timing, c.backlog, clock), c.models),
      prefillEnded: (w, outcome, ms, status) => {
        health.recordOutcome(w, prefillHealthOutcome(outcome, status), clock());
        metrics.pdPrefillRequests.inc({ worker: w.key });
        if (ms !== undefined) metrics.pdPrefillDuration.observe({ outcome }, ms / 1000);
      },
      prefillFailed: prefillFailureLog(logger, clock),
      decodeRouted: (w) => metrics.pdDecodeRequests.inc({ worker: w.key }),
      localPrefill: (reason) => metrics.pdLocalPrefills.inc({ reason }),
      // A decode worker chosen for a request whose prefill failed never sees it: a neutral outcome
      // frees a half-open probe slot it may hold.
      decodeAbandoned: (w) => health.recordOutcome(w, 'cancelled', clock()),
      error: (type) => metrics.pdErrors.inc({ error_type: type }),
    },
  });
}

/**
 * Sheds sheddable requests (--objective with a negative priority) while their workers are saturated
 * (routing/admission.ts), or, with --flow-control, holds every request while its pool is saturated
 * (routing/flow-control.ts). Saturation is read from scraped samples: with scraping off, neither.
 */
function admission(
  { config, pools, metrics, logger, clock }: Base,
  objectives: ObjectiveTable,
  room: { hasRoom: (w: Worker) => boolean; saturated: (workers: readonly Worker[]) => boolean },
  inner: Dispatcher,
  /** P/D: whether a request gets a prefill leg (PdDispatcher.needsPrefill), so only then is that pool read. */
  needsPrefill?: (req: RouteRequest) => boolean,
): { dispatcher: Dispatcher; flow?: FlowControl } {
  if (config.scrapeIntervalMs === 0) return { dispatcher: inner };
  const needs = {
    pool: config.mode === 'pd' ? pools.byRole.decode : pools.byRole.regular,
    ...(config.mode === 'pd' ? { prefillPool: pools.byRole.prefill } : {}),
    ...(needsPrefill !== undefined ? { needsPrefill } : {}),
  };
  if (config.flowControl) {
    const flow = new FlowControl(inner, {
      objectives,
      ...needs,
      hasRoom: room.hasRoom,
      clock,
      ttlMs: config.flowQueueTtlMs,
      maxQueued: config.flowQueueMax,
      maxBytes: config.flowQueueMaxBytes,
      pollMs: config.flowPollMs,
      observer: {
        released: (waitedMs) => metrics.flowWait.observe(waitedMs / 1000),
        // The header is the client's: only an objective the table knows is a label value (bounded).
        refused: (reason, objective) =>
          metrics.flowRefused.inc({
            reason,
            objective: objectives.entries().has(objective) ? objective : '',
          }),
      },
    });
    return { dispatcher: flow, flow };
  }
  const dispatcher = withAdmission(inner, {
    objectives,
    ...needs,
    saturated: room.saturated,
    shed: (objective, priority, role) => {
      metrics.shed.inc({ objective, role });
      if (logger.isLevelEnabled('debug')) logger.debug({ objective, priority, role }, 'request shed');
    },
  });
  return { dispatcher };
}

/** Per pool with workers: whether none of its selectable workers has room (vllm_router_pool_saturated). */
function poolSaturation(
  pools: RolePools,
  saturation: (workers: readonly Worker[]) => boolean,
): Array<[Role, boolean]> {
  const out: Array<[Role, boolean]> = [];
  for (const role of ROLES) {
    const pool = pools.byRole[role];
    if (pool.size > 0) out.push([role, saturation(pool.candidates())]);
  }
  return out;
}

/**
 * The media weights of a request's model (request/media-tokens.ts), in routing-text characters at the
 * model's characters per token: learned when --chars-per-token-learn, else --chars-per-token.
 */
function buildMediaTokens(config: Readonly<Config>, learned: CharsPerToken | undefined): MediaTokensFor {
  const weights = mediaTokensFor(config.mediaTokens, {
    patchPixels: config.imageTokenPatch,
    minTokens: config.imageTokensMin,
    maxTokens: config.imageTokensMax,
    unknownTokens: config.mediaTokensUnknown,
  });
  return (model) => ({ ...weights(model), charsPerToken: learned?.of(model) ?? config.charsPerToken });
}

function buildGrpcServer(
  { config, logger, metrics, pools, catalog, charsPerToken }: Base,
  dispatcher: Dispatcher,
  objectives: ObjectiveTable,
  lora: LoraFanout,
  fleet: FleetControl | undefined,
  pd: PdDispatcher | undefined,
): ExtProcServer {
  const models: ModelListOptions = {
    memberUrls: () =>
      Array.from(config.mode === 'pd' ? pools.byRole.decode.workers : pools.workers(), (w) => w.url),
    cardsOf: (urls) => catalog.cardsOf(urls),
    ...(pd !== undefined ? { servable: (model: string) => pd.servable(model) } : {}),
    ...(config.workerApiKey !== '' ? { apiKey: config.workerApiKey } : {}),
  };
  return new ExtProcServer({
    host: config.host,
    port: config.grpcPort,
    logger,
    dispatcher,
    answer: (method, path, headers) => modelListAnswer(models, method, path, headers),
    answerBody: (method, path, headers, body) =>
      fleet?.answer(method, path, headers, body) ?? lora.answer(method, path, headers, body),
    ...(config.forwardPriority
      ? { workerPriority: (headers) => vllmPriority(objectives.priority(headers[OBJECTIVE_HEADER])) }
      : {}),
    maxBodyBytes: config.maxBodyBytes,
    mediaTokens: buildMediaTokens(config, charsPerToken),
    toolsInPrompt: config.toolsInPrompt,
    onMedia: (m) => {
      if (m.sized > 0) metrics.mediaParts.inc({ size: 'read' }, m.sized);
      if (m.unsized > 0) metrics.mediaParts.inc({ size: 'unknown' }, m.unsized);
      if (m.unkeyed > 0) metrics.mediaParts.inc({ size: 'unkeyed' }, m.unkeyed);
      if (m.tokens > 0) metrics.mediaTokens.inc(m.tokens);
    },
    onStreamsChanged: (n) => metrics.streamsActive.set(n),
    onConnectionClose: (reason) => metrics.grpcConnectionCloses.inc({ reason }),
    onFailover: (routed, _served, adopted) =>
      metrics.failovers.inc({ worker: routed.key, adopted: adopted ? 'true' : 'false' }),
    onEnd: (s) => {
      metrics.requests.inc({ route: s.route, outcome: s.outcome });
      metrics.requestDuration.observe({ route: s.route, outcome: s.outcome }, s.durationMs / 1000);
    },
  });
}

function buildTiming(config: Readonly<Config>): TimingEstimates {
  return new TimingEstimates(
    {
      ttftFloorMs: config.priorTtftFloorMs,
      prefillMsPerToken: config.priorPrefillMsPerToken,
      waitMsPerRequest: config.priorWaitMsPerRequest,
      interChunkMs: config.priorInterChunkMs,
    },
    { paceForgetMs: config.costWorkerPaceForgetMs },
  );
}

/** Readiness waits for the warm-up; `ready` runs once it is over (gRPC health SERVING unless draining). */
function buildWarmUp(
  config: Readonly<Config>,
  logger: Logger,
  clock: () => number,
  ready: () => void,
): WarmUp {
  return new WarmUp({
    timeoutMs: config.warmupTimeoutMs,
    clock,
    onDone: ({ timedOut }) => {
      if (timedOut.length > 0) logger.warn({ pending: timedOut }, 'warm-up timed out: ready anyway');
      else logger.info('warm-up done: ready');
      ready();
    },
  });
}

/** What the picture of the fleet is rebuilt from (Kubernetes adds its own in its lifecycle step). */
function addWarmUpConditions(
  warmUp: WarmUp,
  config: Readonly<Config>,
  exact: ExactPrefix,
  scraper: MetricsScraper,
  modelsPoller: ModelsPoller,
): void {
  const subscriptions = exact.subscriptions;
  if (subscriptions !== undefined) {
    warmUp.add({ name: 'kv events synced', ready: () => subscriptions.synced() });
  }
  if (config.scrapeIntervalMs > 0) {
    warmUp.add({ name: 'worker metrics scraped', ready: () => scraper.seenAll() });
  }
  if (config.modelsIntervalMs > 0) {
    warmUp.add({ name: 'worker models listed', ready: () => modelsPoller.seenAll() });
  }
}

function buildHealthChecker({ config, logger, pools, health, clock }: Base): HealthChecker {
  return new HealthChecker({
    workers: () => pools.workers(),
    health,
    intervalMs: config.healthCheckIntervalMs,
    timeoutMs: config.healthCheckTimeoutMs,
    clock,
    onCheckFailed: (w, reason) => logger.debug({ worker: w.id, reason }, 'health check failed'),
    onError: (err) => logger.error({ err }, 'health check round failed'),
  });
}

function buildScraper(
  { config, logger, pools, health, board, backlog, clock, catalog, registry, metrics }: Base,
  fleet: FleetControl | undefined,
  /** Filled while restarted() replaces a registration (the pools' `newProcess`). */
  restarting: Set<string>,
): MetricsScraper {
  return new MetricsScraper({
    workers: () => pools.workers(),
    board,
    queuedOf: (w) => backlog.of(w, clock()).requests,
    health,
    // A page read while a sleep or wake_up sent through the router took effect is older than its record.
    ...(fleet !== undefined
      ? { sleepSuperseded: (url: string, takenAtMs: number) => fleet.supersedes(url, takenAtMs, 'sleep') }
      : {}),
    intervalMs: config.scrapeIntervalMs,
    timeoutMs: Math.max(1, config.scrapeTimeoutMs),
    concurrency: Math.max(1, config.scrapeConcurrency),
    names: {
      ...DEFAULT_METRIC_NAMES,
      waiting: config.metricWaiting,
      running: config.metricRunning,
      kvUsage: config.metricKvUsage,
      lora: config.metricLora,
      sleepState: config.metricSleepState,
    },
    clock,
    onScrapeFailed: (url, reason) => logger.debug({ worker: url, reason }, 'metrics scrape failed'),
    // The metrics' model_name label: what the worker serves until (or unless) its /v1/models says.
    onScraped: (url, figures) => catalog.recordLabel(url, figures.modelName),
    // Another process at the URL under the same registration (a static worker restarted between two
    // health checks): a new registration lifetime, so it gets what a new process gets (fresh Workers:
    // load, health, timing; its pool's policy forgets the old one's prefixes; the runtime LoRA
    // adapters are loaded on it, its models read again, Mooncake engine ids asked again).
    onRestarted: (url, workers) => {
      const seen = new Set<string>();
      for (const w of workers) {
        if (seen.has(w.role)) continue; // the ranks of one data-parallel server: one registration
        seen.add(w.role);
        // The lifetime there now: a newer one than the scrape was sent for began while it ran (a
        // re-registration), and may have carried the old process's sleep over (buildPools).
        const current = registry.get(w.role, w.url);
        if (current === undefined) continue;
        const id = `${w.role} ${w.url}`;
        restarting.add(id);
        let entry;
        try {
          entry = registry.restarted(w.role, w.url, current.generation);
        } finally {
          restarting.delete(id);
        }
        if (entry === undefined) continue;
        metrics.discoveryEvents.inc({ role: w.role, event: 'restarted' });
        logger.info(
          { role: w.role, worker: url, generation: entry.generation, previous: current.generation },
          'worker process restarted at its registration (a later process start time): a new lifetime',
        );
      }
    },
  });
}

/**
 * Pauses this router did not forward, from the workers' own `/is_paused`; a fleet control call to
 * the worker that ended after the read was sent (or is still in flight) is the newer record.
 */
function buildPausePoller(
  { config, pools, health, clock }: Base,
  fleet: FleetControl | undefined,
): PausePoller {
  return new PausePoller({
    workers: () => pools.workers(),
    intervalMs: config.pausePollMs,
    timeoutMs: Math.max(1, config.scrapeTimeoutMs),
    ...(config.workerApiKey !== '' ? { apiKey: config.workerApiKey } : {}),
    clock,
    onPaused: (url, paused, readAt) => {
      if (fleet?.supersedes(url, readAt) === true) return;
      const now = clock();
      for (const w of pools.workers()) if (w.url === url) health.recordPause(w, paused, now);
    },
  });
}

function buildModelsPoller({ config, logger, pools, metrics, catalog }: Base): ModelsPoller {
  return new ModelsPoller({
    workers: () => pools.workers(),
    catalog,
    intervalMs: config.modelsIntervalMs,
    timeoutMs: Math.max(1, config.scrapeTimeoutMs),
    ...(config.workerApiKey !== '' ? { apiKey: config.workerApiKey } : {}),
    onPolled: (url, outcome, reason) => {
      metrics.modelsPolls.inc({ outcome });
      if (reason !== undefined) logger.debug({ worker: url, outcome, reason }, 'models list not read');
    },
  });
}

function buildDiscovery(c: Base): ZmqDiscovery | undefined {
  const { config, registry, allow, logger, metrics } = c;
  if (!config.discoveryZmq) return undefined;
  return new ZmqDiscovery({
    bind: config.discoveryZmq,
    registry,
    allow,
    resolve: c.resolveHost,
    logger,
    hooks: {
      onRegister: (e, event) => metrics.discoveryEvents.inc({ role: e.role, event }),
      onReject: (reason) => metrics.discoveryRejected.inc({ reason }),
      // libzmq drops oversized frames by disconnecting the sender; vLLM exits look the same.
      onPeerDisconnect: () => metrics.discoveryEvents.inc({ role: 'unknown', event: 'peer_disconnected' }),
    },
  });
}

function buildWorkerSleep(
  { config, pools, health, board, clock }: Base,
  pending: ((w: Worker) => number) | undefined,
): WorkerSleep {
  return new WorkerSleep({
    workersAt: (url) => pools.workers().filter((w) => w.url === url),
    health,
    clock,
    ...(pending ? { pending } : {}),
    // The drain also waits for a page with nothing waiting or running, when pages are read.
    // A data-parallel server's page is read per rank (Worker.key): the oldest rank's sample, all busy.
    scraped: (url) => {
      if (config.scrapeIntervalMs === 0) return undefined;
      const keys = new Set(pools.workers().flatMap((w) => (w.url === url ? [w.key] : [])));
      if (keys.size === 0) keys.add(url);
      let takenAtMs = Infinity;
      let busy = 0;
      for (const key of keys) {
        const s = board.latest(key);
        const f = s?.figures;
        if (s === undefined || (f?.waiting === undefined && f?.running === undefined)) return undefined;
        takenAtMs = Math.min(takenAtMs, s.takenAtMs);
        busy += (f.waiting ?? 0) + (f.running ?? 0);
      }
      return { takenAtMs, busy };
    },
  });
}

function buildAdmin(c: Base, workerSleep: WorkerSleep): AdminServer {
  const backend = createAdminBackend({
    mode: c.config.mode,
    registry: c.registry,
    pools: c.pools,
    health: c.health,
    metrics: c.metrics,
    allow: c.allow,
    resolve: (host, port) => resolveEndpoint(host, port, c.resolveHost),
    clock: c.clock,
    drain: c.drain,
    warmUp: c.warmUp,
    bootstrap: c.bootstrap,
    workerSleep,
    workerExtra: (w, now) => {
      const served = c.catalog.of(w.url);
      return {
        ...loadView(w, c.board, c.timing, now),
        servedModels:
          served === undefined
            ? null
            : {
                base: served.base,
                adapters: Object.fromEntries(served.adapters),
                ...(served.maxModelLen ? { maxModelLen: Object.fromEntries(served.maxModelLen) } : {}),
              },
      };
    },
  });
  return new AdminServer(backend, {
    host: c.config.host,
    port: c.config.adminPort,
    token: c.config.adminToken,
    logger: c.logger,
  });
}
