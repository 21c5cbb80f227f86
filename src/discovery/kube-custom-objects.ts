/**
 * The collection of one namespaced custom resource (the Inference Extension's InferencePools and
 * InferenceObjectives), as a KubeListWatch (kube-list-watch.ts) reads it: the path its watch opens and
 * one page of its LIST, through the official client's CustomObjectsApi.
 */
import { CustomObjectsApi, type KubeConfig } from '@kubernetes/client-node';
import type { KubeListWatchOptions, ListPage } from './kube-list-watch.js';

export interface CustomResource {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  readonly namespace: string;
}

export function customObjects<T>(
  kubeConfig: KubeConfig,
  r: CustomResource,
): Pick<KubeListWatchOptions<T>, 'path' | 'list'> {
  const api = kubeConfig.makeApiClient(CustomObjectsApi);
  const { group, version, plural, namespace } = r;
  return {
    path: `/apis/${group}/${version}/namespaces/${encodeURIComponent(namespace)}/${plural}`,
    list: async (page, options): Promise<ListPage<T>> =>
      (await api.listNamespacedCustomObject(
        { group, version, namespace, plural, ...page },
        options,
      )) as ListPage<T>,
  };
}
