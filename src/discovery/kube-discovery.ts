/**
 * KubeDiscovery: Kubernetes pods -> ServiceRegistry, one KubePodWatcher per role rule
 * (`--selector` for regular workers, `--prefill-selector` / `--decode-selector` in P/D mode).
 *
 * State-based, not event-based: each role keeps the latest object of every pod its watch reported (the
 * store), and after any change to a pod re-evaluates that pod with the pure rules of kube-pod-membership.ts.
 * A relist replaces the whole store, so a pod deleted while no watch ran is simply absent and leaves.
 *
 * Registry mapping. A member pod is registered as `{role, url: http://podIP:port, endpoint, metadata}`
 * (`permanent`: this source, not a TTL, ends its lifetime; `sourceOwned`: a lifetime another source starts
 * at the url does not inherit that). What this source registered is remembered per pod
 * as (uid, url, metadata, generation). A pod is removed at once (deregistered) when it stops being a member;
 * in-flight requests keep their Worker object and finish normally (the pool only drops it from selection).
 * A NEW registration lifetime, hence a new generation and a fresh Worker, starts when:
 *   - the pod comes back after leaving (NotReady -> Ready, relabel out and in);
 *   - the UID behind the pod changes (deleted and recreated with the same name, possibly the same IP);
 *   - its url or port-annotation metadata changes (a Worker is immutable in those).
 * Two pods claiming the same url (a recreated pod whose predecessor's removal has not been seen yet): the
 * first keeps it; the other is re-evaluated when the url frees up.
 * Only entries this source registered are deregistered (checked by generation), so a static worker or a
 * ZMQ registration at the same (role, url) is never removed by it. A member pod whose url another source
 * holds, or whose entry another source took over, is held out until that entry goes: the source follows
 * the registry's change notifications, so the pod joins (again) at that moment, not at its next event or
 * relist (registryChanged).
 *
 * A role may take its selector and port from an InferencePool (`pool`, kube-inference-pool.ts) instead of
 * a flag: its pods are watched once the pool is read, and whenever what the pool selects changes, the
 * pod watch starts over on the new selection; its first LIST replaces the role's store, so pods the pool
 * no longer selects leave and pods on a new port re-register (a new url). A pool that selects nothing
 * (deleted, no selector) empties the role.
 */
import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import type { Role } from '../workers/role.js';
import { KubeInferencePool, type PoolGroup, type PoolMembers } from './kube-inference-pool.js';
import type { ServiceRegistry } from './service-registry.js';
import { KubePodWatcher, type PodWatchEventType, type WatchEndReason } from './kube-pod-watcher.js';
import {
  formatLabelSelector,
  matchesSelector,
  podKey,
  podMembership,
  type NonMemberReason,
  type PodObject,
  type RoleRule,
} from './kube-pod-membership.js';

export type KubeRemovalReason = NonMemberReason | 'deleted' | 'replaced' | 'closed';

export type KubeMembershipChange =
  | { type: 'added'; role: Role; pod: string; uid: string; url: string; generation: number }
  | {
      type: 'removed';
      role: Role;
      pod: string;
      uid: string;
      url: string;
      generation: number;
      reason: KubeRemovalReason;
    };

export interface KubeDiscoveryHooks {
  /** A worker joined or left the registry. */
  onChange?(change: KubeMembershipChange): void;
  /** A LIST of `role`'s pods was applied (the first one and every relist). */
  onSynced?(role: Role, pods: number): void;
  onWatchEnded?(role: Role, reason: WatchEndReason): void;
  /** A LIST or WATCH of `resource` (the role's pods, or the InferencePool that names them) failed. */
  onError?(role: Role, phase: 'list' | 'watch', err: unknown, resource: KubeResource): void;
}

/** What a Kubernetes source lists and watches. */
export type KubeResource = 'pods' | 'inferencepools';

export interface KubeDiscoveryOptions {
  kubeConfig: KubeConfig;
  /** Undefined = all namespaces. */
  namespace?: string;
  rules: readonly RoleRule[];
  registry: ServiceRegistry;
  logger: Logger;
  hooks?: KubeDiscoveryHooks;
  /** Watch resync period (see KubePodWatcher). */
  resyncMs?: number;
  maxBackoffMs?: number;
  /**
   * A role whose pods are the ones the InferencePool `name` (in `namespace`) selects, on its target
   * port; `rule` gives the rest of its rule (port fallbacks).
   */
  pool?: {
    name: string;
    /** The pool's API group (default `inference.networking.k8s.io`, v1). */
    group?: PoolGroup;
    namespace: string;
    role: Role;
    rule?: Omit<RoleRule, 'role' | 'selector' | 'port'>;
  };
}

interface Registered {
  readonly uid: string;
  readonly restarts: number;
  readonly url: string;
  readonly metadataKey: string;
  readonly generation: number;
}

/** One role's store and registrations (exported for unit tests: feed it pods, read the registry). */
export class KubeRoleSource {
  private readonly pods = new Map<string, PodObject>();
  private readonly members = new Map<string, Registered>();
  private readonly urlOwner = new Map<string, string>();
  private readonly lastReason = new Map<string, string>();
  /** Pods held out because another source's live entry holds their url: pod key -> url. */
  private readonly waiting = new Map<string, string>();
  /** > 0 while this source itself changes the registry (its own changes need no second look). */
  private busy = 0;
  private readonly unsubscribe: () => void;

  constructor(
    private rule: RoleRule,
    private readonly registry: ServiceRegistry,
    private readonly logger: Logger,
    private readonly hooks: KubeDiscoveryHooks,
  ) {
    this.unsubscribe = registry.onChange((role) => this.registryChanged(role));
  }

  get memberCount(): number {
    return this.members.size;
  }

  /** A new rule (the InferencePool changed); the next `synced` applies it to every pod. */
  setRule(rule: RoleRule): void {
    this.rule = rule;
  }

  synced(pods: readonly PodObject[]): void {
    const fresh = new Map<string, PodObject>();
    for (const pod of pods) fresh.set(podKey(pod), pod);
    // Departures first, so their urls are free for pods of the new list.
    for (const key of [...this.pods.keys()]) {
      if (!fresh.has(key)) {
        this.pods.delete(key);
        this.apply(key);
      }
    }
    for (const [key, pod] of fresh) {
      this.pods.set(key, pod);
      this.apply(key);
    }
    this.hooks.onSynced?.(this.rule.role, fresh.size);
  }

  event(type: PodWatchEventType, pod: PodObject): void {
    const key = podKey(pod);
    if (type !== 'DELETED') {
      this.pods.set(key, pod);
      this.apply(key);
      return;
    }
    this.pods.delete(key);
    // A watch with a label selector reports a pod relabelled out of it as DELETED (with the new labels).
    this.apply(key, matchesSelector(pod.metadata?.labels, this.rule.selector) ? 'deleted' : 'selector');
    // No longer watched (its real deletion is never seen): nothing of it is kept.
    this.lastReason.delete(key);
  }

  /** Removes everything this source registered, and stops following the registry. */
  clear(): void {
    this.unsubscribe();
    this.busy += 1;
    try {
      for (const [key, reg] of [...this.members]) this.remove(key, reg, 'closed');
    } finally {
      this.busy -= 1;
    }
    this.pods.clear();
    this.waiting.clear();
  }

  /**
   * Another source changed `role`'s entries. A member whose entry it took over (a heartbeat with a zmq
   * address, a static registration after an admin DELETE) is held out at once, and a pod held out joins
   * as soon as the other source's entry goes (its heartbeats' expiry, an admin DELETE), instead of at
   * its next event or relist. A member whose own entry an admin DELETE removed stays out until then.
   */
  private registryChanged(role: Role): void {
    if (role !== this.rule.role || this.busy > 0) return;
    for (const [key, reg] of [...this.members]) {
      const entry = this.registry.get(role, reg.url);
      if (entry !== undefined && entry.generation !== reg.generation) this.apply(key);
    }
    for (const [key, url] of [...this.waiting]) {
      if (this.registry.get(role, url) === undefined) this.apply(key);
    }
  }

  private apply(key: string, goneReason: KubeRemovalReason = 'deleted'): void {
    this.busy += 1;
    try {
      this.applyNow(key, goneReason);
    } finally {
      this.busy -= 1;
    }
  }

  private applyNow(key: string, goneReason: KubeRemovalReason): void {
    this.waiting.delete(key);
    const pod = this.pods.get(key);
    const verdict = pod === undefined ? undefined : podMembership(pod, this.rule);
    const current = this.members.get(key);
    if (verdict === undefined || !verdict.member) {
      const reason: KubeRemovalReason = verdict === undefined ? goneReason : verdict.reason;
      this.noteReason(key, reason, verdict !== undefined && !verdict.member ? verdict.detail : undefined);
      if (current !== undefined) this.remove(key, current, reason);
      return;
    }
    const w = verdict.worker;
    const metadataKey = JSON.stringify(w.metadata);
    if (current !== undefined) {
      const same =
        current.uid === w.uid &&
        current.restarts === w.restarts &&
        current.url === w.url &&
        current.metadataKey === metadataKey;
      // Unchanged and still this source's entry. Another source may have replaced it (a heartbeat with a
      // zmq address starts its own lifetime) or removed it (it expired, an admin DELETE): registered again.
      if (same && this.registry.get(w.role, w.url)?.generation === current.generation) return;
      this.remove(key, current, 'replaced');
    }
    const owner = this.urlOwner.get(w.url);
    if (owner !== undefined && owner !== key) {
      this.noteReason(key, 'url_taken', `${w.url} belongs to pod ${owner}`);
      return;
    }
    // Another source's live entry (a static worker, a ZMQ registration): joining or replacing it would make
    // this source remove it later. It stays theirs; the pod joins when it goes (registryChanged).
    if (this.registry.get(w.role, w.url) !== undefined) {
      this.waiting.set(key, w.url);
      this.noteReason(key, 'url_taken', `${w.url} is registered by another source`);
      return;
    }
    const result = this.registry.register({
      role: w.role,
      url: w.url,
      endpoint: w.endpoint,
      metadata: w.metadata,
      permanent: true,
      sourceOwned: true,
      source: 'kube',
    });
    if ('rejected' in result) {
      this.noteReason(key, result.rejected);
      return;
    }
    const reg: Registered = {
      uid: w.uid,
      restarts: w.restarts,
      url: w.url,
      metadataKey,
      generation: result.entry.generation,
    };
    this.members.set(key, reg);
    this.urlOwner.set(w.url, key);
    this.lastReason.delete(key);
    this.logger.info(
      { role: w.role, pod: key, uid: w.uid, url: w.url, generation: reg.generation },
      'kubernetes worker added',
    );
    this.hooks.onChange?.({
      type: 'added',
      role: w.role,
      pod: key,
      uid: w.uid,
      url: w.url,
      generation: reg.generation,
    });
  }

  private remove(key: string, reg: Registered, reason: KubeRemovalReason): void {
    this.members.delete(key);
    if (this.urlOwner.get(reg.url) === key) this.urlOwner.delete(reg.url);
    if (this.registry.get(this.rule.role, reg.url)?.generation === reg.generation) {
      this.registry.deregister(this.rule.role, reg.url);
    }
    this.logger.info(
      { role: this.rule.role, pod: key, uid: reg.uid, url: reg.url, generation: reg.generation, reason },
      'kubernetes worker removed',
    );
    this.hooks.onChange?.({
      type: 'removed',
      role: this.rule.role,
      pod: key,
      uid: reg.uid,
      url: reg.url,
      generation: reg.generation,
      reason,
    });
    if (reason !== 'closed') this.adoptUrl(reg.url, key);
  }

  /** A url freed up: a pod that was waiting for it (same url, member otherwise) takes it. */
  private adoptUrl(url: string, previous: string): void {
    for (const [key, pod] of this.pods) {
      if (key === previous || this.members.has(key)) continue;
      const verdict = podMembership(pod, this.rule);
      if (verdict.member && verdict.worker.url === url) {
        this.apply(key);
        return;
      }
    }
  }

  /** Logs why a pod is held out, once per change of reason (a warning for configuration problems). */
  private noteReason(key: string, reason: string, detail?: string): void {
    if (this.lastReason.get(key) === reason) return;
    if (reason === 'deleted') {
      this.lastReason.delete(key);
      return;
    }
    this.lastReason.set(key, reason);
    const fields = { role: this.rule.role, pod: key, reason, ...(detail ? { detail } : {}) };
    if (reason === 'bad_annotation' || reason === 'url_taken' || reason === 'no_uid') {
      this.logger.warn(fields, 'kubernetes pod held out of the pool');
    } else {
      this.logger.debug(fields, 'kubernetes pod is not a worker');
    }
  }
}

interface Watched {
  readonly role: Role;
  readonly source: KubeRoleSource;
  readonly watcher: KubePodWatcher;
}

export class KubeDiscovery {
  private readonly sources: Watched[] = [];
  private readonly pool: KubeInferencePool | undefined;
  /**
   * The pool's role: one source per target port (kept across selections while the pool lists the port)
   * and the watch of the current selection, which feeds them all.
   */
  private poolSources = new Map<number, KubeRoleSource>();
  private poolWatch: KubePodWatcher | undefined;
  /** Pool changes are applied one after the other (closing a watch is asynchronous). */
  private repointing: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(private readonly opts: KubeDiscoveryOptions) {
    const hooks = opts.hooks ?? {};
    for (const rule of opts.rules) {
      const source = new KubeRoleSource(rule, opts.registry, opts.logger, hooks);
      const watcher = this.podWatcher(rule, [source], opts.namespace);
      this.sources.push({ role: rule.role, source, watcher });
    }
    const pool = opts.pool;
    this.pool =
      pool === undefined
        ? undefined
        : new KubeInferencePool({
            kubeConfig: opts.kubeConfig,
            namespace: pool.namespace,
            name: pool.name,
            ...(pool.group !== undefined ? { group: pool.group } : {}),
            ...(opts.resyncMs !== undefined ? { resyncMs: opts.resyncMs } : {}),
            ...(opts.maxBackoffMs !== undefined ? { maxBackoffMs: opts.maxBackoffMs } : {}),
            hooks: {
              onChange: (members) => {
                // A failed step must not stop the ones after it (the chain would stay rejected).
                this.repointing = this.repointing
                  .then(() => this.repoint(members))
                  .catch((err: unknown) =>
                    opts.logger.error({ pool: pool.name, err }, 'kubernetes InferencePool selection failed'),
                  );
              },
              onError: (phase, err, retryInMs) => {
                opts.logger.warn(
                  { pool: pool.name, phase, retryInMs, err: (err as Error)?.message ?? String(err) },
                  'kubernetes InferencePool watch failed; retrying',
                );
                hooks.onError?.(pool.role, phase, err, 'inferencepools');
              },
            },
          });
  }

  start(): void {
    for (const { watcher } of this.sources) watcher.start();
    this.pool?.start();
  }

  /** Workers this source currently has in the registry, per role. */
  memberCount(role: Role): number {
    const fromPool =
      this.opts.pool?.role === role
        ? [...this.poolSources.values()].reduce((n, s) => n + s.memberCount, 0)
        : 0;
    return this.sources.filter((s) => s.role === role).reduce((n, s) => n + s.source.memberCount, fromPool);
  }

  /**
   * Every watched role has completed its first LIST (warm-up: the pods are known); the pool's role once
   * the pool selects pods and their LIST completed.
   */
  synced(): boolean {
    const pool = this.pool === undefined || (this.poolWatch?.listCount ?? 0) > 0;
    return pool && this.sources.every((s) => s.watcher.listCount > 0);
  }

  /** Completed LISTs of `role` (initial + relists; the pool's role: of its current selection). */
  listCount(role: Role): number {
    const fromPool = this.opts.pool?.role === role ? (this.poolWatch?.listCount ?? 0) : 0;
    return this.sources.filter((s) => s.role === role).reduce((n, s) => n + s.watcher.listCount, fromPool);
  }

  /** Idempotent: stops the watches and deregisters every worker this source added. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool?.close();
    await this.repointing;
    await Promise.all([...this.sources.map((s) => s.watcher.close()), this.poolWatch?.close()]);
    for (const { source } of this.sources) source.clear();
    for (const source of this.poolSources.values()) source.clear();
  }

  /** The pool selects `members` now: watch those pods (none: the role empties). */
  private async repoint(members: PoolMembers | undefined): Promise<void> {
    const pool = this.opts.pool!;
    const old = this.poolWatch;
    this.poolWatch = undefined;
    await old?.close();
    if (this.closed) return;
    this.opts.logger.info(
      { pool: pool.name, role: pool.role, selector: members?.selector, ports: members?.ports },
      members === undefined
        ? 'kubernetes InferencePool selects no pods'
        : 'kubernetes InferencePool selection',
    );
    if (members === undefined) {
      for (const source of this.poolSources.values()) source.synced([]);
      return;
    }
    // A port the pool still lists keeps its source; a new port takes over the source of a port it no
    // longer lists (its workers move over with the next list), else gets a new one.
    const hooks = this.opts.hooks ?? {};
    const spare = [...this.poolSources].filter(([port]) => !members.ports.includes(port)).map(([, s]) => s);
    const next = new Map<number, KubeRoleSource>();
    for (const port of members.ports) {
      const rule: RoleRule = { ...pool.rule, role: pool.role, selector: members.selector, port };
      const source = this.poolSources.get(port) ?? spare.shift();
      if (source === undefined) {
        next.set(port, new KubeRoleSource(rule, this.opts.registry, this.opts.logger, hooks));
      } else {
        source.setRule(rule);
        next.set(port, source);
      }
    }
    // Ports gone without a successor: their workers leave now.
    for (const source of spare) source.clear();
    this.poolSources = next;
    const first: RoleRule = {
      ...pool.rule,
      role: pool.role,
      selector: members.selector,
      port: members.ports[0]!,
    };
    this.poolWatch = this.podWatcher(first, [...next.values()], pool.namespace);
    this.poolWatch.start();
  }

  /** A watch of `rule`'s pods that feeds every one of `sources` (the pool's: one per target port). */
  private podWatcher(
    rule: RoleRule,
    sources: readonly KubeRoleSource[],
    namespace: string | undefined,
  ): KubePodWatcher {
    const opts = this.opts;
    const hooks = opts.hooks ?? {};
    return new KubePodWatcher({
      kubeConfig: opts.kubeConfig,
      namespace,
      labelSelector: formatLabelSelector(rule.selector),
      resyncMs: opts.resyncMs,
      maxBackoffMs: opts.maxBackoffMs,
      handler: {
        synced: (pods: V1Pod[]) => {
          for (const source of sources) source.synced(pods as PodObject[]);
        },
        event: (type, pod) => {
          for (const source of sources) source.event(type, pod as PodObject);
        },
        failed: (err, phase, retryInMs) => {
          opts.logger.warn(
            { role: rule.role, phase, retryInMs, err: (err as Error)?.message ?? String(err) },
            'kubernetes pod watch failed; retrying',
          );
          hooks.onError?.(rule.role, phase, err, 'pods');
        },
        watchEnded: (reason) => {
          opts.logger.debug({ role: rule.role, reason }, 'kubernetes pod watch ended; relisting');
          hooks.onWatchEnded?.(rule.role, reason);
        },
      },
    });
  }
}
