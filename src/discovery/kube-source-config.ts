/**
 * From the router's configuration to KubeDiscovery's inputs: which role rules (regular mode: `--selector`;
 * pd mode: `--prefill-selector` and `--decode-selector`) and which client configuration (an explicit
 * kubeconfig file, else the client's default chain: $KUBECONFIG, ~/.kube/config, then the in-cluster
 * service account token and CA). With `--inference-pool NAME`, the role the pool serves (regular
 * workers; in P/D mode the decode workers, where the gateway sends requests) takes its pods and port
 * from that InferencePool when its selector flag is not given.
 */
import { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config.js';
import type { Logger } from 'pino';
import type { Role } from '../workers/role.js';
import { parseLabelSelector, type RoleRule } from './kube-pod-membership.js';
import { KubeDiscovery, type KubeDiscoveryHooks } from './kube-discovery.js';
import { KubeObjectives, type KubeObjectivesHooks } from './kube-objectives.js';
import type { ServiceRegistry } from './service-registry.js';

type KubeSettings = Pick<
  Config,
  | 'mode'
  | 'inferencePool'
  | 'selector'
  | 'prefillSelector'
  | 'decodeSelector'
  | 'serviceDiscoveryPort'
  | 'serviceDiscoveryMetricsPort'
  | 'serviceDiscoveryKvEventsPort'
>;

export function kubeRoleRules(c: KubeSettings): RoleRule[] {
  const common = {
    port: c.serviceDiscoveryPort,
    ...(c.serviceDiscoveryMetricsPort > 0 ? { metricsPort: c.serviceDiscoveryMetricsPort } : {}),
    ...(c.serviceDiscoveryKvEventsPort > 0 ? { kvEventsPort: c.serviceDiscoveryKvEventsPort } : {}),
  };
  const rules: RoleRule[] =
    c.mode === 'pd'
      ? [
          { role: 'prefill', selector: parseLabelSelector(c.prefillSelector), ...common },
          { role: 'decode', selector: parseLabelSelector(c.decodeSelector), ...common },
        ]
      : [{ role: 'regular', selector: parseLabelSelector(c.selector), ...common }];
  const fromPool = poolRole(c);
  return rules.filter((r) => r.role !== fromPool);
}

/** The role whose pods the InferencePool names (its selector flag left empty), or undefined. */
export function poolRole(
  c: Pick<Config, 'mode' | 'inferencePool' | 'selector' | 'decodeSelector'>,
): Role | undefined {
  if (!c.inferencePool) return undefined;
  if (c.mode === 'pd') return c.decodeSelector.length === 0 ? 'decode' : undefined;
  return c.selector.length === 0 ? 'regular' : undefined;
}

/** The namespace of the InferencePool and its objectives: the flag's, the kubeconfig context's, else `default`. */
export function kubeNamespace(
  config: Pick<Config, 'serviceDiscoveryNamespace'>,
  kubeConfig: KubeConfig,
): string {
  return (
    config.serviceDiscoveryNamespace ||
    kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ||
    'default'
  );
}

export function loadKubeConfig(file: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return kc;
}

/**
 * The router's Kubernetes source (undefined when --service-discovery is off), not started. Registry events
 * are counted in `vllm_router_discovery_updates_total` as `registered` / `deregistered`, failed lists and
 * watches through `countError`.
 */
export function createKubeDiscovery(
  config: Readonly<Config>,
  deps: {
    registry: ServiceRegistry;
    logger: Logger;
    count: (role: string, event: string) => void;
    /** A LIST or WATCH failed (vllm_router_kube_watch_errors_total). */
    countError?: (resource: string, phase: string, err: unknown) => void;
    hooks?: KubeDiscoveryHooks;
  },
): KubeDiscovery | undefined {
  if (!config.serviceDiscovery) return undefined;
  const hooks = deps.hooks ?? {};
  const kubeConfig = loadKubeConfig(config.serviceDiscoveryKubeconfig);
  const role = poolRole(config);
  const fallbacks = {
    ...(config.serviceDiscoveryMetricsPort > 0 ? { metricsPort: config.serviceDiscoveryMetricsPort } : {}),
    ...(config.serviceDiscoveryKvEventsPort > 0 ? { kvEventsPort: config.serviceDiscoveryKvEventsPort } : {}),
  };
  return new KubeDiscovery({
    kubeConfig,
    ...(config.serviceDiscoveryNamespace ? { namespace: config.serviceDiscoveryNamespace } : {}),
    rules: kubeRoleRules(config),
    ...(role !== undefined
      ? {
          pool: {
            name: config.inferencePool,
            group: config.inferencePoolGroup,
            namespace: kubeNamespace(config, kubeConfig),
            role,
            rule: fallbacks,
          },
        }
      : {}),
    registry: deps.registry,
    logger: deps.logger,
    resyncMs: config.serviceDiscoveryResyncMs,
    hooks: {
      ...hooks,
      onChange: (change) => {
        deps.count(change.role, change.type === 'added' ? 'registered' : 'deregistered');
        hooks.onChange?.(change);
      },
      onError: (role, phase, err, resource) => {
        deps.countError?.(resource, phase, err);
        hooks.onError?.(role, phase, err, resource);
      },
    },
  });
}

/**
 * The InferenceObjective watch of --inference-pool, not started: in --service-discovery-namespace, else
 * the namespace of the kubeconfig's context (in a pod: the service account's), else `default`.
 */
export function createKubeObjectives(config: Readonly<Config>, hooks: KubeObjectivesHooks): KubeObjectives {
  const kubeConfig = loadKubeConfig(config.serviceDiscoveryKubeconfig);
  const namespace = kubeNamespace(config, kubeConfig);
  return new KubeObjectives({
    kubeConfig,
    namespace,
    pool: config.inferencePool,
    poolGroup: config.inferencePoolGroup,
    hooks,
    resyncMs: config.serviceDiscoveryResyncMs,
  });
}
