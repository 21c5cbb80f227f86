/**
 * Composition root: config -> components -> start; close() shuts them down in order.
 *
 *   registry (static workers, admin API, ZMQ heartbeats)
 *     -> role pools (persistent Workers, policy membership)
 *       -> dispatcher (regular: one pool; pd: prefill + decode legs)
 *         -> ext_proc sessions (gRPC) <- Envoy
 *   metrics/logs observe all of it; the admin server exposes it.
 */
import { parseWorkerUrl, type Config } from './config.js';
import { AdminServer, AdminInputError, type AdminBackend, type WorkerView } from './admin/admin-server.js';
import { ExtProcServer } from './extproc/server.js';
import type { Dispatcher } from './extproc/dispatch.js';
import { ServiceRegistry, type RegistryEntry } from './discovery/service-registry.js';
import { RegistryJanitor } from './discovery/registry-janitor.js';
import { ZmqDiscovery } from './discovery/zmq-discovery.js';
import { parseCidrList } from './discovery/cidr.js';
import { RouterMetrics } from './observability/metrics.js';
import { createLogger, type Logger } from './observability/logger.js';
import { createPolicy } from './routing/create-policy.js';
import { PoolDispatcher } from './routing/pool-dispatcher.js';
import { PdDispatcher } from './pd/pd-dispatcher.js';
import { PrefillClient } from './pd/prefill-client.js';
import type { RoutingObserver } from './routing/selector.js';
import type { PolicyName } from './routing/policy.js';
import { WorkerPool } from './workers/worker-pool.js';
import { ROLES, type Role } from './workers/role.js';
import { resolveEndpoint } from './workers/endpoint.js';
import type { Worker } from './workers/worker.js';
import { WorkerHealth } from './health/worker-health.js';
import { HealthChecker } from './health/health-checker.js';
import { withHealth } from './health/health-dispatcher.js';
import { prefillHealthOutcome } from './request/request-end.js';
import { breakerStateCode } from './health/circuit-breaker.js';

export interface RouterDeps {
  logger?: Logger;
  /** Monotonic milliseconds for the registry and policies (tests inject a fake). */
  clock?: () => number;
}

export interface Router {
  readonly config: Readonly<Config>;
  readonly grpcPort: number;
  readonly adminPort: number;
  readonly registry: ServiceRegistry;
  readonly pools: Readonly<Record<Role, WorkerPool>>;
  readonly metrics: RouterMetrics;
  readonly logger: Logger;
  /** ZMQ discovery endpoint actually bound (when enabled). */
  readonly discoveryEndpoint: string | undefined;
  /** All pool members after reconciling with the registry. */
  workers(): Worker[];
  /**
   * Readiness off, discovery closed; keep serving for `graceMs` (default --drain-grace-ms) so load
   * balancers stop sending; then wait for in-flight streams (up to `timeoutMs`). True if drained.
   */
  drain(timeoutMs?: number, graceMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export async function startRouter(config: Readonly<Config>, deps: RouterDeps = {}): Promise<Router> {
  const logger = deps.logger ?? createLogger(config.logLevel);
  const clock = deps.clock ?? (() => performance.now());
  const registry = new ServiceRegistry({ ttlMs: config.discoveryTtlMs, clock });
  const allow = parseCidrList(config.discoveryAllow);
  const closers: Array<() => Promise<void> | void> = [];
  let draining = false;
  let drainRequested = false;
  /** Runs every closer registered so far, newest first (each at most once). */
  const closeAll = async (): Promise<void> => {
    for (const close of closers.splice(0).reverse()) {
      try {
        await close();
      } catch (err) {
        logger.warn({ err }, 'error during shutdown');
      }
    }
  };
  /** A component failed to start: release what already started, then fail. */
  const startFailed = async (err: unknown): Promise<never> => {
    await closeAll();
    throw err;
  };

  const policyFor = (role: Role): PolicyName =>
    role === 'prefill' ? config.prefillPolicy : role === 'decode' ? config.decodePolicy : config.policy;
  const pools = {} as Record<Role, WorkerPool>;
  const allWorkers = (): Worker[] => {
    const out: Worker[] = [];
    for (const role of ROLES) {
      pools[role].reconcile();
      out.push(...pools[role].workers);
    }
    return out;
  };
  const health = new WorkerHealth({
    checkFailureThreshold: config.healthFailureThreshold,
    checkSuccessThreshold: config.healthSuccessThreshold,
    breaker: {
      failureThreshold: config.cbFailureThreshold,
      successThreshold: config.cbSuccessThreshold,
      cooldownMs: config.cbCooldownMs,
    },
    onChange: (w, view, previous) =>
      logger.info({ worker: w.id, ...view, previous }, 'worker health changed'),
  });
  const metrics = new RouterMetrics({
    workers: allWorkers,
    breakerState: (w) => breakerStateCode(health.view(w, clock()).breaker),
    treeChars: () => treeSizes(pools, allWorkers()),
    processMetrics: true,
  });
  for (const role of ROLES) {
    const policy = createPolicy(policyFor(role), {
      cacheAware: {
        cacheThreshold: config.cacheThreshold,
        balanceAbsThreshold: config.balanceAbsThreshold,
        balanceRelThreshold: config.balanceRelThreshold,
        evictionIntervalMs: config.evictionIntervalMs,
        maxTreeSize: config.maxTreeSize,
        mode: config.cacheAwareMode,
      },
    });
    pools[role] = new WorkerPool(role, policy, registry, {
      onAdded: (w) => metrics.poolChanges.inc({ role: w.role, change: 'added' }),
      onRemoved: (w, reason) => {
        metrics.poolChanges.inc({ role: w.role, change: reason });
        health.forget(w);
      },
    });
  }

  const observer: RoutingObserver = {
    decided: (pool, d) => {
      health.routed(d.worker, clock()); // half-open: takes the probe slot in the selection step
      metrics.decisions.inc({ policy: pool.policy.name, role: pool.role, branch: d.branch });
      if (d.matchRate !== undefined) {
        metrics.matchRate.observe({ role: pool.role }, d.matchRate);
        (d.branch === 'cache_hit' ? metrics.cacheHits : metrics.cacheMisses).inc({ role: pool.role });
      }
    },
  };

  // Static workers: permanent registrations, host names resolved once.
  const staticWorkers: Array<[Role, string]> = [
    ...config.workers.map((u): [Role, string] => ['regular', u]),
    ...config.prefill.map((u): [Role, string] => ['prefill', u]),
    ...config.decode.map((u): [Role, string] => ['decode', u]),
  ];
  for (const [role, raw] of staticWorkers) {
    const { url, host, port } = parseWorkerUrl(raw);
    registry.register({ role, url, endpoint: await resolveEndpoint(host, port), permanent: true });
  }

  const passthrough = new PoolDispatcher({
    pool: config.mode === 'pd' ? pools.decode : pools.regular,
    observer,
    clock,
    decisionHeader: config.decisionHeader,
  });
  let dispatcher: Dispatcher = passthrough;
  if (config.mode === 'pd') {
    const client = new PrefillClient();
    closers.push(() => client.close());
    dispatcher = new PdDispatcher({
      prefillPool: pools.prefill,
      decodePool: pools.decode,
      passthrough,
      observer,
      client,
      clock,
      connector: config.kvConnector,
      dispatch: config.pdDispatch,
      prefillTimeoutMs: config.prefillTimeoutMs,
      prefillRetries: config.prefillRetries,
      decisionHeader: config.decisionHeader,
      pd: {
        prefillEnded: (w, outcome, ms, status) => {
          health.recordOutcome(w, prefillHealthOutcome(outcome, status), clock());
          metrics.pdPrefillRequests.inc({ worker: w.url });
          if (ms !== undefined) metrics.pdPrefillDuration.observe({ outcome }, ms / 1000);
        },
        decodeRouted: (w) => metrics.pdDecodeRequests.inc({ worker: w.url }),
        // A decode worker chosen for a request whose prefill failed never sees it: a neutral outcome
        // frees a half-open probe slot it may hold.
        decodeAbandoned: (w) => health.recordOutcome(w, 'cancelled', clock()),
        error: (type) => metrics.pdErrors.inc({ error_type: type }),
      },
    });
  }

  const grpcServer = new ExtProcServer({
    host: config.host,
    port: config.grpcPort,
    logger,
    dispatcher: withHealth(dispatcher, health, clock),
    maxBodyBytes: config.maxBodyBytes,
    onStreamsChanged: (n) => metrics.streamsActive.set(n),
    onEnd: (s) => {
      metrics.requests.inc({ route: s.route, outcome: s.outcome });
      metrics.requestDuration.observe({ route: s.route, outcome: s.outcome }, s.durationMs / 1000);
    },
  });
  // After a drain, close gracefully (the last replies of ended sessions may still be in flight).
  closers.push(() => grpcServer.close(drainRequested ? 5000 : 0));
  const grpcPort = await grpcServer.start().catch(startFailed);

  const checker = new HealthChecker({
    workers: allWorkers,
    health,
    intervalMs: config.healthCheckIntervalMs,
    timeoutMs: config.healthCheckTimeoutMs,
    clock,
    onCheckFailed: (w, reason) => logger.debug({ worker: w.id, reason }, 'health check failed'),
    onError: (err) => logger.error({ err }, 'health check round failed'),
  });
  checker.start();
  closers.push(() => checker.close());

  const janitor = new RegistryJanitor({
    registry,
    onExpired: (entries) => {
      for (const e of entries) metrics.discoveryEvents.inc({ role: e.role, event: 'expired' });
    },
    onError: (err) => logger.error({ err }, 'registry cleanup failed'),
  });
  closers.push(() => janitor.close());

  const maintenance = setInterval(() => {
    const now = clock();
    for (const role of ROLES) pools[role].policy.maintain?.(now);
  }, config.evictionIntervalMs);
  maintenance.unref();
  closers.push(() => clearInterval(maintenance));

  let discovery: ZmqDiscovery | undefined;
  let discoveryEndpoint: string | undefined;
  if (config.discoveryZmq) {
    discovery = new ZmqDiscovery({
      bind: config.discoveryZmq,
      registry,
      allow,
      logger,
      hooks: {
        onRegister: (e, event) => metrics.discoveryEvents.inc({ role: e.role, event }),
        onReject: (reason) => metrics.discoveryRejected.inc({ reason }),
        // libzmq drops oversized frames by disconnecting the sender; vLLM exits look the same.
        onPeerDisconnect: () => metrics.discoveryEvents.inc({ role: 'unknown', event: 'peer_disconnected' }),
      },
    });
    closers.push(() => discovery?.close());
    discoveryEndpoint = await discovery.start().catch(startFailed);
  }

  const backend: AdminBackend = {
    metrics: () => metrics.text(),
    metricsContentType: metrics.registry.contentType,
    readiness: () => {
      const needed: Role[] = config.mode === 'pd' ? ['prefill', 'decode'] : ['regular'];
      const counts: Record<string, number> = {};
      for (const role of needed) {
        pools[role].reconcile();
        counts[role] = pools[role].size;
      }
      const ready = !draining && needed.every((r) => (counts[r] ?? 0) > 0);
      return { ready, detail: { mode: config.mode, draining, workers: counts } };
    },
    workers: () => workerViews(allWorkers(), registry, clock(), health),
    register: async (req) => {
      let parsed;
      try {
        parsed = parseWorkerUrl(req.url);
      } catch (err) {
        throw new AdminInputError((err as Error).message);
      }
      if (!allow.allowsAll && !allow.allows(parsed.host)) {
        metrics.discoveryRejected.inc({ reason: 'not_allowed' });
        throw new AdminInputError(`worker address ${parsed.host} is outside --discovery-allow`, 403);
      }
      let endpoint: string;
      try {
        endpoint = await resolveEndpoint(parsed.host, parsed.port);
      } catch {
        metrics.discoveryRejected.inc({ reason: 'dns_failed' });
        throw new AdminInputError(`cannot resolve ${parsed.host}`);
      }
      const result = registry.register({
        role: req.role,
        url: parsed.url,
        endpoint,
        zmqAddress: req.zmqAddress,
        permanent: req.permanent,
      });
      if ('rejected' in result) {
        metrics.discoveryRejected.inc({ reason: result.rejected });
        throw new AdminInputError(result.rejected, 409);
      }
      metrics.discoveryEvents.inc({ role: req.role, event: result.event });
      return { generation: result.entry.generation, event: result.event, url: parsed.url, endpoint };
    },
    deregister: (role, url) => {
      let key = url;
      try {
        key = parseWorkerUrl(url).url;
      } catch {
        /* fall back to the raw key */
      }
      const removed = registry.deregister(role, key);
      if (removed) metrics.discoveryEvents.inc({ role, event: 'deregistered' });
      return removed;
    },
    peerAllowed: (peer) => allow.allowsAll || allow.allows(peer),
  };
  const admin = new AdminServer(backend, {
    host: config.host,
    port: config.adminPort,
    token: config.adminToken,
    logger,
  });
  closers.push(() => admin.close());
  const adminPort = await admin.start().catch(startFailed);

  logger.info(
    {
      grpcPort,
      adminPort,
      mode: config.mode,
      discovery: discoveryEndpoint,
      staticWorkers: staticWorkers.length,
    },
    'vllm-extproc-router started',
  );

  let closing: Promise<void> | undefined;
  return {
    config,
    grpcPort,
    adminPort,
    registry,
    pools,
    metrics,
    logger,
    discoveryEndpoint,
    workers: allWorkers,
    async drain(timeoutMs = config.drainTimeoutMs, graceMs = config.drainGraceMs) {
      draining = true;
      drainRequested = true;
      grpcServer.setReady(false);
      await discovery?.close();
      // Envoy's gRPC health check needs interval x unhealthy_threshold (+ timeout) to see NOT_SERVING;
      // until then it still opens streams here, and they must be served, not refused.
      if (graceMs > 0) await new Promise((resolve) => setTimeout(resolve, graceMs).unref());
      return grpcServer.waitIdle(timeoutMs);
    },
    close() {
      closing ??= (async () => {
        draining = true;
        grpcServer.setReady(false);
        // Reverse start order: discovery and timers first, then servers.
        await closeAll();
      })();
      return closing;
    },
  };
}

function workerViews(
  workers: Worker[],
  registry: ServiceRegistry,
  now: number,
  health: WorkerHealth,
): WorkerView[] {
  return workers.map((w) => {
    const entry: RegistryEntry | undefined = registry.get(w.role, w.url);
    const expires = entry && entry.generation === w.generation ? entry.expiresAtMs : undefined;
    return {
      role: w.role,
      url: w.url,
      endpoint: w.endpoint,
      zmqAddress: w.zmqAddress ?? null,
      generation: w.generation,
      load: w.load,
      processed: w.processed,
      healthy: w.healthy,
      health: (({ active, breaker }) => ({ active, breaker }))(health.view(w, now)),
      expiresInMs:
        expires === undefined || expires === Infinity ? null : Math.max(0, Math.round(expires - now)),
      ...(Object.keys(w.metadata).length ? { metadata: w.metadata } : {}),
    };
  });
}

function treeSizes(pools: Record<Role, WorkerPool>, workers: Worker[]): Array<[Worker, number]> {
  const out: Array<[Worker, number]> = [];
  for (const role of ROLES) {
    const policy = pools[role].policy as { treeChars?: () => Map<string, number> };
    const sizes = policy.treeChars?.();
    if (!sizes) continue;
    for (const w of workers) {
      if (w.role === role) out.push([w, sizes.get(w.id) ?? 0]);
    }
  }
  return out;
}
