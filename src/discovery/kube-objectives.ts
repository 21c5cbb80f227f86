/**
 * KubeObjectives: the Gateway API Inference Extension's InferenceObjective resources
 * (`inference.networking.x-k8s.io/v1alpha2`, `inferenceobjectives`) of one InferencePool, watched in the
 * pool's namespace, as the endpoint picker reads them: an objective counts when its `spec.poolRef`
 * names the pool (`name`, and `group` `inference.networking.k8s.io`, the default); its priority is
 * `spec.priority`, 0 when unset. The router's objective table (routing/objectives.ts) takes the whole
 * set on every change, over the `--objective` flags.
 *
 * A KubeListWatch (kube-list-watch.ts): LIST, then WATCH, relisting on every reconnect, so an objective
 * deleted while no watch ran is dropped at the next list.
 */
import type { KubeConfig } from '@kubernetes/client-node';
import { KubeListWatch, type WatchEndReason } from './kube-list-watch.js';
import { customObjects } from './kube-custom-objects.js';

export const OBJECTIVE_GROUP = 'inference.networking.x-k8s.io';
export const OBJECTIVE_VERSION = 'v1alpha2';
export const OBJECTIVE_PLURAL = 'inferenceobjectives';
/** The InferencePool's API group, poolRef.group's default. */
export const POOL_GROUP = 'inference.networking.k8s.io';

/** What the router reads of an InferenceObjective. */
export interface InferenceObjectiveObject {
  readonly metadata?: { readonly name?: string };
  readonly spec?: {
    readonly priority?: unknown;
    readonly poolRef?: { readonly name?: unknown; readonly group?: unknown; readonly kind?: unknown };
  };
}

/**
 * The objective's name and priority when it belongs to `pool`, else undefined (another pool's, or not
 * an objective the router can read: no name, a non-integer priority). Pure.
 */
export function objectiveOf(
  obj: InferenceObjectiveObject,
  pool: string,
  poolGroup: string = POOL_GROUP,
): { name: string; priority: number } | undefined {
  const name = obj.metadata?.name;
  const ref = obj.spec?.poolRef;
  if (typeof name !== 'string' || name === '' || ref?.name !== pool) return undefined;
  if ((ref.group ?? POOL_GROUP) !== poolGroup || (ref.kind ?? 'InferencePool') !== 'InferencePool') {
    return undefined;
  }
  const p = obj.spec?.priority;
  if (p === undefined || p === null) return { name, priority: 0 };
  return typeof p === 'number' && Number.isSafeInteger(p) ? { name, priority: p } : undefined;
}

export interface KubeObjectivesHooks {
  /** The pool's objectives changed: the whole set, name -> priority. */
  onChange?(objectives: ReadonlyMap<string, number>): void;
  /** A LIST completed (the first one, then every relist). */
  onSynced?(count: number): void;
  onError?(phase: 'list' | 'watch', err: unknown, retryInMs: number): void;
  onWatchEnded?(reason: WatchEndReason): void;
}

export interface KubeObjectivesOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The InferencePool whose objectives apply. */
  pool: string;
  /** The pool's API group (poolRef.group; default `inference.networking.k8s.io`). */
  poolGroup?: string;
  hooks: KubeObjectivesHooks;
  resyncMs?: number;
  maxBackoffMs?: number;
}

export class KubeObjectives {
  private readonly byName = new Map<string, number>();
  private readonly watcher: KubeListWatch<InferenceObjectiveObject>;
  private lists = 0;

  constructor(private readonly opts: KubeObjectivesOptions) {
    const { hooks } = opts;
    this.watcher = new KubeListWatch<InferenceObjectiveObject>({
      kubeConfig: opts.kubeConfig,
      ...customObjects<InferenceObjectiveObject>(opts.kubeConfig, {
        group: OBJECTIVE_GROUP,
        version: OBJECTIVE_VERSION,
        plural: OBJECTIVE_PLURAL,
        namespace: opts.namespace,
      }),
      handler: {
        synced: (items) => {
          this.lists++;
          this.byName.clear();
          for (const item of items) this.apply('ADDED', item);
          hooks.onSynced?.(this.byName.size);
          hooks.onChange?.(new Map(this.byName));
        },
        event: (type, item) => {
          if (this.apply(type, item)) hooks.onChange?.(new Map(this.byName));
        },
        failed: (err, phase, retryInMs) => hooks.onError?.(phase, err, retryInMs),
        watchEnded: (reason) => hooks.onWatchEnded?.(reason),
      },
      ...(opts.resyncMs !== undefined ? { resyncMs: opts.resyncMs } : {}),
      ...(opts.maxBackoffMs !== undefined ? { maxBackoffMs: opts.maxBackoffMs } : {}),
    });
  }

  /** True once a LIST has completed. */
  synced(): boolean {
    return this.lists > 0;
  }

  start(): void {
    this.watcher.start();
  }

  /** Idempotent. */
  close(): Promise<void> {
    return this.watcher.close();
  }

  /** Applies one object; true when the set changed. */
  private apply(type: 'ADDED' | 'MODIFIED' | 'DELETED', item: InferenceObjectiveObject): boolean {
    const name = item.metadata?.name;
    if (typeof name !== 'string') return false;
    const had = this.byName.get(name);
    // A modified objective may have left the pool (a new poolRef): then it is dropped, as a deleted one.
    const objective = type === 'DELETED' ? undefined : objectiveOf(item, this.opts.pool, this.opts.poolGroup);
    if (objective === undefined) return this.byName.delete(name);
    this.byName.set(name, objective.priority);
    return had !== objective.priority;
  }
}
