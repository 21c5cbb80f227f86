/**
 * Kubernetes discovery end to end: a real kube-apiserver + etcd (test/support/kube-cluster.ts), the router
 * started with the Kubernetes flags and the token of the ServiceAccount of deploy/kubernetes/rbac.yaml (via
 * a kubeconfig file), a real Envoy, and simulated vLLM pods. The "pods" are simulators on distinct loopback
 * addresses (127.0.0.2, 127.0.0.3) sharing one port, so `http://<podIP>:<--service-discovery-port>` reaches
 * them like pod IPs in a cluster; the test plays the kubelet by writing each pod's status.
 *
 * A request streaming from a pod that turns NotReady completes normally (its Worker leaves the pool, the
 * stream keeps it), while the next request goes to the other pod; loads end at 0. The stream is kept in
 * flight by a simulator hold (released by the test), not by token pacing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import type { KubeMembershipChange } from '../../src/discovery/kube-discovery.js';
import { PodControl, startKubeCluster, type KubeCluster } from '../support/kube-cluster.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { EventLog } from '../support/event-log.js';
import { waitFor } from '../support/wait-for.js';
import { TcpCutter } from '../support/tcp-cutter.js';
import { healthClient } from '../integration/lifecycle/router-child.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const LABELS = { app: 'vllm' };
const STREAM_TOKENS = 40;

let cluster: KubeCluster;
let envoy: EnvoyHandle | undefined;
let router: Router | undefined;
const sims: Simulator[] = [];
const log = new EventLog<KubeMembershipChange>();
let pods: PodControl;
let simA: Simulator;
let simB: Simulator;
let namespace: string;
let token: string;

beforeAll(async () => {
  cluster = await startKubeCluster();
  namespace = `e2e-${process.pid}`;
  pods = new PodControl(cluster.core, namespace);
  await pods.createNamespace();
  await cluster.applyManifest('rbac.yaml', namespace);
  token = await cluster.serviceAccountToken(namespace, 'vllm-extproc-router');

  simA = await startSimulator({ host: '127.0.0.2', timeScale: 0, id: 'pod-a' });
  sims.push(simA);
  simB = await startSimulator({ host: '127.0.0.3', port: simA.port, timeScale: 0, id: 'pod-b' });
  sims.push(simB);

  router = await startTestRouter(
    {
      serviceDiscovery: true,
      selector: ['app=vllm'],
      serviceDiscoveryPort: simA.port,
      serviceDiscoveryNamespace: namespace,
      serviceDiscoveryKubeconfig: cluster.writeKubeconfig({ token }),
      policy: 'round_robin',
      scrapeIntervalMs: 50,
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

async function complete(url: string, prompt: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2 }),
  });
  return { status: res.status, body: await res.text() };
}

describe('Kubernetes discovery through Envoy', () => {
  it('routes to Ready pods only; a stream on a pod that turns NotReady completes, the next request goes elsewhere', async () => {
    const url = `http://127.0.0.1:${envoy!.listenerPort}`;
    const r = router!;
    // pod-a Ready; pod-b Running but not Ready yet: only pod-a takes traffic.
    let join = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-a'));
    await pods.create('pod-a', LABELS, { phase: 'Running', ip: '127.0.0.2', ready: true });
    await pods.create('pod-b', LABELS, { phase: 'Running', ip: '127.0.0.3', ready: false });
    await join;
    expect(r.workers().map((w) => w.url)).toEqual([simA.url]);

    // The stream stops after its first event and stays open until released (simulator hold).
    const held = simA.hold({ stream: true, afterChunks: 1 });
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'a long answer please' }],
        max_tokens: STREAM_TOKENS,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    while (!text.includes('data: ')) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += decoder.decode(chunk.value, { stream: true });
    }
    await held.reached();
    const workerA = r.workers().find((w) => w.url === simA.url)!;
    expect(workerA.load).toBe(1);

    // pod-b becomes Ready, pod-a turns NotReady while its stream is in flight.
    join = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-b'), { from: log.mark() });
    await pods.setStatus('pod-b', { ready: true });
    await join;
    const left = log.next((e) => e.type === 'removed' && e.pod.endsWith('/pod-a'), { from: log.mark() });
    await pods.setStatus('pod-a', { ready: false });
    expect(await left).toMatchObject({ reason: 'not_ready' });
    expect(simA.inFlight()).toBe(1); // the stream is still running on pod-a
    expect(r.workers().map((w) => w.url)).toEqual([simB.url]);

    // The next requests go to pod-b only.
    const before = simA.records.length;
    for (let i = 0; i < 3; i++) {
      const next = await complete(url, `next ${i}`);
      expect(next.status).toBe(200);
    }
    expect(simB.records.filter((rec) => rec.path === '/v1/completions')).toHaveLength(3);
    expect(simA.records.length).toBe(before);

    // The stream on pod-a completes normally and releases its (departed) Worker.
    held.release();
    for (;;) {
      const chunk = await reader.read();
      if (chunk.done) break;
      text += decoder.decode(chunk.value, { stream: true });
    }
    expect(text).toContain('data: [DONE]');
    const streamed = simA.records.find((rec) => rec.stream);
    expect(streamed).toMatchObject({ outcome: 'ok', completionTokens: STREAM_TOKENS });
    await waitFor(() => workerA.load === 0, { message: 'the departed Worker released' });
    await expectAllLoadsZero(r);

    // Registry events are counted like the other discovery sources'.
    const metrics = await metricsText(r);
    expect(metrics).toMatch(/vllm_router_discovery_updates_total\{role="regular",event="registered"\} [2-9]/);
    expect(metrics).toMatch(
      /vllm_router_discovery_updates_total\{role="regular",event="deregistered"\} [1-9]/,
    );
  });

  it('/workers shows the pod workers; readiness follows them', async () => {
    const r = router!;
    const ready = await fetch(`http://127.0.0.1:${r.adminPort}/readyz`);
    expect(ready.status).toBe(200);
    const left = log.next((e) => e.type === 'removed' && e.pod.endsWith('/pod-b'), { from: log.mark() });
    await pods.forceDelete('pod-b');
    // Grace period 0: the API may first write the deletionTimestamp (MODIFIED), then delete (DELETED).
    expect(['terminating', 'deleted']).toContain(((await left) as { reason: string }).reason);
    const notReady = await fetch(`http://127.0.0.1:${r.adminPort}/readyz`);
    expect(notReady.status).toBe(503);
    const join = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-a'), { from: log.mark() });
    await pods.setStatus('pod-a', { ready: true });
    await join;
    const workers = (await (await fetch(`http://127.0.0.1:${r.adminPort}/workers`)).json()) as unknown;
    expect(JSON.stringify(workers)).toContain(simA.url);
    const res = await complete(`http://127.0.0.1:${envoy!.listenerPort}`, 'after');
    expect(res.status).toBe(200);
    await expectAllLoadsZero(r);
  });

  it("a pod's metrics-port and kv-events-port annotations say where the router scrapes load and subscribes to KV events", async () => {
    const r = router!;
    // pod-c publishes KV events on its own port and serves /metrics on a port apart from its HTTP port
    // (its HTTP port answers /metrics with the simulator's own page: a router scraping there would see 0).
    const simC = await startSimulator({
      host: '127.0.0.4',
      port: simA.port,
      timeScale: 0,
      id: 'pod-c',
      kvEvents: { endpoint: 'tcp://127.0.0.4:0' },
    });
    sims.push(simC);
    const metricsServer = createServer((_req, res) =>
      res.end(
        'vllm:num_requests_waiting{model_name="sim-model"} 7.0\n' +
          'vllm:num_requests_running{model_name="sim-model"} 3.0\n',
      ),
    );
    await new Promise<void>((resolve) => metricsServer.listen(0, '127.0.0.4', resolve));
    try {
      const kvPort = /:(\d+)$/.exec(simC.kvEvents!.endpoint)![1]!;
      const metricsPort = String((metricsServer.address() as AddressInfo).port);
      const join = log.next((e) => e.type === 'added' && e.pod.endsWith('/pod-c'), { from: log.mark() });
      await pods.create(
        'pod-c',
        LABELS,
        { phase: 'Running', ip: '127.0.0.4', ready: true },
        { 'vllm.ai/kv-events-port': kvPort, 'vllm.ai/metrics-port': metricsPort },
      );
      await join;
      const worker = `worker="${simC.url}"`;
      await waitFor(
        async () =>
          new RegExp(`vllm_router_worker_scraped_waiting\\{[^}]*${worker}[^}]*\\} 7`).test(
            await metricsText(r),
          ),
        { message: "pod-c's load scraped from its metrics port" },
      );
      // Requests to pod-c store KV blocks; the router's exact index learns them from pod-c's publisher.
      const url = `http://127.0.0.1:${envoy!.listenerPort}`;
      await waitFor(
        async () => {
          const prompt = 'a prompt long enough to fill a few KV blocks on pod-c. '.repeat(20);
          expect((await complete(url, prompt)).status).toBe(200);
          return new RegExp(`vllm_router_kv_index_blocks\\{${worker}\\} [1-9]`).test(await metricsText(r));
        },
        { message: "pod-c's KV events applied to the router's index" },
      );
      const left = log.next((e) => e.type === 'removed' && e.pod.endsWith('/pod-c'), { from: log.mark() });
      await pods.forceDelete('pod-c');
      await left;
      await waitFor(async () => !(await metricsText(r)).includes(`vllm_router_kv_index_blocks{${worker}}`), {
        message: "pod-c's index entries dropped when it left",
      });
      await expectAllLoadsZero(r);
    } finally {
      await new Promise<void>((resolve) => metricsServer.close(() => resolve()));
    }
  });

  it('a restarted replica reports ready only once it has listed the pods, then sees what its peer sees', async () => {
    // The apiserver is unreachable for the new replica until the test resumes the relay.
    const cutter = await TcpCutter.start(cluster.port);
    cutter.cut();
    const replica = await startTestRouter({
      serviceDiscovery: true,
      selector: ['app=vllm'],
      serviceDiscoveryPort: simA.port,
      serviceDiscoveryNamespace: namespace,
      serviceDiscoveryKubeconfig: cluster.writeKubeconfig({
        token,
        serverUrl: `https://127.0.0.1:${cutter.port}`,
      }),
      policy: 'round_robin',
      warmupTimeoutMs: 600_000,
    });
    const health = healthClient(replica.grpcPort);
    try {
      const readyz = async () => {
        const res = await fetch(`http://127.0.0.1:${replica.adminPort}/readyz`);
        return { status: res.status, body: (await res.json()) as { warmingUp?: string[] } };
      };
      const before = await readyz();
      expect(before.status).toBe(503);
      expect(before.body.warmingUp).toEqual(['kubernetes pods listed']);
      expect(await health.check('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('NOT_SERVING');

      cutter.resume();
      await waitFor(async () => (await readyz()).status === 200, {
        timeoutMs: 30_000,
        message: 'replica ready',
      });
      expect(await health.check('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('SERVING');
      const urls = (r: Router) =>
        r
          .workers()
          .map((w) => w.url)
          .sort();
      expect(urls(replica)).toEqual(urls(router!));
      expect(urls(replica).length).toBeGreaterThan(0);
    } finally {
      health.close();
      await replica.close();
      await cutter.close();
    }
  });
  it('a ServiceAccount without RBAC in the watched namespace shows as forbidden list errors in the metrics and keeps /readyz at 503', async () => {
    // rbac.yaml grants the ServiceAccount pods in its own namespace only: listing `default` is a 403.
    const denied = await startTestRouter({
      serviceDiscovery: true,
      selector: ['app=vllm'],
      serviceDiscoveryPort: simA.port,
      serviceDiscoveryNamespace: 'default',
      serviceDiscoveryKubeconfig: cluster.writeKubeconfig({ token }),
      policy: 'round_robin',
      warmupTimeoutMs: 600_000,
    });
    try {
      await waitFor(
        async () =>
          /vllm_router_kube_watch_errors_total\{resource="pods",phase="list",reason="forbidden"\} [1-9]/.test(
            await metricsText(denied),
          ),
        { timeoutMs: 30_000, message: 'forbidden list counted' },
      );
      const res = await fetch(`http://127.0.0.1:${denied.adminPort}/readyz`);
      expect(res.status).toBe(503);
      expect(((await res.json()) as { warmingUp?: string[] }).warmingUp).toEqual(['kubernetes pods listed']);
      expect(denied.workers()).toEqual([]);
    } finally {
      await denied.close();
    }
  });
});
