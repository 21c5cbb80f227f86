/**
 * the Kubernetes source must never remove an entry it did not register (docs/deploy-kubernetes.md:
 * "the Kubernetes source only ever removes entries it added"). A static --decode worker registered at start
 * (router.ts staticWorkersStep runs before kubernetes discovery) at the url a pod later gets. And the
 * other way: a member pod whose entry another source took over and then let expire (a ZMQ heartbeat
 * carrying a zmq address starts its own lifetime at the url) is registered again, at the latest by the
 * next relist; it used to stay out of its pool for as long as the pod lived.
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { KubeRoleSource } from '../../../src/discovery/kube-discovery.js';
import type { PodObject, RoleRule } from '../../../src/discovery/kube-pod-membership.js';

const URL = 'http://10.0.0.1:8000';

function pod(uid = 'u1', ready = true): PodObject {
  return {
    metadata: { name: 'a', namespace: 'llm', uid, labels: { app: 'vllm' } },
    status: {
      phase: 'Running',
      podIP: '10.0.0.1',
      conditions: [{ type: 'Ready', status: ready ? 'True' : 'False' }],
    },
  };
}

function setup(rule: RoleRule): { registry: ServiceRegistry; source: KubeRoleSource; staticGen: number } {
  const registry = new ServiceRegistry();
  const r = registry.register({ role: 'decode', url: URL, endpoint: '10.0.0.1:8000', permanent: true });
  if ('rejected' in r) throw new Error('unexpected');
  const source = new KubeRoleSource(rule, registry, pino({ level: 'silent' }), {});
  return { registry, source, staticGen: r.entry.generation };
}

describe('a static worker at a pod url', () => {
  it('survives the pod being deleted', () => {
    const { registry, source, staticGen } = setup({ role: 'decode', selector: { app: 'vllm' }, port: 8000 });
    source.synced([pod()]);
    source.event('DELETED', pod());
    expect(registry.get('decode', URL)?.generation).toBe(staticGen);
  });

  it('survives the pod turning unready', () => {
    const { registry, source, staticGen } = setup({ role: 'decode', selector: { app: 'vllm' }, port: 8000 });
    source.synced([pod()]);
    source.event('MODIFIED', pod('u1', false));
    expect(registry.get('decode', URL)?.generation).toBe(staticGen);
  });

  it('is not replaced nor removed when the pod carries metadata (--service-discovery-metrics-port)', () => {
    const { registry, source, staticGen } = setup({
      role: 'decode',
      selector: { app: 'vllm' },
      port: 8000,
      metricsPort: 9000,
    });
    source.synced([pod()]);
    source.synced([]);
    expect(registry.get('decode', URL)?.generation).toBe(staticGen);
  });
});

describe('a ZMQ heartbeat at a pod url', () => {
  it('the pod is back in its pool at the next relist once the heartbeats stop (it is still Ready)', () => {
    let now = 0;
    const registry = new ServiceRegistry({ clock: () => now });
    const source = new KubeRoleSource(
      { role: 'decode', selector: { app: 'vllm' }, port: 8000 },
      registry,
      pino({ level: 'silent' }),
      {},
    );
    source.synced([pod()]);
    expect(registry.get('decode', URL)?.permanent).toBe(true);
    // vLLM's P2P NCCL connector heartbeats the same url with its zmq address: a new lifetime, theirs.
    registry.register({ role: 'decode', url: URL, endpoint: '10.0.0.1:8000', zmqAddress: '10.0.0.1:21001' });
    // The heartbeats stop (the proxy address changed); the pod stays Running and Ready.
    now += registry.ttlMs + 1;
    registry.cleanup();
    expect(registry.get('decode', URL)).toBeUndefined();
    source.synced([pod()]); // the periodic relist
    expect(registry.get('decode', URL)).toMatchObject({ endpoint: '10.0.0.1:8000', permanent: true });
    expect(source.memberCount).toBe(1);
  });

  it('a pod whose url a live heartbeat holds joins at the next relist after the heartbeats stop', () => {
    let now = 0;
    const registry = new ServiceRegistry({ clock: () => now });
    const source = new KubeRoleSource(
      { role: 'decode', selector: { app: 'vllm' }, port: 8000 },
      registry,
      pino({ level: 'silent' }),
      {},
    );
    registry.register({ role: 'decode', url: URL, endpoint: '10.0.0.1:8000', zmqAddress: '10.0.0.1:21001' });
    source.synced([pod()]);
    expect(source.memberCount).toBe(0); // url_taken
    now += registry.ttlMs + 1;
    registry.cleanup();
    source.synced([pod()]);
    expect(registry.get('decode', URL)?.permanent).toBe(true);
  });
});
