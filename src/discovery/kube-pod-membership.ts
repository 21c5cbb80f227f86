/**
 * Kubernetes pod membership: decides from ONE pod object whether it is a worker of a role, and with
 * which registration. Pure (no client, timers, metrics or logging): unit tests feed it recorded API
 * objects, and KubeDiscovery re-evaluates a pod on every event about it.
 *
 * A pod is a worker of a role only while ALL of these hold (the first one that fails is the reason):
 *   1. `selector`     its labels contain every `key=value` of the role's selector (the watch already filters
 *                     server-side; checked again so a relabel seen in any event removes it at once);
 *   2. `terminating`  no `metadata.deletionTimestamp` (graceful deletion started: vLLM is shutting down);
 *   3. `not_running`  `status.phase` is `Running` (Pending pods have no server yet; Succeeded/Failed are gone);
 *   4. `no_ip`        `status.podIP` is set (a Running pod without an IP cannot be dialled);
 *   5. `not_ready`    its `Ready` condition is `True`. The kubelet sets Ready only when every container is
 *                     ready AND every readiness gate (`spec.readinessGates`) is satisfied, so the gates are
 *                     honoured through this one condition; a missing condition counts as not ready;
 *   6. `bad_annotation` every port annotation it carries is a valid port (a typo must not route prefill
 *                     traffic to a wrong bootstrap port: the pod is held out and the reason is logged).
 * These are the reference router's rules (Running + Ready) plus the ones its users' bug reports ask for:
 * readiness changes and selector changes remove a pod (vllm-project/router #279), a terminating pod takes no
 * new requests.
 *
 * Identity: the registry keys workers by (role, url) with url = `http://<podIP>:<port>`. The pod's UID is part
 * of its identity: KubeDiscovery starts a new registration generation when the UID behind a url changes (a pod
 * recreated with the same IP), and when a pod leaves and comes back. So are its containers' restarts
 * (`status.containerStatuses[*].restartCount`): a vLLM container the kubelet restarted in place keeps the
 * pod's UID and IP but lost its KV cache, so it is a new generation too, even when no status write showed
 * it not Ready (the kubelet writes only its latest status; a relist after a watch gap shows only that).
 *
 * Ports: the HTTP port is `--service-discovery-port` for every pod. Optional per-pod annotations (a valid
 * integer 1-65535, else `bad_annotation`) become worker metadata, falling back to the flag when set:
 *   `vllm.ai/bootstrap-port`  -> metadata.bootstrap_port  (prefill bootstrap server: Mooncake / NIXL side channel)
 *   `vllm.ai/metrics-port`    -> metadata.metrics_port    (Prometheus /metrics; vLLM serves it on the HTTP port)
 *   `vllm.ai/kv-events-port`  -> metadata.kv_events_port  (vLLM's ZMQ KV-events publisher)
 * and `vllm.ai/data-parallel-size` (1-256) -> metadata.data_parallel_size (the pod's vLLM serves that many
 * data-parallel ranks behind its one API server; the pool schedules them one by one: worker-pool.ts).
 */
import type { Role } from '../workers/role.js';
import { formatEndpoint } from '../workers/endpoint.js';
import { dataParallelSizeOf, MAX_DATA_PARALLEL_SIZE } from '../workers/data-parallel.js';

export const BOOTSTRAP_PORT_ANNOTATION = 'vllm.ai/bootstrap-port';
export const METRICS_PORT_ANNOTATION = 'vllm.ai/metrics-port';
export const KV_EVENTS_PORT_ANNOTATION = 'vllm.ai/kv-events-port';
export const DATA_PARALLEL_SIZE_ANNOTATION = 'vllm.ai/data-parallel-size';

/** The fields of a v1 Pod this module reads (structurally compatible with client-node's V1Pod). */
export interface PodObject {
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
    deletionTimestamp?: Date | string;
    resourceVersion?: string;
  };
  status?: {
    phase?: string;
    podIP?: string;
    conditions?: Array<{ type: string; status: string }>;
    containerStatuses?: Array<{ restartCount?: number }>;
  };
}

/** `key=value` pairs, all of which must match. */
export type LabelSelector = Readonly<Record<string, string>>;

export interface RoleRule {
  role: Role;
  selector: LabelSelector;
  /** HTTP port of vLLM's OpenAI server in every matching pod. */
  port: number;
  /** Fallbacks when the pod has no annotation (undefined = no metadata). */
  metricsPort?: number;
  kvEventsPort?: number;
}

export type NonMemberReason =
  'selector' | 'terminating' | 'not_running' | 'no_ip' | 'not_ready' | 'bad_annotation' | 'no_uid';

export interface PodWorker {
  readonly role: Role;
  /** `http://<podIP>:<port>` (IPv6 bracketed). */
  readonly url: string;
  /** `<podIP>:<port>` for Envoy's ORIGINAL_DST cluster. */
  readonly endpoint: string;
  readonly uid: string;
  /** Restarts of the pod's containers so far: one more is a restarted vLLM (a new generation). */
  readonly restarts: number;
  readonly metadata: Readonly<Record<string, unknown>>;
}

export type Membership =
  { member: true; worker: PodWorker } | { member: false; reason: NonMemberReason; detail?: string };

/** `namespace/name`: how the API names a pod (a recreated pod may reuse it with a new UID). */
export function podKey(pod: PodObject): string {
  return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
}

/**
 * Parses `--selector` style values: each item `key=value` (or `key==value`), items may also be comma
 * separated. Throws a RangeError naming the bad item. An empty list is an empty selector.
 */
export function parseLabelSelector(items: readonly string[]): LabelSelector {
  const out: Record<string, string> = {};
  for (const item of items.flatMap((s) => s.split(','))) {
    const text = item.trim();
    if (text === '') continue;
    const m = /^([A-Za-z0-9][-A-Za-z0-9_./]*)\s*==?\s*([-A-Za-z0-9_.]*)$/.exec(text);
    if (!m) throw new RangeError(`label selector item "${text}" must look like key=value`);
    const [, key, value] = m as unknown as [string, string, string];
    if (key in out && out[key] !== value)
      throw new RangeError(`label selector gives ${key} two values (${out[key]}, ${value})`);
    out[key] = value;
  }
  return out;
}

/** The selector as the API's `labelSelector` query parameter (`k1=v1,k2=v2`, keys sorted). */
export function formatLabelSelector(selector: LabelSelector): string {
  return Object.keys(selector)
    .sort()
    .map((k) => `${k}=${selector[k]}`)
    .join(',');
}

export function matchesSelector(
  labels: Readonly<Record<string, string>> | undefined,
  selector: LabelSelector,
): boolean {
  for (const [key, value] of Object.entries(selector)) {
    if (labels?.[key] !== value) return false;
  }
  return true;
}

function isReady(pod: PodObject): boolean {
  return pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
}

/** A port annotation: undefined when absent, a number when valid, an error text otherwise. */
function annotationPort(pod: PodObject, name: string): number | undefined | { error: string } {
  const raw = pod.metadata?.annotations?.[name];
  if (raw === undefined) return undefined;
  const text = raw.trim();
  const n = /^\d{1,5}$/.test(text) ? Number(text) : NaN;
  return n >= 1 && n <= 65535 ? n : { error: `${name}=${JSON.stringify(raw)} is not a port` };
}

/** Evaluates the rules above for one pod and one role. */
export function podMembership(pod: PodObject, rule: RoleRule): Membership {
  if (!matchesSelector(pod.metadata?.labels, rule.selector)) return { member: false, reason: 'selector' };
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null)
    return { member: false, reason: 'terminating' };
  if (pod.status?.phase !== 'Running') return { member: false, reason: 'not_running' };
  const ip = pod.status.podIP;
  if (ip === undefined || ip === '') return { member: false, reason: 'no_ip' };
  if (!isReady(pod)) return { member: false, reason: 'not_ready' };
  const uid = pod.metadata?.uid;
  if (uid === undefined || uid === '') return { member: false, reason: 'no_uid' };

  const metadata: Record<string, unknown> = {};
  const ports: Array<[string, string, number | undefined]> = [
    ['bootstrap_port', BOOTSTRAP_PORT_ANNOTATION, undefined],
    ['metrics_port', METRICS_PORT_ANNOTATION, rule.metricsPort],
    ['kv_events_port', KV_EVENTS_PORT_ANNOTATION, rule.kvEventsPort],
  ];
  for (const [key, annotation, fallback] of ports) {
    const port = annotationPort(pod, annotation) ?? fallback;
    if (typeof port === 'object') return { member: false, reason: 'bad_annotation', detail: port.error };
    if (port !== undefined) metadata[key] = port;
  }
  const dpRaw = pod.metadata?.annotations?.[DATA_PARALLEL_SIZE_ANNOTATION];
  if (dpRaw !== undefined) {
    const dp = dataParallelSizeOf({
      data_parallel_size: /^\s*\d{1,3}\s*$/.test(dpRaw) ? Number(dpRaw) : NaN,
    });
    if (dp === undefined) {
      const detail = `${DATA_PARALLEL_SIZE_ANNOTATION}=${JSON.stringify(dpRaw)} is not 1..${MAX_DATA_PARALLEL_SIZE}`;
      return { member: false, reason: 'bad_annotation', detail };
    }
    metadata.data_parallel_size = dp;
  }
  const endpoint = formatEndpoint(ip, rule.port);
  const restarts = (pod.status.containerStatuses ?? []).reduce((n, c) => n + (c.restartCount ?? 0), 0);
  return {
    member: true,
    worker: { role: rule.role, url: `http://${endpoint}`, endpoint, uid, restarts, metadata },
  };
}
