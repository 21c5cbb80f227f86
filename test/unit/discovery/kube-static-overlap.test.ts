/**
 * the Kubernetes source must never remove an entry it did not register (docs/deploy-kubernetes.md:
 * "the Kubernetes source only ever removes entries it added"). A static --decode worker registered at start
 * (router.ts staticWorkersStep runs before kubernetes discovery) at the url a pod later gets. And the
 * other way: a member pod whose entry another source took over and then let expire (a ZMQ heartbeat
 * carrying a zmq address starts its own lifetime at the url) is registered again as soon as that entry
 * goes (the source follows the registry's change notifications); it used to stay out of its pool for as
 * long as the pod lived, then until the next relist (5 minutes).
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
  it('the pod is back in its pool as soon as the expired heartbeat entry is removed (it is still Ready)', () => {
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
    expect(source.memberCount).toBe(0); // held out while the heartbeats hold the url
    // The heartbeats stop (the proxy address changed); the pod stays Running and Ready.
    now += registry.ttlMs + 1;
    registry.cleanup(); // the janitor's pass: no pod event, no relist (it used to wait for one)
    expect(registry.get('decode', URL)).toMatchObject({ endpoint: '10.0.0.1:8000', permanent: true });
    expect(registry.get('decode', URL)?.zmqAddress).toBeUndefined();
    expect(source.memberCount).toBe(1);
  });

  it('a pod whose url a live heartbeat holds joins as soon as the heartbeats stop (no relist)', () => {
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
    expect(registry.get('decode', URL)?.permanent).toBe(true);
    expect(source.memberCount).toBe(1);
  });
});

describe('a pod held out by another source', () => {
  const rule: RoleRule = { role: 'decode', selector: { app: 'vllm' }, port: 8000 };
  const harness = () => {
    let now = 0;
    const registry = new ServiceRegistry({ clock: () => now });
    const source = new KubeRoleSource(rule, registry, pino({ level: 'silent' }), {});
    return { registry, source, advance: (ms: number) => (now += ms) };
  };

  it('a static worker held its url: the pod joins when an admin DELETE removes it', () => {
    const { registry, source } = setup(rule);
    source.synced([pod()]);
    expect(source.memberCount).toBe(0);
    registry.deregister('decode', URL);
    expect(registry.get('decode', URL)).toMatchObject({ permanent: true, sourceOwned: true });
    expect(source.memberCount).toBe(1);
    // Deleting the pod removes only what the source registered.
    source.event('DELETED', pod());
    expect(registry.get('decode', URL)).toBeUndefined();
  });

  it('after clear() (close) the source no longer follows the registry', () => {
    const { registry, source, advance } = harness();
    registry.register({ role: 'decode', url: URL, endpoint: '10.0.0.1:8000', zmqAddress: '10.0.0.1:21001' });
    source.synced([pod()]);
    source.clear();
    advance(registry.ttlMs + 1);
    registry.cleanup();
    expect(registry.get('decode', URL)).toBeUndefined();
  });
});
