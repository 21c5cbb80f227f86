/**
 * Kubernetes discovery against a REAL kube-apiserver + etcd on loopback (test/support/kube-cluster.ts; no
 * kubelet: the test writes pod status itself). The discovery runs with the token of a ServiceAccount bound
 * by deploy/kubernetes/rbac.yaml, so the manifest's permissions are what it actually gets.
 * Every wait is on an event KubeDiscovery reports (EventLog), never a sleep.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { KubeDiscovery, type KubeMembershipChange } from '../../../src/discovery/kube-discovery.js';
import type { RoleRule } from '../../../src/discovery/kube-pod-membership.js';
import { PodControl, startKubeCluster, type KubeCluster } from '../../support/kube-cluster.js';
import { TcpCutter } from '../../support/tcp-cutter.js';
import { EventLog } from '../../support/event-log.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { createPolicy } from '../../../src/routing/create-policy.js';

type Seen =
  KubeMembershipChange | { type: 'synced'; pods: number } | { type: 'error'; phase: string; status?: number };

const RUNNING_READY = { phase: 'Running', ready: true } as const;
const RULE: RoleRule = { role: 'decode', selector: { app: 'vllm', 'vllm.ai/role': 'decode' }, port: 8000 };
const LABELS = { app: 'vllm', 'vllm.ai/role': 'decode' };

let cluster: KubeCluster;
let nsCounter = 0;

beforeAll(async () => {
  cluster = await startKubeCluster();
}, 180_000);

afterAll(async () => {
  await cluster?.close();
}, 60_000);

interface Harness {
  pods: PodControl;
  registry: ServiceRegistry;
  log: EventLog<Seen>;
  discovery: KubeDiscovery;
  close(): Promise<void>;
}

/** A namespace with the RBAC of deploy/kubernetes/rbac.yaml, and a discovery using its ServiceAccount. */
async function harness(opts: { serverUrl?: string; rule?: RoleRule } = {}): Promise<Harness> {
  const namespace = `t${++nsCounter}-${process.pid}`;
  const pods = new PodControl(cluster.core, namespace);
  await pods.createNamespace();
  await cluster.applyManifest('rbac.yaml', namespace);
  const token = await cluster.serviceAccountToken(namespace, 'vllm-extproc-router');
  const registry = new ServiceRegistry();
  const log = new EventLog<Seen>();
  const discovery = new KubeDiscovery({
    kubeConfig: cluster.kubeConfig({ token, serverUrl: opts.serverUrl }),
    namespace,
    rules: [opts.rule ?? RULE],
    registry,
    logger: pino({ level: process.env.ROUTER_TEST_LOG ?? 'silent' }),
    maxBackoffMs: 500,
    hooks: {
      onChange: log.push,
      onSynced: (_role, n) => log.push({ type: 'synced', pods: n }),
      onError: (_role, phase, err) =>
        log.push({ type: 'error', phase, status: (err as { code?: number }).code }),
    },
  });
  discovery.start();
  await log.next((e) => e.type === 'synced', { what: 'first list' });
  return { pods, registry, log, discovery, close: () => discovery.close() };
}

const added = (pod: string) => (e: Seen) => e.type === 'added' && e.pod.endsWith(`/${pod}`);
const removed = (pod: string) => (e: Seen) => e.type === 'removed' && e.pod.endsWith(`/${pod}`);
const urls = (registry: ServiceRegistry): string[] => registry.snapshot('decode').map((e) => e.url);

describe('Kubernetes discovery (real kube-apiserver)', () => {
  it('a pod joins only once Running with an IP and Ready; Ready=False removes it; Ready again is a new generation', async () => {
    const h = await harness();
    try {
      await h.pods.create('vllm-0', LABELS);
      await h.pods.setStatus('vllm-0', { phase: 'Pending' });
      await h.pods.setStatus('vllm-0', { phase: 'Running', ip: '10.1.0.1', ready: false });
      await h.pods.setStatus('vllm-0', { ready: true });
      const joined = await h.log.next(added('vllm-0'), { what: 'vllm-0 added' });
      // Nothing before Ready: the first change ever reported is this add.
      expect(h.log.events.filter((e) => e.type === 'added' || e.type === 'removed')).toEqual([joined]);
      expect(urls(h.registry)).toEqual(['http://10.1.0.1:8000']);
      expect(joined).toMatchObject({ uid: await h.pods.uid('vllm-0') });

      const left = h.log.next(removed('vllm-0'), { from: h.log.mark() });
      await h.pods.setStatus('vllm-0', { ready: false });
      expect(await left).toMatchObject({ reason: 'not_ready' });
      expect(urls(h.registry)).toEqual([]);

      const back = h.log.next(added('vllm-0'), { from: h.log.mark() });
      await h.pods.setStatus('vllm-0', { ready: true });
      const rejoined = (await back) as Extract<Seen, { type: 'added' }>;
      expect(rejoined.generation).toBeGreaterThan((joined as Extract<Seen, { type: 'added' }>).generation);
    } finally {
      await h.close();
    }
  });

  it('a pod annotated with its data-parallel size is scheduled as one worker per engine', async () => {
    const h = await harness();
    try {
      await h.pods.create('vllm-dp', LABELS, undefined, { 'vllm.ai/data-parallel-size': '4' });
      await h.pods.setStatus('vllm-dp', { ...RUNNING_READY, ip: '10.1.0.9' });
      await h.log.next(added('vllm-dp'), { what: 'vllm-dp added' });
      expect(h.registry.snapshot('decode').map((e) => e.metadata)).toEqual([{ data_parallel_size: 4 }]);
      const pool = new WorkerPool('decode', createPolicy('cache_aware', {}), h.registry);
      pool.reconcile();
      expect(pool.workers.map((w) => w.key)).toEqual([0, 1, 2, 3].map((r) => `http://10.1.0.9:8000@${r}`));
    } finally {
      await h.close();
    }
  });

  it('relabelled out of the selector, terminating, deleted: each removes the pod at once', async () => {
    const h = await harness();
    try {
      for (const [i, name] of ['relabel', 'graceful', 'gone'].entries()) {
        const join = h.log.next(added(name), { from: h.log.mark() });
        await h.pods.create(name, LABELS, { ...RUNNING_READY, ip: `10.2.0.${i + 1}` });
        await join;
      }
      expect(urls(h.registry)).toHaveLength(3);

      // The API reports a pod leaving a label-selected watch as DELETED (carrying its previous labels).
      let left = h.log.next(removed('relabel'), { from: h.log.mark() });
      await h.pods.setLabels('relabel', { app: 'vllm', 'vllm.ai/role': 'prefill' });
      expect(await left).toMatchObject({ reason: 'deleted' });
      expect(await h.pods.uid('relabel')).not.toBe(''); // still there, only relabelled

      // Graceful deletion: the pod stays (Running, Ready) with a deletionTimestamp; it takes no new requests.
      left = h.log.next(removed('graceful'), { from: h.log.mark() });
      await h.pods.delete('graceful');
      expect(await left).toMatchObject({ reason: 'terminating' });

      // Grace period 0: the API may first write the deletionTimestamp (MODIFIED), then delete (DELETED).
      left = h.log.next(removed('gone'), { from: h.log.mark() });
      await h.pods.forceDelete('gone');
      expect(['terminating', 'deleted']).toContain(((await left) as { reason: string }).reason);
      expect(urls(h.registry)).toEqual([]);
    } finally {
      await h.close();
    }
  });

  it('a vLLM container restarted in place (same pod, same IP) is a new generation: its KV cache is gone', async () => {
    const h = await harness();
    try {
      const join = h.log.next(added('vllm-0'), { from: h.log.mark() });
      await h.pods.create('vllm-0', LABELS, { ...RUNNING_READY, ip: '10.3.0.9', restarts: 0 });
      const first = (await join) as Extract<Seen, { type: 'added' }>;
      // The kubelet writes only its latest status: a crash and restart between two of its syncs (no
      // readiness probe), or a relist after a watch gap, shows the pod still Ready with one more restart.
      const from = h.log.mark();
      const left = h.log.next(removed('vllm-0'), { from });
      const back = h.log.next(added('vllm-0'), { from });
      await h.pods.setStatus('vllm-0', { restarts: 1 });
      await left;
      const second = (await back) as Extract<Seen, { type: 'added' }>;
      expect(second.uid).toBe(first.uid);
      expect(second.url).toBe(first.url);
      expect(second.generation).toBeGreaterThan(first.generation);
      expect(h.registry.get('decode', first.url)?.generation).toBe(second.generation);
    } finally {
      await h.close();
    }
  });

  it('a pod recreated with the same name and IP is a new generation (its UID is part of its identity)', async () => {
    const h = await harness();
    try {
      let join = h.log.next(added('vllm-0'), { from: h.log.mark() });
      await h.pods.create('vllm-0', LABELS, { ...RUNNING_READY, ip: '10.3.0.1' });
      const first = (await join) as Extract<Seen, { type: 'added' }>;
      const left = h.log.next(removed('vllm-0'), { from: h.log.mark() });
      await h.pods.forceDelete('vllm-0');
      await left;
      join = h.log.next(added('vllm-0'), { from: h.log.mark() });
      await h.pods.create('vllm-0', LABELS, { ...RUNNING_READY, ip: '10.3.0.1' });
      const second = (await join) as Extract<Seen, { type: 'added' }>;
      expect(second.url).toBe(first.url);
      expect(second.uid).not.toBe(first.uid);
      expect(second.generation).toBeGreaterThan(first.generation);
      expect(h.registry.get('decode', first.url)?.generation).toBe(second.generation);
    } finally {
      await h.close();
    }
  });

  it('a pod deleted while the watch connection is cut is removed by the relist on reconnect', async () => {
    const cutter = await TcpCutter.start(cluster.port);
    const h = await harness({ serverUrl: `https://127.0.0.1:${cutter.port}` });
    try {
      for (const [i, name] of ['doomed', 'survivor'].entries()) {
        const join = h.log.next(added(name), { from: h.log.mark() });
        await h.pods.create(name, LABELS, { ...RUNNING_READY, ip: `10.4.0.${i + 1}` });
        await join;
      }
      const cutAt = h.log.mark();
      cutter.cut(); // the watch drops; reconnects fail while cut
      await h.log.next((e) => e.type === 'error', { from: cutAt, what: 'a failed reconnect' });
      await h.pods.forceDelete('doomed'); // through the admin connection: the discovery cannot see it
      const relist = h.log.next((e) => e.type === 'synced', { from: h.log.mark(), what: 'relist' });
      cutter.resume();
      await relist;
      const gone = await h.log.next(removed('doomed'), { from: cutAt });
      expect(gone).toMatchObject({ reason: 'deleted' });
      expect(urls(h.registry)).toEqual(['http://10.4.0.2:8000']);
      expect(h.discovery.listCount('decode')).toBeGreaterThanOrEqual(2);

      // And the new watch works: a later change arrives.
      const left = h.log.next(removed('survivor'), { from: h.log.mark() });
      await h.pods.setStatus('survivor', { ready: false });
      await left;
    } finally {
      await h.close();
      await cutter.close();
    }
  });

  it('keeps working across a kube-apiserver restart (relist, then watch events again)', async () => {
    const h = await harness();
    try {
      const join = h.log.next(added('before'), { from: h.log.mark() });
      await h.pods.create('before', LABELS, { ...RUNNING_READY, ip: '10.5.0.1' });
      await join;
      const lists = h.discovery.listCount('decode');
      const restartAt = h.log.mark();
      await cluster.restartApiserver();
      await h.log.next((e) => e.type === 'synced', { from: restartAt, what: 'relist after restart' });
      expect(h.discovery.listCount('decode')).toBeGreaterThan(lists);
      // The member survived the restart without a new generation.
      expect(h.log.events.slice(restartAt).filter((e) => e.type === 'removed')).toEqual([]);
      expect(urls(h.registry)).toEqual(['http://10.5.0.1:8000']);

      const joinAfter = h.log.next(added('after'), { from: h.log.mark() });
      await h.pods.create('after', LABELS, { ...RUNNING_READY, ip: '10.5.0.2' });
      await joinAfter;
      const left = h.log.next(removed('before'), { from: h.log.mark() });
      await h.pods.forceDelete('before');
      await left;
      expect(urls(h.registry)).toEqual(['http://10.5.0.2:8000']);
    } finally {
      await h.close();
    }
  });

  it('the namespaced Role does not allow watching all namespaces: the failure is reported, not hidden', async () => {
    const namespace = `rbac-${process.pid}`;
    const pods = new PodControl(cluster.core, namespace);
    await pods.createNamespace();
    await cluster.applyManifest('rbac.yaml', namespace);
    const token = await cluster.serviceAccountToken(namespace, 'vllm-extproc-router');
    const log = new EventLog<Seen>();
    const discovery = new KubeDiscovery({
      kubeConfig: cluster.kubeConfig({ token }),
      rules: [RULE],
      registry: new ServiceRegistry(),
      logger: pino({ level: 'silent' }),
      hooks: {
        onError: (_r, phase, err) =>
          log.push({ type: 'error', phase, status: (err as { code?: number }).code }),
      },
    });
    discovery.start();
    try {
      expect(await log.next((e) => e.type === 'error')).toMatchObject({ phase: 'list', status: 403 });
    } finally {
      await discovery.close();
    }
  });
});
