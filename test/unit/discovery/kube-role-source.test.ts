/**
 * KubeRoleSource: pod events and relists -> registry entries and generations, with a real ServiceRegistry
 * and pod objects in the API's shape (no API server: the watcher's part is covered by the integration test).
 */
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { KubeRoleSource, type KubeMembershipChange } from '../../../src/discovery/kube-discovery.js';
import type { PodObject, RoleRule } from '../../../src/discovery/kube-pod-membership.js';

const RULE: RoleRule = { role: 'decode', selector: { app: 'vllm' }, port: 8000 };

function pod(
  name: string,
  ip: string,
  opts: {
    uid?: string;
    ready?: boolean;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  } = {},
): PodObject {
  return {
    metadata: {
      name,
      namespace: 'llm',
      uid: opts.uid ?? `uid-${name}`,
      labels: opts.labels ?? { app: 'vllm' },
      ...(opts.annotations ? { annotations: opts.annotations } : {}),
    },
    status: {
      phase: 'Running',
      podIP: ip,
      conditions: [{ type: 'Ready', status: opts.ready === false ? 'False' : 'True' }],
    },
  };
}

function setup(): { registry: ServiceRegistry; source: KubeRoleSource; changes: KubeMembershipChange[] } {
  const registry = new ServiceRegistry();
  const changes: KubeMembershipChange[] = [];
  const source = new KubeRoleSource(RULE, registry, pino({ level: 'silent' }), {
    onChange: (c) => changes.push(c),
  });
  return { registry, source, changes };
}

const urls = (registry: ServiceRegistry): string[] => registry.snapshot('decode').map((e) => e.url);

describe('KubeRoleSource', () => {
  it('a list registers the member pods only, as permanent entries this source owns', () => {
    const { registry, source } = setup();
    source.synced([pod('a', '10.0.0.1'), pod('b', '10.0.0.2', { ready: false }), pod('c', '10.0.0.3')]);
    expect(urls(registry)).toEqual(['http://10.0.0.1:8000', 'http://10.0.0.3:8000']);
    expect(registry.get('decode', 'http://10.0.0.1:8000')).toMatchObject({
      endpoint: '10.0.0.1:8000',
      permanent: true,
    });
    expect(source.memberCount).toBe(2);
  });

  it('Ready=False removes at once; Ready again is a fresh generation', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1')]);
    const first = registry.get('decode', 'http://10.0.0.1:8000')!.generation;
    source.event('MODIFIED', pod('a', '10.0.0.1', { ready: false }));
    expect(urls(registry)).toEqual([]);
    expect(changes.at(-1)).toMatchObject({ type: 'removed', reason: 'not_ready', generation: first });
    source.event('MODIFIED', pod('a', '10.0.0.1'));
    expect(registry.get('decode', 'http://10.0.0.1:8000')!.generation).toBeGreaterThan(first);
  });

  it('an unchanged pod update (status heartbeat) keeps the generation', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1')]);
    const first = registry.get('decode', 'http://10.0.0.1:8000')!.generation;
    source.event('MODIFIED', pod('a', '10.0.0.1'));
    source.synced([pod('a', '10.0.0.1')]);
    expect(registry.get('decode', 'http://10.0.0.1:8000')!.generation).toBe(first);
    expect(changes.map((c) => c.type)).toEqual(['added']);
  });

  it('same name and IP with a new UID (recreated) is a new generation', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1', { uid: 'u1' })]);
    const first = registry.get('decode', 'http://10.0.0.1:8000')!.generation;
    // Seen only through a relist (the DELETED + ADDED pair was missed).
    source.synced([pod('a', '10.0.0.1', { uid: 'u2' })]);
    const entry = registry.get('decode', 'http://10.0.0.1:8000')!;
    expect(entry.generation).toBeGreaterThan(first);
    expect(changes.map((c) => [c.type, c.uid])).toEqual([
      ['added', 'u1'],
      ['removed', 'u1'],
      ['added', 'u2'],
    ]);
  });

  it('a relist without a pod removes it (deleted while no watch ran)', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1'), pod('b', '10.0.0.2')]);
    source.synced([pod('b', '10.0.0.2')]);
    expect(urls(registry)).toEqual(['http://10.0.0.2:8000']);
    expect(changes.at(-1)).toMatchObject({ type: 'removed', pod: 'llm/a', reason: 'deleted' });
  });

  it('DELETED of a pod relabelled out of the selector reports reason selector', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1')]);
    source.event('DELETED', pod('a', '10.0.0.1', { labels: { app: 'other' } }));
    expect(urls(registry)).toEqual([]);
    expect(changes.at(-1)).toMatchObject({ type: 'removed', reason: 'selector' });
  });

  it('keeps nothing of pods relabelled out of the selector (their later deletion is never seen)', () => {
    const { source } = setup();
    for (let i = 0; i < 50; i++) {
      source.event('ADDED', pod(`p${i}`, `10.0.1.${i}`));
      // Taken out of service by relabelling: the watch's last word on the pod.
      source.event('DELETED', pod(`p${i}`, `10.0.1.${i}`, { labels: { app: 'quarantined' } }));
    }
    expect(source.memberCount).toBe(0);
    const reasons = (source as unknown as { lastReason: ReadonlyMap<string, string> }).lastReason;
    expect(reasons.size).toBe(0);
  });

  it('a changed port annotation is a new generation with the new metadata', () => {
    const { registry, source } = setup();
    source.synced([pod('a', '10.0.0.1', { annotations: { 'vllm.ai/bootstrap-port': '8998' } })]);
    const first = registry.get('decode', 'http://10.0.0.1:8000')!;
    source.event('MODIFIED', pod('a', '10.0.0.1', { annotations: { 'vllm.ai/bootstrap-port': '8999' } }));
    const second = registry.get('decode', 'http://10.0.0.1:8000')!;
    expect(first.metadata).toEqual({ bootstrap_port: 8998 });
    expect(second.metadata).toEqual({ bootstrap_port: 8999 });
    expect(second.generation).toBeGreaterThan(first.generation);
  });

  it('two pods at one url: the first keeps it, the second takes over when it leaves', () => {
    const { registry, source } = setup();
    source.event('ADDED', pod('old', '10.0.0.1'));
    const first = registry.get('decode', 'http://10.0.0.1:8000')!.generation;
    source.event('ADDED', pod('new', '10.0.0.1'));
    expect(source.memberCount).toBe(1);
    source.event('DELETED', pod('old', '10.0.0.1'));
    const entry = registry.get('decode', 'http://10.0.0.1:8000')!;
    expect(entry.generation).toBeGreaterThan(first);
    expect(source.memberCount).toBe(1);
  });

  it('never deregisters an entry it did not register (a static worker at the same url)', () => {
    const { registry, source } = setup();
    source.synced([pod('a', '10.0.0.1')]);
    registry.deregister('decode', 'http://10.0.0.1:8000');
    registry.register({
      role: 'decode',
      url: 'http://10.0.0.1:8000',
      endpoint: '10.0.0.1:8000',
      permanent: true,
    });
    source.event('DELETED', pod('a', '10.0.0.1'));
    expect(urls(registry)).toEqual(['http://10.0.0.1:8000']);
  });

  it('clear() removes everything it registered', () => {
    const { registry, source, changes } = setup();
    source.synced([pod('a', '10.0.0.1'), pod('b', '10.0.0.2')]);
    source.clear();
    expect(urls(registry)).toEqual([]);
    expect(changes.filter((c) => c.type === 'removed').map((c) => 'reason' in c && c.reason)).toEqual([
      'closed',
      'closed',
    ]);
  });
});
