/**
 * The InferencePool as the one place that names the workers, end to end: a real kube-apiserver + etcd
 * with the Gateway API Inference Extension's InferencePool CRD (its published file,
 * scripts/install-crds.sh), the router started with `--service-discovery --inference-pool vllm` and NO
 * selector, with the token of the ServiceAccount of deploy/kubernetes/rbac.yaml (so that manifest's
 * permissions are what it gets), a real Envoy, and simulated vLLM "pods" on loopback addresses (the test
 * plays the kubelet, as in kube-discovery.test.ts).
 * - Before the pool exists the router has no worker; once created, the pods it selects on its target
 *   port are the workers, and requests through Envoy reach them.
 * - A wider selector adds pods, a new target port re-registers every pod on it, a deleted pool
 *   empties the fleet (a JSON 503).
 * Every wait is on an event the router reports (its discovery hook), never a sleep; loads end at 0.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import type { KubeMembershipChange } from '../../src/discovery/kube-discovery.js';
import { PodControl, startKubeCluster, type KubeCluster } from '../support/kube-cluster.js';
import { installCrds, publishedCrds } from '../support/kube-crds.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';
import { EventLog } from '../support/event-log.js';

const POOLS = 'inference.networking.k8s.io/v1';

let cluster: KubeCluster;
let envoy: EnvoyHandle | undefined;
let router: Router | undefined;
const sims: Simulator[] = [];
const log = new EventLog<KubeMembershipChange>();
let pods: PodControl;
let namespace: string;
let token: string;
/** Pod a (127.0.0.2) and pod b (127.0.0.3), each served on two ports: [first port, second port]. */
let a: [Simulator, Simulator];
let b: [Simulator, Simulator];

const poolPath = (name?: string) =>
  `/apis/${POOLS}/namespaces/${namespace}/inferencepools${name === undefined ? '' : `/${name}`}`;

async function putPool(matchLabels: Record<string, string>, port: number | number[]): Promise<void> {
  const spec = {
    selector: { matchLabels },
    targetPorts: (Array.isArray(port) ? port : [port]).map((number) => ({ number })),
    endpointPickerRef: { name: 'vllm-extproc-router', port: { number: 9002 } },
  };
  const current = await cluster.api('GET', poolPath('vllm'));
  const res =
    current.status === 404
      ? await cluster.api('POST', poolPath(), {
          apiVersion: POOLS,
          kind: 'InferencePool',
          metadata: { name: 'vllm', namespace },
          spec,
        })
      : await cluster.api('PUT', poolPath('vllm'), { ...(current.body as object), spec });
  expect([200, 201], JSON.stringify(res.body)).toContain(res.status);
}

beforeAll(async () => {
  // Both CRDs of the Inference Extension: --inference-pool also reads the pool's objectives.
  const crds = publishedCrds((f) => f === 'inference-pools.yaml' || f === 'inference-objectives.yaml');
  expect(crds.map((c) => c.metadata.name).sort()).toEqual([
    'inferenceobjectives.inference.networking.x-k8s.io',
    'inferencepools.inference.networking.k8s.io',
  ]);
  cluster = await startKubeCluster();
  await installCrds(cluster, crds);
  namespace = `pool-${process.pid}`;
  pods = new PodControl(cluster.core, namespace);
  await pods.createNamespace();
  await cluster.applyManifest('rbac.yaml', namespace);
  token = await cluster.serviceAccountToken(namespace, 'vllm-extproc-router');

  const a0 = await startSimulator({ host: '127.0.0.2', timeScale: 0, id: 'pod-a' });
  const b0 = await startSimulator({ host: '127.0.0.3', port: a0.port, timeScale: 0, id: 'pod-b' });
  const a1 = await startSimulator({ host: '127.0.0.2', timeScale: 0, id: 'pod-a-2' });
  const b1 = await startSimulator({ host: '127.0.0.3', port: a1.port, timeScale: 0, id: 'pod-b-2' });
  a = [a0, a1];
  b = [b0, b1];
  sims.push(a0, b0, a1, b1);
  await pods.create(
    'pod-a',
    { app: 'vllm', tier: 'blue' },
    { phase: 'Running', ip: '127.0.0.2', ready: true },
  );
  await pods.create(
    'pod-b',
    { app: 'vllm', tier: 'green' },
    { phase: 'Running', ip: '127.0.0.3', ready: true },
  );

  router = await startTestRouter(
    {
      serviceDiscovery: true,
      inferencePool: 'vllm',
      serviceDiscoveryNamespace: namespace,
      serviceDiscoveryKubeconfig: cluster.writeKubeconfig({ token }),
      policy: 'round_robin',
    },
    { kubeDiscoveryHooks: { onChange: log.push } },
  );
  envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
}, 180_000);

afterAll(async () => {
  await envoy?.close();
  await router?.close();
  await Promise.all(sims.map((s) => s.close()));
  await cluster?.close();
}, 60_000);

async function complete(prompt: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${envoy!.listenerPort}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2 }),
  });
  return { status: res.status, body: await res.text() };
}

const urls = () =>
  router!
    .workers()
    .map((w) => w.url)
    .sort();

describe('workers named by the InferencePool', () => {
  it('follows the pool: created, widened, moved to another port, deleted', async () => {
    // No pool yet: no worker.
    expect(urls()).toEqual([]);

    // The pool selects the blue pod on the first port.
    let change = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-a'));
    await putPool({ app: 'vllm', tier: 'blue' }, a[0].port);
    expect(await change).toMatchObject({ url: a[0].url });
    expect(urls()).toEqual([a[0].url]);
    for (let i = 0; i < 2; i++) expect((await complete(`blue ${i}`)).status).toBe(200);
    expect(a[0].records).toHaveLength(2);

    // Widened to every vllm pod: pod b joins.
    change = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-b'), { from: log.mark() });
    await putPool({ app: 'vllm' }, a[0].port);
    expect(await change).toMatchObject({ url: b[0].url });
    expect(urls()).toEqual([a[0].url, b[0].url].sort());

    // A new target port: every pod re-registers on it.
    const from = log.mark();
    const moved = Promise.all(
      ['/pod-a', '/pod-b'].map((pod) =>
        log.next((e) => e.type === 'added' && e.pod.endsWith(pod) && e.url.endsWith(`:${a[1].port}`), {
          from,
        }),
      ),
    );
    await putPool({ app: 'vllm' }, a[1].port);
    await moved;
    expect(urls()).toEqual([a[1].url, b[1].url].sort());
    for (let i = 0; i < 4; i++) expect((await complete(`moved ${i}`)).status).toBe(200);
    expect([a[1].records.length, b[1].records.length]).toEqual([2, 2]);

    // The pool is deleted: no worker is left, and requests get the router's JSON 503.
    const gone = log.mark();
    const left = Promise.all(
      ['/pod-a', '/pod-b'].map((pod) =>
        log.next((e) => e.type === 'removed' && e.pod.endsWith(pod), { from: gone }),
      ),
    );
    const del = await cluster.api('DELETE', poolPath('vllm'));
    expect(del.status).toBe(200);
    await left;
    expect(urls()).toEqual([]);
    const refused = await complete('nobody');
    expect(refused.status).toBe(503);
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: 'no_workers' } });
    await expectAllLoadsZero(router!);
  });

  it('every target port of the pool is a worker of its own (one per rank, as the endpoint picker reads it)', async () => {
    // GAIE v1: "Every port will be treated as a distinctive endpoint by EPP, addressable as a
    // 'podIP:portNumber' combination" (a pod serving one vLLM API server per data-parallel rank).
    // The installed CRD is GAIE v1.0.1's (one port at most); from v1.1 on it takes up to 8 (v1.6.2 here).
    const crdPath =
      '/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferencepools.inference.networking.k8s.io';
    const crd = (await cluster.api('GET', crdPath)).body as {
      spec: {
        versions: Array<{
          schema: {
            openAPIV3Schema: { properties: { spec: { properties: { targetPorts: { maxItems: number } } } } };
          };
        }>;
      };
    };
    for (const v of crd.spec.versions)
      v.schema.openAPIV3Schema.properties.spec.properties.targetPorts.maxItems = 8;
    expect((await cluster.api('PUT', crdPath, crd)).status).toBe(200);

    const from = log.mark();
    const all = [a[0].url, a[1].url, b[0].url, b[1].url].sort();
    const joined = Promise.all(
      all.map((url) => log.next((e) => e.type === 'added' && e.url === url, { from })),
    );
    // The apiserver applies the new schema once its CRD informer saw the update: a few tries at most.
    for (let tries = 0; ; tries++) {
      const ok = await putPool({ app: 'vllm' }, [a[0].port, a[1].port]).then(
        () => true,
        (err: unknown) =>
          tries < 20 && String(err).includes('at most 1 item') ? false : Promise.reject(err),
      );
      if (ok) break;
    }
    await joined;
    expect(urls()).toEqual(all);
    const before = sims.map((s) => s.records.length);
    for (let i = 0; i < 4; i++) expect((await complete(`ranks ${i}`)).status).toBe(200);
    expect(sims.map((s, i) => s.records.length - before[i]!)).toEqual([1, 1, 1, 1]);

    // Down to one port: the second port's workers leave, the first port's stay as they are.
    const one = log.mark();
    const left = Promise.all(
      [a[1].url, b[1].url].map((url) =>
        log.next((e) => e.type === 'removed' && e.url === url, { from: one }),
      ),
    );
    await putPool({ app: 'vllm' }, a[0].port);
    await left;
    expect(urls()).toEqual([a[0].url, b[0].url].sort());
    expect(log.events.slice(one).filter((e) => e.type === 'added')).toEqual([]);
    await expectAllLoadsZero(router!);
  });
  it('a v1alpha2 pool (GAIE before v1.0, --inference-pool-group inference.networking.x-k8s.io) names the workers', async () => {
    // GAIE before v1.0 served only inference.networking.x-k8s.io/v1alpha2: spec.selector is a plain
    // label map and spec.targetPortNumber the one port (apix/v1alpha2/inferencepool_types.go).
    await installCrds(
      cluster,
      publishedCrds((f) => f === 'inference-pools-v1alpha2.yaml'),
    );
    const alphaLog = new EventLog<KubeMembershipChange>();
    const alpha = await startTestRouter(
      {
        serviceDiscovery: true,
        inferencePool: 'vllm-alpha',
        inferencePoolGroup: 'inference.networking.x-k8s.io',
        serviceDiscoveryNamespace: namespace,
        serviceDiscoveryKubeconfig: cluster.writeKubeconfig({ token }),
        policy: 'round_robin',
      },
      { kubeDiscoveryHooks: { onChange: alphaLog.push } },
    );
    try {
      const path = `/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/${namespace}/inferencepools`;
      const joined = alphaLog.next((e) => e.type === 'added' && e.pod.endsWith('/pod-a'));
      const created = await cluster.api('POST', path, {
        apiVersion: 'inference.networking.x-k8s.io/v1alpha2',
        kind: 'InferencePool',
        metadata: { name: 'vllm-alpha', namespace },
        spec: {
          selector: { app: 'vllm', tier: 'blue' },
          targetPortNumber: a[1].port,
          extensionRef: { name: 'vllm-extproc-router', portNumber: 9002 },
        },
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(await joined).toMatchObject({ url: a[1].url });
      expect(alpha.workers().map((w) => w.url)).toEqual([a[1].url]);

      const left = alphaLog.next((e) => e.type === 'removed' && e.pod.endsWith('/pod-a'), {
        from: alphaLog.mark(),
      });
      expect((await cluster.api('DELETE', `${path}/vllm-alpha`)).status).toBe(200);
      await left;
      expect(alpha.workers()).toEqual([]);
      await expectAllLoadsZero(alpha);
    } finally {
      await alpha.close();
    }
  });
});
