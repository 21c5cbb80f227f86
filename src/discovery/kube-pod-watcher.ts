/**
 * KubePodWatcher: keeps an exact view of the pods matching one label selector (in one namespace or all):
 * a KubeListWatch (kube-list-watch.ts: LIST, then WATCH, relisting on every reconnect) over pods.
 */
import { CoreV1Api, type KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { KubeListWatch, type ListWatchHandler, type WatchEventType } from './kube-list-watch.js';

export { DEFAULT_KUBE_RESYNC_MS, type WatchEndReason } from './kube-list-watch.js';
export type PodWatchEventType = WatchEventType;
export type PodWatchHandler = ListWatchHandler<V1Pod>;

export interface KubePodWatcherOptions {
  kubeConfig: KubeConfig;
  /** Undefined = all namespaces (needs a ClusterRole). */
  namespace?: string;
  /** API `labelSelector` text, e.g. `app=vllm,role=prefill` ('' = every pod). */
  labelSelector: string;
  handler: PodWatchHandler;
  /** Client-side bound of one watch, then a full relist. Default 300_000 ms. */
  resyncMs?: number;
  /** Backoff bounds. Defaults 250 ms and 5000 ms. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Page size of a LIST. Default 500. */
  pageSize?: number;
}

export class KubePodWatcher extends KubeListWatch<V1Pod> {
  constructor(opts: KubePodWatcherOptions) {
    const api = opts.kubeConfig.makeApiClient(CoreV1Api);
    const ns = opts.namespace;
    super({
      ...opts,
      path: ns === undefined ? '/api/v1/pods' : `/api/v1/namespaces/${encodeURIComponent(ns)}/pods`,
      list: (page, options) =>
        ns === undefined
          ? api.listPodForAllNamespaces(page, options)
          : api.listNamespacedPod({ namespace: ns, ...page }, options),
    });
  }
}
