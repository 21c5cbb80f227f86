/**
 * Composition root: config -> components (composition/wiring.ts, no I/O) -> the lifecycle list
 * below (start in order, drain, close in reverse order; composition/lifecycle.ts).
 *
 *   registry (static workers, admin API, ZMQ heartbeats, Kubernetes pods)
 *     -> role pools (persistent Workers, policy membership)
 *       -> dispatcher (regular: one pool; pd: prefill + decode legs)
 *         -> ext_proc sessions (gRPC) <- Envoy
 *   metrics/logs observe all of it; the admin server exposes it (admin/admin-backend.ts).
 *
 * Adding a component: build it in wiring.ts, then give it a step in `lifecycleSteps` at the place
 * its start belongs (it closes in the reverse place). Adding a setting: one entry in
 * config-schema.ts.
 */
import { parsePrefillArg, parseWorkerUrl, type Config } from './config.js';
import { RegistryJanitor } from './discovery/registry-janitor.js';
import type { KubeDiscovery, KubeDiscoveryHooks } from './discovery/kube-discovery.js';
import { createKubeDiscovery, createKubeObjectives } from './discovery/kube-source-config.js';
import type { KubeObjectives, KubeObjectivesHooks } from './discovery/kube-objectives.js';
import { kubeErrorReason } from './discovery/kube-error-reason.js';
import type { ServiceRegistry } from './discovery/service-registry.js';
import type { RouterMetrics } from './observability/metrics.js';
import { createLogger, type Logger } from './observability/logger.js';
import type { WorkerPool } from './workers/worker-pool.js';
import type { Role } from './workers/role.js';
import type { Worker } from './workers/worker.js';
import { resolveEndpoint } from './workers/endpoint.js';
import { Lifecycle, type LifecycleStep } from './composition/lifecycle.js';
import { wireRouter, type Components } from './composition/wiring.js';

export interface RouterDeps {
  logger?: Logger;
  /** Monotonic milliseconds for the registry and policies (tests inject a fake). */
  clock?: () => number;
  /** Observers of the Kubernetes source (tests wait on its events). */
  kubeDiscoveryHooks?: KubeDiscoveryHooks;
  /** Observers of the InferenceObjective watch (--inference-pool). */
  kubeObjectivesHooks?: KubeObjectivesHooks;
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
   * Readiness off, discovery closed (the workers it knows stay); keep serving for `graceMs` (default
   * --drain-grace-ms) so load balancers stop sending; then wait for in-flight streams (up to
   * `timeoutMs`). True if drained.
   */
  drain(timeoutMs?: number, graceMs?: number): Promise<boolean>;
  close(): Promise<void>;
}

export async function startRouter(config: Readonly<Config>, deps: RouterDeps = {}): Promise<Router> {
  const logger = deps.logger ?? createLogger(config.logLevel);
  const c = wireRouter(config, { logger, clock: deps.clock ?? (() => performance.now()) });
  const ports = { grpc: 0, admin: 0, discovery: undefined as string | undefined };
  const lifecycle = new Lifecycle(lifecycleSteps(c, ports, deps), {
    drainTimeoutMs: config.drainTimeoutMs,
    drainGraceMs: config.drainGraceMs,
    flag: c.drain,
    onCloseError: (step, err) => logger.warn({ err, step }, 'error during shutdown'),
  });
  await lifecycle.start();
  logger.info(
    {
      grpcPort: ports.grpc,
      adminPort: ports.admin,
      mode: config.mode,
      discovery: ports.discovery,
      staticWorkers: staticWorkers(config).length,
    },
    'vllm-extproc-router started',
  );
  return {
    config,
    grpcPort: ports.grpc,
    adminPort: ports.admin,
    registry: c.registry,
    pools: c.pools.byRole,
    metrics: c.metrics,
    logger,
    discoveryEndpoint: ports.discovery,
    workers: () => c.pools.workers(),
    drain: (timeoutMs, graceMs) => lifecycle.drain(timeoutMs, graceMs),
    close: () => lifecycle.close(),
  };
}

/**
 * THE lifecycle order. Start runs top to bottom; drain stops the intake top to bottom (gRPC
 * readiness off, then discovery) and waits for the gRPC streams; close runs bottom to top.
 */
function lifecycleSteps(
  c: Components,
  out: { grpc: number; admin: number; discovery: string | undefined },
  deps: RouterDeps,
): LifecycleStep[] {
  const { config } = c;
  let janitor: RegistryJanitor | undefined;
  const steps: Array<LifecycleStep | false> = [
    {
      // Before the workers register: loads --tokenizer files, then follows registry changes.
      name: 'kv events',
      start: () => c.exact.start(),
      close: () => c.exact.close(),
    },
    staticWorkersStep(c),
    c.prefillClient !== undefined && {
      name: 'prefill client',
      close: () => c.prefillClient?.close(),
    },
    c.bootstrap !== undefined && {
      // Queries start as prefill instances join the pool; close aborts them and their retry timers.
      name: 'mooncake bootstrap directory',
      close: () => c.bootstrap?.close(),
    },
    {
      name: 'ext_proc gRPC server',
      start: async () => {
        out.grpc = await c.grpc.start();
        // Not ready for Envoy's health checks until warm-up (the last step) is over.
        c.grpc.setReady(c.warmUp.done);
      },
      stopIntake: () => c.grpc.setReady(false),
      settle: (timeoutMs) => c.grpc.waitIdle(timeoutMs),
      // After a drain, close gracefully (the last replies of ended sessions may still be in flight).
      // Then the runtime LoRA and fleet control calls its sessions may have started (their connection pools).
      close: async ({ drained }) => {
        await c.grpc.close(drained ? config.closeGraceMs : 0);
        await c.lora.close();
        await c.fleet?.close();
      },
    },
    {
      name: 'health checker',
      start: () => c.checker.start(),
      close: () => c.checker.close(),
    },
    {
      name: 'metrics scraper',
      start: () => c.scraper.start(),
      close: () => c.scraper.close(),
    },
    {
      name: 'models poller',
      start: () => c.modelsPoller.start(),
      close: () => c.modelsPoller.close(),
    },
    {
      name: 'pause poller',
      start: () => c.pausePoller.start(),
      close: () => c.pausePoller.close(),
    },
    {
      name: 'registry janitor',
      start: () => {
        janitor = registryJanitor(c);
      },
      close: () => janitor?.close(),
    },
    policyMaintenanceStep(c),
    c.discovery !== undefined && {
      name: 'zmq discovery',
      start: async () => {
        out.discovery = await c.discovery?.start();
      },
      // The socket closes so the workers' heartbeats reach the replacement router; the workers this
      // one knows stay for the streams it still serves (ServiceRegistry.holdExpiry).
      stopIntake: () => {
        c.registry.holdExpiry();
        return c.discovery?.close();
      },
      close: () => c.discovery?.close(),
    },
    config.serviceDiscovery && kubeDiscoveryStep(c, deps),
    config.inferencePool !== '' && kubeObjectivesStep(c, deps),
    {
      name: 'admin server',
      start: async () => {
        out.admin = await c.admin.start();
      },
      // Then the worker operations it may have started (drains and calls in flight fail).
      close: async () => {
        await c.admin.close();
        await c.workerSleep.close();
      },
    },
    c.flow !== undefined && {
      // Closed before the workers' picture goes: held requests are answered 503 at once.
      name: 'flow control',
      start: () => undefined,
      close: () => c.flow?.close(),
    },
    {
      // Last: every source of the fleet's picture has started; readiness turns on when they report.
      name: 'warm-up',
      start: () => c.warmUp.start(),
      close: () => c.warmUp.close(),
    },
  ];
  return steps.filter((s): s is LifecycleStep => s !== false);
}

/** Permanent registrations of --worker/--prefill/--decode; host names resolved once, here. */
function staticWorkersStep(c: Components): LifecycleStep {
  return {
    name: 'static workers',
    start: async () => {
      for (const [role, raw, bootstrapPort] of staticWorkers(c.config)) {
        const { url, host, port } = parseWorkerUrl(raw);
        c.registry.register({
          role,
          url,
          endpoint: await resolveEndpoint(host, port, c.resolveHost),
          permanent: true,
          source: 'static',
          ...(bootstrapPort !== undefined ? { bootstrapPort } : {}),
        });
      }
    },
  };
}

/** One unref'd timer per policy that asks for maintenance (cache-tree eviction). */
function policyMaintenanceStep(c: Components): LifecycleStep {
  const timers: NodeJS.Timeout[] = [];
  return {
    name: 'policy maintenance',
    start: () => {
      for (const { policy, intervalMs } of c.pools.maintained()) {
        const timer = setInterval(() => policy.maintain?.(c.clock()), intervalMs);
        timer.unref();
        timers.push(timer);
      }
    },
    close: () => timers.splice(0).forEach(clearInterval),
  };
}

/**
 * Reads the kubeconfig (or the in-cluster token) at start; does not wait for the first list (warm-up
 * does). No stopIntake: its close() removes its workers, which a drain must keep serving.
 */
function kubeDiscoveryStep(c: Components, deps: RouterDeps): LifecycleStep {
  let kube: KubeDiscovery | undefined;
  return {
    name: 'kubernetes discovery',
    start: () => {
      kube = createKubeDiscovery(c.config, {
        registry: c.registry,
        logger: c.logger,
        count: (role, event) => c.metrics.discoveryEvents.inc({ role, event }),
        countError: (resource, phase, err) =>
          c.metrics.kubeWatchErrors.inc({ resource, phase, reason: kubeErrorReason(err) }),
        hooks: deps.kubeDiscoveryHooks,
      });
      kube?.start();
      const source = kube;
      if (source !== undefined)
        c.warmUp.add({ name: 'kubernetes pods listed', ready: () => source.synced() });
    },
    close: () => kube?.close(),
  };
}

/**
 * --inference-pool: the pool's InferenceObjectives from Kubernetes into the objective table
 * (discovery/kube-objectives.ts). Readiness waits for the first list, so no sheddable request slips
 * through before the objectives are known.
 */
function kubeObjectivesStep(c: Components, deps: RouterDeps): LifecycleStep {
  let source: KubeObjectives | undefined;
  return {
    name: 'kubernetes inference objectives',
    start: () => {
      const hooks = deps.kubeObjectivesHooks ?? {};
      const kube = createKubeObjectives(c.config, {
        ...hooks,
        onChange: (objectives) => {
          c.objectives.setWatched(objectives);
          c.logger.info(
            { pool: c.config.inferencePool, objectives: Object.fromEntries(objectives) },
            'inference objectives changed',
          );
          hooks.onChange?.(objectives);
        },
        onError: (phase, err, retryInMs) => {
          c.logger.warn({ phase, err, retryInMs }, 'inference objectives: list or watch failed');
          c.metrics.kubeWatchErrors.inc({
            resource: 'inferenceobjectives',
            phase,
            reason: kubeErrorReason(err),
          });
          hooks.onError?.(phase, err, retryInMs);
        },
      });
      source = kube;
      kube.start();
      c.warmUp.add({ name: 'inference objectives listed', ready: () => kube.synced() });
    },
    close: () => source?.close(),
  };
}

function registryJanitor({ registry, metrics, logger }: Components): RegistryJanitor {
  return new RegistryJanitor({
    registry,
    onExpired: (entries) => {
      for (const e of entries) metrics.discoveryEvents.inc({ role: e.role, event: 'expired' });
    },
    onError: (err) => logger.error({ err }, 'registry cleanup failed'),
  });
}

/** [role, url, Mooncake bootstrap port] of every static worker (`--prefill URL [BOOTSTRAP_PORT]`). */
function staticWorkers(config: Readonly<Config>): Array<[Role, string, number?]> {
  return [
    ...config.workers.map((u): [Role, string] => ['regular', u]),
    ...config.prefill.map((p): [Role, string, number?] => {
      const { url, bootstrapPort } = parsePrefillArg(p);
      return ['prefill', url, bootstrapPort];
    }),
    ...config.decode.map((u): [Role, string] => ['decode', u]),
  ];
}
