/**
 * Request objectives from Kubernetes, end to end: a real kube-apiserver + etcd with the Gateway API
 * Inference Extension's InferenceObjective CRD (its published file, scripts/install-crds.sh), the router
 * started with `--inference-pool vllm` and the token of the ServiceAccount of deploy/kubernetes/rbac.yaml
 * (so that manifest's permissions are what it gets), a real Envoy and two simulated vLLM workers kept
 * saturated by direct clients.
 * - The router's objective table follows the pool's InferenceObjectives: created, re-prioritised,
 *   moved to another pool, deleted; another pool's are ignored; a watched objective wins over the
 *   `--objective` flag of the same name; an unset priority is 0.
 * - What it reads decides: a request naming `batch` is shed (429) while its priority is negative and
 *   routed once it is not.
 * Every wait is on an event the router reports (its objectives hook), never a sleep; loads end at 0.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import { startKubeCluster, PodControl, type KubeCluster } from '../support/kube-cluster.js';
import { installCrds, publishedCrds } from '../support/kube-crds.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { EventLog } from '../support/event-log.js';
import { waitFor } from '../support/wait-for.js';
import { directLoad, SATURABLE_SIM } from '../support/direct-load.js';
import { objectiveChat } from '../support/objective-chat.js';

type Objectives = ReadonlyMap<string, number>;

let cluster: KubeCluster;
let envoy: EnvoyHandle | undefined;
let router: Router | undefined;
const sims: Simulator[] = [];
const log = new EventLog<Objectives>();
let namespace: string;

const OBJECTIVES = 'inference.networking.x-k8s.io/v1alpha2';

function objectivePath(name?: string): string {
  const base = `/apis/${OBJECTIVES}/namespaces/${namespace}/inferenceobjectives`;
  return name === undefined ? base : `${base}/${name}`;
}

async function createObjective(name: string, pool: string, priority?: number): Promise<void> {
  const res = await cluster.api('POST', objectivePath(), {
    apiVersion: OBJECTIVES,
    kind: 'InferenceObjective',
    metadata: { name, namespace },
    spec: { poolRef: { name: pool }, ...(priority === undefined ? {} : { priority }) },
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
}

async function patchObjective(name: string, spec: Record<string, unknown>): Promise<void> {
  const res = await cluster.api('GET', objectivePath(name));
  const obj = res.body as { spec: Record<string, unknown> };
  const put = await cluster.api('PUT', objectivePath(name), { ...obj, spec: { ...obj.spec, ...spec } });
  expect(put.status, JSON.stringify(put.body)).toBe(200);
}

const is = (want: Record<string, number>) => (m: Objectives) =>
  JSON.stringify(Object.fromEntries([...m].sort())) === JSON.stringify(want);

beforeAll(async () => {
  const crds = publishedCrds((f) => f === 'inference-objectives.yaml');
  expect(crds.map((c) => c.metadata.name)).toEqual(['inferenceobjectives.inference.networking.x-k8s.io']);
  cluster = await startKubeCluster();
  await installCrds(cluster, crds);
  namespace = `objectives-${process.pid}`;
  await new PodControl(cluster.core, namespace).createNamespace();
  await cluster.applyManifest('rbac.yaml', namespace);
  const token = await cluster.serviceAccountToken(namespace, 'vllm-extproc-router');
  // Before the router starts: its first list must see these.
  await createObjective('batch', 'vllm', -1);
  await createObjective('interactive', 'vllm');
  await createObjective('elsewhere', 'other-pool', -5);

  for (let i = 0; i < 2; i++) {
    sims.push(await startSimulator(SATURABLE_SIM));
  }
  router = await startTestRouter(
    {
      workers: sims.map((s) => s.url),
      inferencePool: 'vllm',
      serviceDiscoveryNamespace: namespace,
      serviceDiscoveryKubeconfig: cluster.writeKubeconfig({ token }),
      // A flag of the same name: the watched objective wins.
      objective: ['batch=7', 'flagged=-2'],
      scrapeIntervalMs: 50,
      loadStaleMs: 60_000,
    },
    { kubeObjectivesHooks: { onChange: log.push } },
  );
  envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
}, 240_000);

afterAll(async () => {
  await envoy?.close();
  await router?.close();
  await Promise.all(sims.map((s) => s.close()));
  await cluster?.close();
}, 60_000);

const chat = (objective: string, signal?: AbortSignal): Promise<Response> =>
  objectiveChat(`http://127.0.0.1:${envoy!.listenerPort}`, objective, signal);

describe("the InferencePool's InferenceObjectives (--inference-pool)", () => {
  it('reads the pool objectives, not the other pools, and exports the priorities it uses', async () => {
    await log.next(is({ batch: -1, interactive: 0 }), { what: 'the first list' });
    const metrics = await metricsText(router!);
    expect(metrics).toMatch(/vllm_router_objective_priority\{objective="batch"\} -1\b/);
    expect(metrics).toMatch(/vllm_router_objective_priority\{objective="interactive"\} 0\b/);
    expect(metrics).toMatch(/vllm_router_objective_priority\{objective="flagged"\} -2\b/);
    expect(metrics).not.toContain('objective="elsewhere"');
  });

  it('sheds batch requests while both workers are saturated and its priority is negative, and follows its changes', async () => {
    const [a, b] = sims as [Simulator, Simulator];
    const direct = [await directLoad(a, 10), await directLoad(b, 10)];
    try {
      await waitFor(
        async () => /vllm_router_pool_saturated\{role="regular"\} 1/.test(await metricsText(router!)),
        { timeoutMs: 10_000, message: 'a scrape showing both workers saturated' },
      );
      const shed = await chat('batch');
      expect(shed.status).toBe(429);
      expect(((await shed.json()) as { error: { code: string } }).error.code).toBe('pool_saturated');

      // Re-prioritised: routed (it waits in a worker's queue; the test then lets it go).
      let from = log.mark();
      await patchObjective('batch', { priority: 1 });
      await log.next(is({ batch: 1, interactive: 0 }), { from, what: 'batch re-prioritised' });
      const admitted = new AbortController();
      const pending = chat('batch', admitted.signal).catch(() => undefined);
      await waitFor(() => router!.workers().some((w) => w.load > 0), {
        timeoutMs: 10_000,
        message: 'the batch request routed',
      });
      admitted.abort();
      await pending;

      // Moved to another pool, then deleted: the flag's value applies again (batch=7: routed).
      from = log.mark();
      await patchObjective('interactive', { poolRef: { name: 'other-pool' }, priority: -3 });
      await log.next(is({ batch: 1 }), { from, what: 'interactive moved away' });
      from = log.mark();
      const del = await cluster.api('DELETE', objectivePath('batch'));
      expect(del.status).toBe(200);
      await log.next(is({}), { from, what: 'batch deleted' });
      expect(await metricsText(router!)).toMatch(/vllm_router_objective_priority\{objective="batch"\} 7\b/);
      // The flag's own sheddable objective is still shed.
      expect((await chat('flagged')).status).toBe(429);
    } finally {
      for (const d of direct) d.abort();
    }
    await waitFor(() => a.inFlight() + b.inFlight() === 0, {
      timeoutMs: 10_000,
      message: 'direct load aborted',
    });
    await expectAllLoadsZero(router!);
  });
});
