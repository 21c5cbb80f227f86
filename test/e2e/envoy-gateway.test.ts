/**
 * deploy/kubernetes/envoy-gateway.yaml as Envoy Gateway itself reads it: `egctl x translate` (Envoy
 * Gateway 1.9.1's translator, offline; test/support/envoy-gateway-xds.ts) turns the manifest, with the
 * Gateway, GatewayClass and Services it refers to, into xDS and policy statuses. The test checks the
 * statuses and what the policies became, then runs that xDS (listener, routes, clusters, unchanged but
 * for loopback addresses) with the real Envoy 1.40 in front of the router and simulated workers:
 * requests are routed by the router through the EnvoyPatchPolicy's original-destination cluster, a
 * 220 KB prompt passes the gateway's 32 KB buffer limit in full-duplex mode, and with the router down
 * the gateway answers 503 without reaching a worker.
 */
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import { staticBootstrap, translate, type Translation } from '../support/envoy-gateway-xds.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { replicaThatServed } from '../support/replica-served.js';

const REPO = resolve(import.meta.dirname, '../..');
const MANIFEST = readFileSync(join(REPO, 'deploy/kubernetes/envoy-gateway.yaml'), 'utf8');

/** What the manifest refers to and a cluster would have: its Gateway (and class) and the two Services. */
const CLUSTER = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: { name: eg }
spec: { controllerName: gateway.envoyproxy.io/gatewayclass-controller }
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: { name: inference-gateway, namespace: llm }
spec:
  gatewayClassName: eg
  listeners: [{ name: http, protocol: HTTP, port: 80 }]
---
apiVersion: v1
kind: Service
metadata: { name: vllm-extproc-router, namespace: llm }
spec:
  clusterIP: 10.96.0.10
  ports: [{ name: grpc, port: 9002, targetPort: 9002, appProtocol: kubernetes.io/h2c }]
---
apiVersion: v1
kind: Service
metadata: { name: vllm-decode, namespace: llm }
spec:
  clusterIP: 10.96.0.11
  ports: [{ name: http, port: 8000, targetPort: 8000 }]
---
`;
const ROUTER_SERVICE = '10.96.0.10:9002';
const PLACEHOLDER_SERVICE = '10.96.0.11:8000';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

let t: Translation;
let workers: Simulator[] = [];
/** The HTTPRoute's placeholder backend: the patch re-points the route, so it must never be reached. */
let placeholder: Simulator;

beforeAll(async () => {
  t = translate(CLUSTER + MANIFEST);
  workers = [await startSimulator({ timeScale: 0 }), await startSimulator({ timeScale: 0 })];
  placeholder = await startSimulator({ timeScale: 0 });
}, 120_000);

afterAll(async () => {
  await Promise.all([...workers, placeholder].map((s) => s?.close()));
});

/** Envoy on the translation `tm`: the router Service's endpoints at `routers`, the placeholder's at its simulator. */
function gatewayEnvoy(tm: Translation, routers: Router | Router[]): Promise<EnvoyHandle> {
  return startEnvoy({
    config: staticBootstrap(tm, 'llm/inference-gateway/http', {
      [ROUTER_SERVICE]: [routers].flat().map((r) => `127.0.0.1:${r.grpcPort}`),
      [PLACEHOLDER_SERVICE]: `127.0.0.1:${placeholder.port}`,
    }),
  });
}

/** POSTs `body` as JSON to `path` through the gateway (model sim-model unless the body names one). */
function post(
  envoy: EnvoyHandle,
  path: string,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<Response> {
  return fetch(`http://127.0.0.1:${envoy.listenerPort}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'sim-model', ...body }),
  });
}

const conditions = (kind: string, name: string): Json[] => {
  const list = (t.resources[kind] ?? []) as Json[];
  const obj = list.find((o) => o.metadata?.name === name);
  if (!obj) throw new Error(`${kind} ${name} not in egctl's output`);
  const status = obj.status as Json;
  return [...((status.parents ?? status.ancestors ?? []) as Json[]).flatMap((a) => a.conditions as Json[])];
};

describe('deploy/kubernetes/envoy-gateway.yaml through Envoy Gateway 1.9.1 (egctl translate)', () => {
  it('accepts the route and the three policies', () => {
    for (const [kind, name] of [
      ['httpRoutes', 'vllm'],
      ['envoyExtensionPolicies', 'vllm-extproc-router'],
      ['envoyPatchPolicies', 'vllm-original-dst'],
      ['clientTrafficPolicies', 'vllm-buffers'],
    ] as const) {
      const c = conditions(kind, name);
      expect(c.length, `${kind} ${name}`).toBeGreaterThan(0);
      for (const x of c) expect(x.status, `${kind} ${name}: ${x.type} ${x.message}`).toBe('True');
    }
  });

  it('makes the ext_proc filter, its router cluster and the original-destination route the manifest describes', () => {
    const listener = t.listeners.find((l) => l.name === 'llm/inference-gateway/http')!;
    const filter = (listener.defaultFilterChain.filters[0].typedConfig.httpFilters as Json[]).find((f) =>
      (f.name as string).startsWith('envoy.filters.http.ext_proc/'),
    )!;
    const ext = filter.typedConfig;
    expect(ext.failureModeAllow ?? false).toBe(false);
    expect(ext.statusOnError).toEqual({ code: 'ServiceUnavailable' });
    expect(ext.messageTimeout).toBe('90s');
    expect(ext.grpcService.retryPolicy).toMatchObject({
      numRetries: 3,
      retryOn: 'connect-failure,refused-stream,reset',
    });
    expect(ext.metadataOptions.receivingNamespaces.untyped).toEqual(['envoy.lb']);
    expect(ext.processingMode).toMatchObject({
      requestBodyMode: 'FULL_DUPLEX_STREAMED',
      responseBodyMode: 'FULL_DUPLEX_STREAMED',
    });
    const routerCluster = t.clusters.find((c) => c.name === ext.grpcService.envoyGrpc.clusterName)!;
    // The EnvoyPatchPolicy's health check, with a host name as :authority (see the test below).
    expect(routerCluster.healthChecks).toEqual([
      expect.objectContaining({
        grpcHealthCheck: {
          serviceName: 'envoy.service.ext_proc.v3.ExternalProcessor',
          authority: 'vllm-extproc-router',
        },
        unhealthyThreshold: 2,
      }),
    ]);
    expect(routerCluster.outlierDetection).toMatchObject({ consecutiveLocalOriginFailure: 2 });
    expect(routerCluster.connectTimeout).toBe('2s');
    // The patches applied: the route goes to vllm_workers, which follows the router's header.
    const route = t.routes.find((r) => r.name === 'llm/inference-gateway/http')!;
    expect(route.virtualHosts[0].routes[0].route).toMatchObject({ cluster: 'vllm_workers', timeout: '0s' });
    const workersCluster = t.clusters.find((c) => c.name === 'vllm_workers')!;
    expect(workersCluster).toMatchObject({
      type: 'ORIGINAL_DST',
      originalDstLbConfig: { useHttpHeader: true, httpHeaderName: 'x-gateway-destination-endpoint' },
    });
  });

  it('why the ClientTrafficPolicy: without it a keyless long prompt is refused (413) even in full duplex', async () => {
    // The prefix-affinity Lua filter reads the whole body of a request without x-session-id, and
    // Envoy Gateway's default per-connection buffer is 32 KiB.
    const start = MANIFEST.lastIndexOf('---', MANIFEST.indexOf('kind: ClientTrafficPolicy'));
    const without = MANIFEST.slice(0, start) + MANIFEST.slice(MANIFEST.indexOf('---', start + 3));
    expect(without).not.toContain('kind: ClientTrafficPolicy');
    const router = await startTestRouter({ workers: workers.map((s) => s.url), policy: 'cache_aware' });
    const envoy = await gatewayEnvoy(translate(CLUSTER + without), router);
    try {
      const send = (headers: Record<string, string>) =>
        post(envoy, '/v1/completions', { prompt: 'long document. '.repeat(15_000), max_tokens: 2 }, headers);
      const keyless = await send({});
      expect(keyless.status).toBe(413);
      await keyless.text();
      const withSession = await send({ 'x-session-id': 'one' }); // the filter does not read the body
      expect(withSession.status).toBe(200);
      await withSession.text();
      await expectAllLoadsZero(router);
    } finally {
      await envoy.close();
      await router.close();
    }
  });

  // The manifest's request body mode, and the other one its comment allows.
  describe.each(['FullDuplexStreamed', 'Buffered'])('run by the real Envoy, request body %s', (mode) => {
    let router: Router;
    let envoy: EnvoyHandle;
    let tm: Translation;

    beforeAll(async () => {
      const manifest = MANIFEST.replace(
        /request:\n(\s+)body: FullDuplexStreamed/,
        (_m, indent: string) => `request:\n${indent}body: ${mode}`,
      );
      expect(manifest).toContain(`body: ${mode}`);
      tm = translate(CLUSTER + manifest);
      router = await startTestRouter({ workers: workers.map((s) => s.url), policy: 'cache_aware' });
      envoy = await gatewayEnvoy(tm, router);
    }, 60_000);

    afterAll(async () => {
      await envoy?.close();
      await router?.close();
    });

    it('routes completions and streamed chats to the workers the router picks, a 220 KB prompt too', async () => {
      const before = workers.map((s) => s.records.length);
      const completion = await post(envoy, '/v1/completions', {
        prompt: 'Envoy Gateway says hello',
        max_tokens: 4,
      });
      expect(completion.status, await completion.clone().text()).toBe(200);
      expect(((await completion.json()) as Json).choices[0].text.length).toBeGreaterThan(0);

      const chat = await post(envoy, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'stream through the gateway' }],
        max_tokens: 5,
        stream: true,
      });
      expect(chat.status).toBe(200);
      expect(await chat.text()).toContain('data: [DONE]');

      const big = 'a long shared document line. '.repeat(7600); // ~220 KB
      const long = await post(envoy, '/v1/completions', { prompt: big, max_tokens: 2 });
      expect(long.status, await long.clone().text()).toBe(200);
      await long.text();

      const served = workers.map((s, i) => s.records.length - before[i]!);
      expect(served.reduce((a, b) => a + b, 0)).toBe(3);
      expect(placeholder.records.length).toBe(0);
      // The whole prompt reached the worker (full duplex: Envoy forwards only what the router echoes).
      const arrived = workers.flatMap((s) => s.records).find((r) => (r.body as Json).prompt === big);
      expect(arrived, 'the 220 KB prompt arrived whole').toBeDefined();
      await expectAllLoadsZero(router);
    });

    it("why the health check is patched in: Envoy Gateway's own gRPC check never passes against the router", async () => {
      // The router cluster with the gRPC health check Envoy Gateway generates for `healthCheck.active:
      // {type: GRPC}` in place of the patched one: its :authority is the cluster name, and the router's
      // HTTP/2 server (Node's) refuses an authority with '/' in it (PROTOCOL_ERROR): never healthy.
      // The same check with an authority that is a host name (Envoy's `authority` field, which Envoy
      // Gateway does not set) passes: the authority is the whole cause.
      const runWithCheck = async (authority: string | undefined) => {
        const withCheck = structuredClone(tm);
        const cluster = withCheck.clusters.find((c) =>
          (c.name as string).startsWith('envoyextensionpolicy/'),
        )!;
        cluster.healthChecks = [
          {
            grpcHealthCheck: {
              serviceName: 'envoy.service.ext_proc.v3.ExternalProcessor',
              ...(authority === undefined ? {} : { authority }),
            },
            interval: '0.2s',
            noTrafficInterval: '0.2s', // checks keep coming although no request gets through
            timeout: '1s',
            unhealthyThreshold: 2,
            healthyThreshold: 1,
          },
        ];
        const checked = await gatewayEnvoy(withCheck, router);
        try {
          const stat = async (name: string) =>
            Number(
              new RegExp(`health_check\\.${name}: (\\d+)`).exec(
                await checked.stats('extproc/0\\.health_check'),
              )?.[1],
            );
          await waitFor(async () => (await stat('attempt')) >= 3, { message: 'three health checks' });
          const res = await post(checked, '/v1/completions', {
            prompt: 'health-checked router',
            max_tokens: 2,
          });
          await res.text();
          return {
            success: await stat('success'),
            networkFailure: await stat('network_failure'),
            status: res.status,
          };
        } finally {
          await checked.close();
        }
      };
      const generated = await runWithCheck(undefined);
      expect(generated.success).toBe(0);
      expect(generated.networkFailure).toBeGreaterThanOrEqual(3);
      expect(generated.status).toBe(503);
      const hostAuthority = await runWithCheck('vllm-extproc-router.llm:9002');
      expect(hostAuthority.success).toBeGreaterThanOrEqual(3);
      expect(hostAuthority.status).toBe(200);
      await expectAllLoadsZero(router);
    });

    it('a draining router (NOT_SERVING) leaves rotation through the patched health check: 503, no worker reached', async () => {
      // The router cluster's host as Envoy sees it (admin /clusters: `<cluster>::<host>::health_flags::...`).
      const healthy = async () =>
        /^envoyextensionpolicy\/[^\n]*::health_flags::healthy$/m.test(
          await (await fetch(`http://127.0.0.1:${envoy.adminPort}/clusters`)).text(),
        );
      expect(await healthy()).toBe(true);
      await router.drain(0); // readiness off: the gRPC health service answers NOT_SERVING
      await waitFor(async () => !(await healthy()), { message: 'the router out of rotation in Envoy' });
      const before = workers.map((s) => s.records.length);
      const res = await post(envoy, '/v1/completions', { prompt: 'draining', max_tokens: 2 });
      expect(res.status).toBe(503);
      await res.text();
      expect(workers.map((s) => s.records.length)).toEqual(before);
    });

    it('with the router down, answers 503 and no request reaches a worker', async () => {
      await router.close();
      const before = workers.map((s) => s.records.length);
      for (let i = 0; i < 5; i++) {
        const res = await post(envoy, '/v1/completions', { prompt: `down ${i}`, max_tokens: 2 });
        expect(res.status).toBe(503);
        await res.text();
      }
      expect(workers.map((s) => s.records.length)).toEqual(before);
      expect(placeholder.records.length).toBe(0);
    });
  });

  it('P/D: the router runs the prefill leg and the gateway takes the decode leg to the decode worker', async () => {
    const prefill = await startSimulator({ role: 'prefill', kvConnector: 'nixl', timeScale: 0 });
    const decode = await startSimulator({ role: 'decode', kvConnector: 'nixl', timeScale: 0 });
    const router = await startTestRouter({ mode: 'pd', prefill: [prefill.url], decode: [decode.url] });
    const envoy = await gatewayEnvoy(t, router);
    try {
      const chat = await post(envoy, '/v1/chat/completions', {
        messages: [{ role: 'user', content: 'disaggregated through the gateway' }],
        max_tokens: 6,
        stream: true,
      });
      expect(chat.status, await chat.clone().text()).toBe(200);
      expect(await chat.text()).toContain('data: [DONE]');
      const completion = await post(envoy, '/v1/completions', {
        prompt: 'prefill then decode',
        max_tokens: 3,
      });
      expect(completion.status, await completion.clone().text()).toBe(200);
      await completion.text();
      expect(prefill.records.map((r) => r.outcome)).toEqual(['ok', 'ok']);
      expect(decode.records.map((r) => r.outcome)).toEqual(['ok', 'ok']);
      expect(placeholder.records.length).toBe(0);
      await expectAllLoadsZero(router);
    } finally {
      await envoy.close();
      await router.close();
      await Promise.all([prefill.close(), decode.close()]);
    }
  });

  describe('two router replicas behind the translated Envoy: affinity from the EnvoyPatchPolicy', () => {
    let routers: Router[] = [];
    let envoy: EnvoyHandle;

    beforeAll(async () => {
      routers = await Promise.all(
        [0, 1].map(() => startTestRouter({ workers: workers.map((s) => s.url), policy: 'cache_aware' })),
      );
      envoy = await gatewayEnvoy(t, routers);
    }, 60_000);

    afterAll(async () => {
      await envoy?.close();
      await Promise.all(routers.map((r) => r.close()));
    });

    /** One chat turn through the gateway; the index of the replica that routed it. */
    const turn = (session: string | undefined, system: string, question: string): Promise<number> =>
      replicaThatServed(routers, () =>
        post(
          envoy,
          '/v1/chat/completions',
          {
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: question },
            ],
            max_tokens: 2,
          },
          session ? { 'x-session-id': session } : {},
        ),
      );

    it('every request of a session reaches one replica, and sessions spread over both', async () => {
      const replicaOf = new Map<string, Set<number>>();
      for (let round = 0; round < 3; round++) {
        for (let s = 0; s < 16; s++) {
          // One system prompt for everyone: only the session key can tell the sessions apart.
          const r = await turn(`session-${s}`, 'You are a helpful assistant.', `session ${s}, turn ${round}`);
          replicaOf.set(`session-${s}`, (replicaOf.get(`session-${s}`) ?? new Set()).add(r));
        }
      }
      for (const [session, seen] of replicaOf) expect(seen.size, session).toBe(1);
      const first = new Set([...replicaOf.values()].map((seen) => [...seen][0]));
      expect(first).toEqual(new Set([0, 1]));
    });

    it('without a session key, requests that open alike reach one replica; different openings spread', async () => {
      const replicaOf = new Map<number, Set<number>>();
      for (let round = 0; round < 3; round++) {
        for (let tenant = 0; tenant < 16; tenant++) {
          const system = `Tenant ${tenant} contract. ${'Clause. '.repeat(40)}`;
          const r = await turn(undefined, system, `question ${round} of tenant ${tenant}`);
          replicaOf.set(tenant, (replicaOf.get(tenant) ?? new Set()).add(r));
        }
      }
      for (const [tenant, seen] of replicaOf) expect(seen.size, `tenant ${tenant}`).toBe(1);
      expect(new Set([...replicaOf.values()].map((seen) => [...seen][0]))).toEqual(new Set([0, 1]));
      // The key chose a replica; no worker ever saw it.
      for (const s of workers) {
        for (const rec of s.records) expect(rec.headers['x-vllm-router-prefix-key']).toBeUndefined();
      }
      for (const r of routers) await expectAllLoadsZero(r);
    });
  });
});
