/**
 * What the admin API (admin-server.ts) reads and changes, over the router's components:
 *
 *   readiness   ready when every pool the mode needs has a live registration, warm-up is over and no
 *               drain began (read from the registry, the warm-up and the drain flag; nothing is
 *               reconciled); Mooncake: and at least one
 *               prefill instance whose bootstrap server answered;
 *   workers     every pool member with its registry expiry and health view;
 *   register    admin registration of one worker, in order (errors are AdminInputError codes):
 *                 0. a role the mode does not route to (regular in pd mode, prefill or decode in
 *                    regular mode): 400 `invalid_registration`,
 *                 1. parse the URL (400 `invalid_registration`),
 *                 2. a host outside --discovery-allow: 403 `worker_not_allowed`, counted
 *                    `not_allowed` (a name is never inside a non-empty list: see discovery/cidr.ts),
 *                 3. resolve a host name to the ip:port Envoy dials (failure: 400 `dns_failed`,
 *                    counted); the unspecified address (0.0.0.0, ::) is refused, 400
 *                    `invalid_registration`,
 *                 4. register; a registry rejection (a MoRI-IO transfer_mode change) is 409
 *                    `registration_conflict`, counted with the registry's reason; so is a
 *                    registration overtaken while it resolved its host by a later admin write at
 *                    its (role, url) (a DELETE, or a newer POST): it changes nothing, or a worker
 *                    deregistered meanwhile would come back (for good, when permanent);
 *   deregister  by (role, url), the url normalised like a registration's.
 */
import { parseWorkerUrl } from '../config.js';
import type { Config } from '../config-schema.js';
import type { CidrMatcher } from '../discovery/cidr.js';
import type { RegistryEntry, ServiceRegistry } from '../discovery/service-registry.js';
import type { WorkerHealth } from '../health/worker-health.js';
import type { RouterMetrics } from '../observability/metrics.js';
import type { Role } from '../workers/role.js';
import type { RolePools } from '../workers/role-pools.js';
import type { Worker } from '../workers/worker.js';
import type { BootstrapDirectory } from '../pd/mooncake-bootstrap.js';
import {
  AdminInputError,
  type AdminBackend,
  type WorkerRegistrationRequest,
  type WorkerSleepOps,
  type WorkerView,
} from './admin-server.js';

export interface AdminBackendDeps {
  readonly mode: Config['mode'];
  readonly registry: ServiceRegistry;
  readonly pools: RolePools;
  readonly health: WorkerHealth;
  readonly metrics: RouterMetrics;
  /** Extra per-worker fields for /workers (load sample, timing estimates). */
  readonly workerExtra?: (worker: Worker, now: number) => Record<string, unknown>;
  readonly allow: CidrMatcher;
  /** host, port -> the `ip:port` Envoy dials. */
  readonly resolve: (host: string, port: number) => Promise<string>;
  readonly clock: () => number;
  readonly drain: { readonly draining: boolean };
  /** Warm-up (composition/warm-up.ts): not ready until the picture of the fleet is rebuilt. */
  readonly warmUp: { readonly done: boolean; pending(): string[] };
  /** Mooncake: prefill instances' bootstrap state (readiness, /workers). */
  readonly bootstrap?: BootstrapDirectory;
  /** Cordon, sleep and wake (worker-sleep.ts); its URLs are normalised here. */
  readonly workerSleep?: WorkerSleepOps;
}

export function createAdminBackend(deps: AdminBackendDeps): AdminBackend {
  const { registry, metrics, allow } = deps;
  // Per (role, url): the latest admin registration still resolving its host; a later write replaces
  // or removes it, and the one overtaken registers nothing (see register).
  const resolving = new Map<string, object>();
  return {
    metrics: () => metrics.text(),
    metricsContentType: metrics.registry.contentType,
    readiness: () => readiness(deps),
    workers: () =>
      workerViews(
        deps.pools.workers(),
        registry,
        deps.clock(),
        deps.health,
        deps.bootstrap,
        deps.workerExtra,
      ),
    register: (req) => register(deps, req, resolving),
    deregister: (role, url) => {
      resolving.delete(`${role} ${normalisedKey(url)}`);
      const removed = registry.deregister(role, normalisedKey(url));
      if (removed) metrics.discoveryEvents.inc({ role, event: 'deregistered' });
      return removed;
    },
    peerAllowed: (peer) => allow.allowsAll || allow.allows(peer),
    ...(deps.workerSleep ? { workerSleep: normalising(deps.workerSleep) } : {}),
  };
}

/** The worker operations with their URL normalised like a registration's. */
function normalising(ops: WorkerSleepOps): WorkerSleepOps {
  return {
    cordon: (url, on) => ops.cordon(normalisedKey(url), on),
    sleep: (url, level, timeoutMs) => ops.sleep(normalisedKey(url), level, timeoutMs),
    wakeUp: (url) => ops.wakeUp(normalisedKey(url)),
  };
}

/** The roles a mode sends requests to. */
function routedRoles(mode: Config['mode']): readonly Role[] {
  return mode === 'pd' ? ['prefill', 'decode'] : ['regular'];
}

function readiness(deps: AdminBackendDeps): { ready: boolean; detail: Record<string, unknown> } {
  const needed = routedRoles(deps.mode);
  const counts: Record<string, number> = {};
  for (const role of needed) counts[role] = deps.registry.size(role);
  const draining = deps.drain.draining;
  const warmingUp = deps.warmUp.pending();
  const boot = deps.bootstrap;
  const bootstrapReady = boot
    ? deps.pools.byRole.prefill.workers.filter((w) => boot.isReady(w)).length
    : undefined;
  const ready =
    !draining && deps.warmUp.done && needed.every((r) => (counts[r] ?? 0) > 0) && bootstrapReady !== 0;
  return {
    ready,
    detail: {
      mode: deps.mode,
      draining,
      workers: counts,
      ...(deps.warmUp.done ? {} : { warmingUp }),
      ...(bootstrapReady !== undefined ? { mooncakeBootstrapReady: bootstrapReady } : {}),
    },
  };
}

async function register(
  deps: AdminBackendDeps,
  req: WorkerRegistrationRequest,
  resolving: Map<string, object>,
): Promise<{ generation: number; event: string; url: string; endpoint: string }> {
  const { metrics } = deps;
  const routed = routedRoles(deps.mode);
  if (!routed.includes(req.role)) {
    // It would be listed, probed and scraped, and never sent a request.
    throw new AdminInputError(
      `role ${req.role} gets no traffic in ${deps.mode} mode (it routes to ${routed.join(' and ')} workers)`,
    );
  }
  let parsed;
  try {
    parsed = parseWorkerUrl(req.url);
  } catch (err) {
    throw new AdminInputError((err as Error).message);
  }
  if (!deps.allow.allowsAll && !deps.allow.allows(parsed.host)) {
    metrics.discoveryRejected.inc({ reason: 'not_allowed' });
    throw new AdminInputError(
      `worker address ${parsed.host} is outside --discovery-allow`,
      'worker_not_allowed',
    );
  }
  const key = `${req.role} ${parsed.url}`;
  const ticket = {};
  resolving.set(key, ticket);
  let endpoint: string;
  let overtaken: boolean;
  try {
    endpoint = await deps.resolve(parsed.host, parsed.port);
  } catch {
    metrics.discoveryRejected.inc({ reason: 'dns_failed' });
    throw new AdminInputError(`cannot resolve ${parsed.host}`, 'dns_failed');
  } finally {
    overtaken = resolving.get(key) !== ticket;
    if (!overtaken) resolving.delete(key);
  }
  if (overtaken) {
    // A DELETE (or a newer POST) of this (role, url) came while the host resolved: applying this
    // one now would undo it.
    metrics.discoveryRejected.inc({ reason: 'superseded' });
    throw new AdminInputError(
      `${req.role} ${parsed.url} was deregistered or registered again while this registration resolved its host`,
      'registration_conflict',
    );
  }
  if (UNSPECIFIED_ENDPOINT.test(endpoint)) {
    // vLLM's "--host 0.0.0.0" is where it listens, not an address to dial: Envoy, the health checks
    // and the scrapes would reach the router's own host instead of the worker.
    throw new AdminInputError(
      `${parsed.host} is the unspecified (listen-on-all) address, not one a worker is reached at: ` +
        "register the worker's own IP or host name",
    );
  }
  const result = deps.registry.register({
    role: req.role,
    url: parsed.url,
    endpoint,
    zmqAddress: req.zmqAddress,
    permanent: req.permanent,
    source: 'admin',
    ...(req.bootstrapPort !== undefined ? { bootstrapPort: req.bootstrapPort } : {}),
    ...(req.metadata !== undefined ? { metadata: req.metadata } : {}),
  });
  if ('rejected' in result) {
    metrics.discoveryRejected.inc({ reason: result.rejected });
    throw new AdminInputError(result.rejected, 'registration_conflict');
  }
  metrics.discoveryEvents.inc({ role: req.role, event: result.event });
  return { generation: result.entry.generation, event: result.event, url: parsed.url, endpoint };
}

/** `0.0.0.0:port` or `[::]:port`: an endpoint no connection can be meant for. */
const UNSPECIFIED_ENDPOINT = /^(0\.0\.0\.0|\[::\]):\d+$/;

/** A DELETE's url, normalised like a registration's (the raw text when it does not parse). */
function normalisedKey(url: string): string {
  try {
    return parseWorkerUrl(url).url;
  } catch {
    return url;
  }
}

export function workerViews(
  workers: Worker[],
  registry: ServiceRegistry,
  now: number,
  health: WorkerHealth,
  bootstrap?: BootstrapDirectory,
  extra?: (worker: Worker, now: number) => Record<string, unknown>,
): WorkerView[] {
  return workers.map((w) => {
    const boot = w.role === 'prefill' ? bootstrap?.view(w) : undefined;
    const entry: RegistryEntry | undefined = registry.get(w.role, w.url);
    const expires = entry && entry.generation === w.generation ? entry.expiresAtMs : undefined;
    return {
      role: w.role,
      url: w.url,
      ...(w.dpRank !== undefined ? { key: w.key, dpRank: w.dpRank } : {}),
      endpoint: w.endpoint,
      zmqAddress: w.zmqAddress ?? null,
      generation: w.generation,
      load: w.load,
      processed: w.processed,
      healthy: w.healthy,
      health: (({ active, breaker, asleep, cordoned, paused }) => ({
        active,
        breaker,
        asleep,
        cordoned,
        paused,
      }))(health.view(w, now)),
      expiresInMs:
        expires === undefined || expires === Infinity ? null : Math.max(0, Math.round(expires - now)),
      ...(Object.keys(w.metadata).length ? { metadata: w.metadata } : {}),
      ...(w.bootstrapPort !== undefined ? { bootstrapPort: w.bootstrapPort } : {}),
      ...(boot ? { bootstrap: boot } : {}),
      ...extra?.(w, now),
    };
  });
}
