/**
 * KubeInferencePool: which pods an InferencePool (Gateway API Inference Extension, `inferencepools`)
 * selects, and on which port, read from the pool itself, as the endpoint picker reads it. The pool's API
 * group is `--inference-pool-group`, like the endpoint picker's `--pool-group` (same default):
 *   - `inference.networking.k8s.io` (v1, GAIE v1.0+): `spec.selector.matchLabels` and
 *     `spec.targetPorts[*].number` (GAIE v1.1+ allows up to 8 ports: "every port will be treated as a
 *     distinctive endpoint by EPP, addressable as a 'podIP:portNumber' combination", e.g. one vLLM API
 *     server per data-parallel rank; each is a worker of its own);
 *   - `inference.networking.x-k8s.io` (v1alpha2, the only InferencePool of GAIE before v1.0, still
 *     shipped by v1.0): `spec.selector`, a plain label map, and one `spec.targetPortNumber`.
 * With `--inference-pool NAME` and no selector flag for the role the pool serves (regular mode's
 * workers; P/D's decode workers), Kubernetes discovery watches the pods the pool selects, so the pool
 * is the one place that names them (kube-discovery.ts follows every change of it).
 *
 * A KubeListWatch (kube-list-watch.ts) of the pools in one namespace (an InferencePool selects pods in
 * its own namespace only): LIST, then WATCH, relisting on every reconnect. Only the named pool counts.
 * A pool that is missing, or whose selector is empty (it would select every pod of the namespace, the
 * router's own included) or one of whose ports is not one, selects nothing: `onChange(undefined)`.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeListWatch, type WatchEndReason } from './kube-list-watch.js';
import { customObjects } from './kube-custom-objects.js';
import type { LabelSelector } from './kube-pod-membership.js';
import { POOL_GROUP } from './kube-objectives.js';

export const POOL_PLURAL = 'inferencepools';
/** The InferencePool API groups, each read at the one version the Inference Extension serves it at. */
export const POOL_GROUPS = ['inference.networking.k8s.io', 'inference.networking.x-k8s.io'] as const;
export type PoolGroup = (typeof POOL_GROUPS)[number];

/** The version a pool of `group` is read at. */
export function poolVersion(group: PoolGroup): string {
  return group === POOL_GROUP ? 'v1' : 'v1alpha2';
}

/** What the router reads of an InferencePool. */
export interface InferencePoolObject {
  readonly metadata?: { readonly name?: string };
  readonly spec?: {
    /** v1: `{matchLabels}`; v1alpha2: the label map itself. */
    readonly selector?: unknown;
    readonly targetPorts?: unknown;
    /** v1alpha2 only. */
    readonly targetPortNumber?: unknown;
  };
}

/** The pods a pool selects: every `key=value` of `selector`, each served on every one of `ports`. */
export interface PoolMembers {
  readonly selector: LabelSelector;
  readonly ports: readonly number[];
}

/**
 * The pool's members (a pool of `group`'s version), or undefined when it selects nothing the router can
 * use (see above). Pure.
 */
export function poolMembers(
  obj: InferencePoolObject | undefined,
  group: PoolGroup = POOL_GROUP,
): PoolMembers | undefined {
  const v1 = group === POOL_GROUP;
  const selectorField = obj?.spec?.selector as { matchLabels?: unknown } | undefined;
  const labels = v1 ? selectorField?.matchLabels : selectorField;
  if (typeof labels !== 'object' || labels === null || Array.isArray(labels)) return undefined;
  const selector: Record<string, string> = {};
  for (const [k, v] of Object.entries(labels)) {
    if (typeof v !== 'string') return undefined;
    selector[k] = v;
  }
  if (Object.keys(selector).length === 0) return undefined;
  const targets = v1 ? obj?.spec?.targetPorts : [{ number: obj?.spec?.targetPortNumber }];
  if (!Array.isArray(targets) || targets.length === 0) return undefined;
  const ports: number[] = [];
  for (const target of targets as Array<{ number?: unknown } | undefined>) {
    const port = target?.number;
    if (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535) return undefined;
    if (!ports.includes(port)) ports.push(port);
  }
  return { selector, ports };
}

/** Two readings of a pool select the same pods on the same ports. */
export function sameMembers(a: PoolMembers | undefined, b: PoolMembers | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  if (a.ports.length !== b.ports.length || a.ports.some((p, i) => b.ports[i] !== p)) return false;
  const ka = Object.keys(a.selector);
  return ka.length === Object.keys(b.selector).length && ka.every((k) => b.selector[k] === a.selector[k]);
}

export interface KubeInferencePoolHooks {
  /** What the pool selects changed (undefined: nothing, e.g. the pool was deleted). */
  onChange(members: PoolMembers | undefined): void;
  onError?(phase: 'list' | 'watch', err: unknown, retryInMs: number): void;
  onWatchEnded?(reason: WatchEndReason): void;
}

export interface KubeInferencePoolOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The InferencePool's name. */
  name: string;
  /** Its API group (default `inference.networking.k8s.io`, v1). */
  group?: PoolGroup;
  hooks: KubeInferencePoolHooks;
  resyncMs?: number;
  maxBackoffMs?: number;
}

export class KubeInferencePool {
  private readonly watcher: KubeListWatch<InferencePoolObject>;
  private members: PoolMembers | undefined;
  private reported = false;
  private lists = 0;

  private readonly group: PoolGroup;

  constructor(private readonly opts: KubeInferencePoolOptions) {
    this.group = opts.group ?? POOL_GROUP;
    this.watcher = new KubeListWatch<InferencePoolObject>({
      kubeConfig: opts.kubeConfig,
      ...customObjects<InferencePoolObject>(opts.kubeConfig, {
        group: this.group,
        version: poolVersion(this.group),
        plural: POOL_PLURAL,
        namespace: opts.namespace,
      }),
      handler: {
        synced: (items) => {
          this.lists++;
          this.update(items.find((p) => p.metadata?.name === opts.name));
        },
        event: (type, item) => {
          if (item.metadata?.name !== opts.name) return;
          this.update(type === 'DELETED' ? undefined : item);
        },
        failed: (err, phase, retryInMs) => opts.hooks.onError?.(phase, err, retryInMs),
        watchEnded: (reason) => opts.hooks.onWatchEnded?.(reason),
      },
      ...(opts.resyncMs !== undefined ? { resyncMs: opts.resyncMs } : {}),
      ...(opts.maxBackoffMs !== undefined ? { maxBackoffMs: opts.maxBackoffMs } : {}),
    });
  }

  /** True once a LIST has completed. */
  synced(): boolean {
    return this.lists > 0;
  }

  /** What the pool selects now (undefined before the first LIST, or when it selects nothing). */
  current(): PoolMembers | undefined {
    return this.members;
  }

  start(): void {
    this.watcher.start();
  }

  /** Idempotent. */
  close(): Promise<void> {
    return this.watcher.close();
  }

  private update(pool: InferencePoolObject | undefined): void {
    const next = poolMembers(pool, this.group);
    // The first reading always reports, so a missing pool is known as such (not just "not read yet").
    if (this.reported && sameMembers(this.members, next)) return;
    this.reported = true;
    this.members = next;
    this.opts.hooks.onChange(next);
  }
}
