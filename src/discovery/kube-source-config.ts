/**
 * From the router's configuration to KubeDiscovery's inputs: which role rules (regular mode: `--selector`;
 * pd mode: `--prefill-selector` and `--decode-selector`) and which client configuration (an explicit
 * kubeconfig file, else the client's default chain: $KUBECONFIG, ~/.kube/config, then the in-cluster
 * service account token and CA).
 */
import { KubeConfig } from '@kubernetes/client-node';
import type { Config } from '../config.js';
import type { Logger } from 'pino';
import { parseLabelSelector, type RoleRule } from './kube-pod-membership.js';
import { KubeDiscovery, type KubeDiscoveryHooks } from './kube-discovery.js';
import { KubeObjectives, type KubeObjectivesHooks } from './kube-objectives.js';
import type { ServiceRegistry } from './service-registry.js';

type KubeSettings = Pick<
  Config,
  | 'mode'
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
  if (c.mode === 'pd') {
    return [
      { role: 'prefill', selector: parseLabelSelector(c.prefillSelector), ...common },
      { role: 'decode', selector: parseLabelSelector(c.decodeSelector), ...common },
    ];
  }
  return [{ role: 'regular', selector: parseLabelSelector(c.selector), ...common }];
}

export function loadKubeConfig(file: string): KubeConfig {
  const kc = new KubeConfig();
  if (file) kc.loadFromFile(file);
  else kc.loadFromDefault();
  return kc;
}

/**
 * The router's Kubernetes source (undefined when --service-discovery is off), not started. Registry events
 * are counted in `vllm_router_discovery_updates_total` as `registered` / `deregistered`.
 */
export function createKubeDiscovery(
  config: Readonly<Config>,
  deps: {
    registry: ServiceRegistry;
    logger: Logger;
    count: (role: string, event: string) => void;
    hooks?: KubeDiscoveryHooks;
  },
): KubeDiscovery | undefined {
  if (!config.serviceDiscovery) return undefined;
  const hooks = deps.hooks ?? {};
  return new KubeDiscovery({
    kubeConfig: loadKubeConfig(config.serviceDiscoveryKubeconfig),
    ...(config.serviceDiscoveryNamespace ? { namespace: config.serviceDiscoveryNamespace } : {}),
    rules: kubeRoleRules(config),
    registry: deps.registry,
    logger: deps.logger,
    resyncMs: config.serviceDiscoveryResyncMs,
    hooks: {
      ...hooks,
      onChange: (change) => {
        deps.count(change.role, change.type === 'added' ? 'registered' : 'deregistered');
        hooks.onChange?.(change);
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
  const namespace =
    config.serviceDiscoveryNamespace ||
    kubeConfig.getContextObject(kubeConfig.getCurrentContext())?.namespace ||
    'default';
  return new KubeObjectives({
    kubeConfig,
    namespace,
    pool: config.inferencePool,
    hooks,
    resyncMs: config.serviceDiscoveryResyncMs,
  });
}
