/**
 * Policy factory: one fresh Policy instance per call (each pool owns its own, so round-robin
 * cursors, hash rings and cache trees are never shared between roles).
 */
import { CacheAwarePolicy, type CacheAwareDeps, type CacheAwareOptions } from './cache-aware.js';
import { ConsistentHashPolicy } from './consistent-hash.js';
import { KvAwarePolicy, type ExactPrefixSource } from './kv-aware.js';
import { LeastLoadPolicy } from './least-load.js';
import type { Policy, PolicyName } from './policy.js';
import { PowerOfTwoPolicy } from './power-of-two.js';
import { RandomPolicy, type Rng } from './random.js';
import { RoundRobinPolicy } from './round-robin.js';

export interface CreatePolicyOptions {
  /** cache_aware settings over DEFAULT_CACHE_AWARE_OPTIONS. */
  cacheAware?: Partial<CacheAwareOptions>;
  /** kv_aware: the exact prefix source (KV events); absent = always the approximate fallback. */
  exactPrefix?: ExactPrefixSource;
  /** kv_aware: a routed request was not answered exactly (why). */
  onExactFallback?: (reason: string) => void;
  /** cache_aware cost mode: the pool's role, load/timing signals, exact prefix sources. */
  cacheAwareDeps?: CacheAwareDeps;
  /** random / power_of_two: a uniform source in [0, 1) (default Math.random). */
  rng?: () => number;
}

export function createPolicy(name: PolicyName, options: CreatePolicyOptions = {}): Policy {
  const rng: Rng = options.rng ?? Math.random;
  switch (name) {
    case 'round_robin':
      return new RoundRobinPolicy();
    case 'random':
      return new RandomPolicy(rng);
    case 'power_of_two':
      return new PowerOfTwoPolicy(rng);
    case 'least_load':
      return new LeastLoadPolicy();
    case 'consistent_hash':
      return new ConsistentHashPolicy();
    case 'cache_aware':
      return new CacheAwarePolicy(options.cacheAware, options.cacheAwareDeps);
    case 'kv_aware': {
      const deps = options.cacheAwareDeps;
      return new KvAwarePolicy({
        ...(options.cacheAware !== undefined ? { cacheAware: options.cacheAware } : {}),
        ...(options.exactPrefix !== undefined ? { exact: options.exactPrefix } : {}),
        ...(options.onExactFallback !== undefined ? { onFallback: options.onExactFallback } : {}),
        ...(deps?.signals?.foreignShare !== undefined ? { foreignShare: deps.signals.foreignShare } : {}),
        ...(deps?.charsPerToken !== undefined ? { charsPerToken: deps.charsPerToken } : {}),
        // The fallback reads what the pool's cache_aware would (not its exact sources: kv-aware.ts).
        ...(deps !== undefined
          ? {
              fallbackDeps: {
                ...(deps.role !== undefined ? { role: deps.role } : {}),
                ...(deps.signals !== undefined ? { signals: deps.signals } : {}),
                ...(deps.capacityTokens !== undefined ? { capacityTokens: deps.capacityTokens } : {}),
              },
            }
          : {}),
      });
    }
    default: {
      const unknown: never = name;
      throw new RangeError(`unknown policy: ${String(unknown)}`);
    }
  }
}
