/**
 * Why a Kubernetes LIST or WATCH failed, as the label of `vllm_router_kube_watch_errors_total`: the
 * apiserver's HTTP status in a few classes an operator acts on (a 403 is missing RBAC, a 404 a CRD not
 * installed or a group/version the cluster does not serve, a 401 an expired token), `unreachable` when
 * there was no answer at all (connection refused or reset, TLS, timeout). Pure.
 */
export type KubeErrorReason =
  | 'unauthorized'
  | 'forbidden'
  | 'not_found'
  | 'gone'
  | 'too_many_requests'
  | 'client_error'
  | 'server_error'
  | 'unreachable';

export function kubeErrorReason(err: unknown): KubeErrorReason {
  const e = err as { code?: unknown; statusCode?: unknown } | undefined;
  const status = typeof e?.statusCode === 'number' ? e.statusCode : e?.code;
  if (typeof status !== 'number' || status < 400) return 'unreachable';
  switch (status) {
    case 401:
      return 'unauthorized';
    case 403:
      return 'forbidden';
    case 404:
      return 'not_found';
    case 410:
      return 'gone';
    case 429:
      return 'too_many_requests';
  }
  return status < 500 ? 'client_error' : 'server_error';
}
