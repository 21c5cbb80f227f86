/**
 * The endpoint-picker protocol's metadata from the data plane, through real Envoy 1.40:
 *
 * - Fallback endpoints: the router names a second worker after the chosen one
 *   (`--fallback-endpoints 1`), Envoy's override_host policy walks that list on a retry, and reports
 *   the endpoint that served in the `envoy.lb` metadata, which moves the request's load to it. One of
 *   the two workers the router knows is dead (its port refuses connections) and the router does not
 *   know it yet (no health checks, no scrapes), as in the seconds after a worker crashes.
 * - The endpoint subset: a filter before ext_proc sets `envoy.lb.subset_hint`, and the router
 *   chooses among those endpoints only.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { renderEnvoyConfig } from '../../src/envoy/envoy-config.js';
import type { Router } from '../../src/router.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { freePort } from '../support/free-ports.js';

let envoy: EnvoyHandle | undefined;
let router: Router | undefined;
let live: Simulator | undefined;
let extra: Simulator | undefined;

afterEach(async () => {
  await envoy?.close();
  await router?.close();
  await live?.close();
  await extra?.close();
  envoy = router = live = extra = undefined;
});

async function stack(
  fallbackEndpoints: number,
): Promise<{ url: string; dead: string; deadEndpoint: string; live: Simulator; router: Router }> {
  live = await startSimulator({ timeScale: 0 });
  const deadPort = await freePort();
  const dead = `http://127.0.0.1:${deadPort}`;
  router = await startTestRouter({
    workers: [dead, live.url],
    policy: 'round_robin',
    fallbackEndpoints,
    decisionHeader: true,
  });
  envoy = await startEnvoy({
    routers: [{ host: '127.0.0.1', port: router.grpcPort }],
    fallback: {
      workers: [
        { host: '127.0.0.1', port: deadPort },
        { host: '127.0.0.1', port: live.port },
      ],
      retries: 1,
    },
  });
  return {
    url: `http://127.0.0.1:${envoy.listenerPort}`,
    dead,
    deadEndpoint: `127.0.0.1:${deadPort}`,
    live,
    router,
  };
}

describe('fallback endpoints (override_host, real Envoy)', () => {
  it('a request routed to a worker that refuses it is served by the next endpoint; its load moves there', async () => {
    const s = await stack(1);
    const liveEndpoint = `127.0.0.1:${s.live.port}`;
    const answers: Array<{ status: number; decision: string; text: string }> = [];
    for (let n = 0; n < 6; n++) {
      const res = await fetch(`${s.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim-model',
          prompt: `fallback ${n}`,
          max_tokens: 3,
          stream: n % 2 === 1,
        }),
      });
      answers.push({
        status: res.status,
        decision: res.headers.get('x-vllm-router-decision') ?? '',
        text: await res.text(),
      });
    }
    // Every request answered, every one by the live worker.
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(s.live.records).toHaveLength(6);
    // Those the router sent to the dead worker carried it first and the live one as the fallback,
    // and their decision names the worker that served them.
    const failedOver = answers.filter((a) => branchOf(a.decision) === 'failover');
    expect(failedOver.length).toBeGreaterThan(0);
    for (const a of failedOver) expect(workerOf(a.decision)).toBe(s.live.url);
    const lists = s.live.records.map((r) => r.headers['x-gateway-destination-endpoint']);
    expect(lists.filter((l) => l === `${s.deadEndpoint},${liveEndpoint}`)).toHaveLength(failedOver.length);
    expect(lists.filter((l) => l === `${liveEndpoint},${s.deadEndpoint}`)).toHaveLength(
      6 - failedOver.length,
    );
    // Counted against the dead worker; the load it briefly held moved, and everything is back to 0.
    const metrics = await metricsText(s.router);
    expect(metrics).toContain(
      `vllm_router_failovers_total{worker="${s.dead}",adopted="true"} ${failedOver.length}`,
    );
    expect(metrics).toMatch(/vllm_router_policy_decisions_total\{[^}]*branch="failover"[^}]*\} [1-9]/);
    await expectAllLoadsZero(s.router);
    const deadWorker = s.router.workers().find((w) => w.url === s.dead);
    expect(deadWorker?.processed).toBe(failedOver.length);
    const liveWorker = s.router.workers().find((w) => w.url === s.live.url);
    expect(liveWorker?.processed).toBe(6);
  });

  it('a Responses API request named for the dead worker is retried there only, never on a host the router did not name', async () => {
    // Its body carries a response id naming its worker, so it gets no fallback: its list repeats the
    // chosen endpoint, and Envoy's retry stays on it instead of asking its own balancer (which would
    // pick the live worker, or one the router has cordoned or put to sleep).
    const s = await stack(1);
    const liveEndpoint = `127.0.0.1:${s.live.port}`;
    const answers: Array<{ status: number; decision: string }> = [];
    for (let n = 0; n < 6; n++) {
      const res = await fetch(`${s.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', input: `named ${n}`, max_output_tokens: 3 }),
      });
      answers.push({ status: res.status, decision: res.headers.get('x-vllm-router-decision') ?? '' });
      await res.text();
    }
    // Round robin over the two: three to each. Those to the live worker are answered there, with its
    // endpoint in both slots; those to the dead one get Envoy's 503 and reach no other worker.
    const toDead = answers.filter((a) => workerOf(a.decision) === s.dead);
    expect(toDead).toHaveLength(3);
    for (const a of toDead) expect(a.status).toBe(503);
    expect(answers.filter((a) => a.status === 200)).toHaveLength(3);
    expect(s.live.records).toHaveLength(3);
    for (const r of s.live.records) {
      expect(r.headers['x-gateway-destination-endpoint']).toBe(`${liveEndpoint},${liveEndpoint}`);
    }
    expect(await metricsText(s.router)).not.toContain(`vllm_router_failovers_total{worker="${s.dead}"`);
    await expectAllLoadsZero(s.router);
  });

  it("without fallback endpoints the destination names one worker; a response Envoy's own balancer served elsewhere still moves the load", async () => {
    const s = await stack(0);
    const answers: Array<{ status: number; worker: string; branch: string }> = [];
    for (let n = 0; n < 8; n++) {
      const res = await fetch(`${s.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: `single ${n}`, max_tokens: 2 }),
      });
      const decision = res.headers.get('x-vllm-router-decision') ?? '';
      answers.push({ status: res.status, worker: workerOf(decision), branch: branchOf(decision) });
      await res.text();
    }
    // One endpoint per request (what an ORIGINAL_DST cluster needs).
    for (const r of s.live.records) expect(r.headers['x-gateway-destination-endpoint']).not.toContain(',');
    // A request routed to the dead worker fails over to whatever Envoy's least_request fallback picks
    // on its one retry: the dead worker again (Envoy's 503) or the live one. Every one the live worker
    // answered names it, and those routed to the dead worker say so.
    const served = answers.filter((a) => a.status === 200);
    expect(served.length).toBe(s.live.records.length);
    for (const a of served) expect(a.worker).toBe(s.live.url);
    const adopted = s.live.records.filter(
      (r) => r.headers['x-gateway-destination-endpoint'] === s.deadEndpoint,
    );
    expect(served.filter((a) => a.branch === 'failover')).toHaveLength(adopted.length);
    const metrics = await metricsText(s.router);
    if (adopted.length > 0) {
      expect(metrics).toContain(
        `vllm_router_failovers_total{worker="${s.dead}",adopted="true"} ${adopted.length}`,
      );
    }
    await expectAllLoadsZero(s.router);
  });
});

function workerOf(decision: string): string {
  return /worker=([^;\s]+)/.exec(decision)?.[1] ?? '';
}

function branchOf(decision: string): string {
  return /branch=([^;\s]+)/.exec(decision)?.[1] ?? '';
}

describe("the gateway's endpoint subset (envoy.lb.subset_hint, real Envoy)", () => {
  type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

  /** Envoy with a set_metadata filter before ext_proc that allows `subset` only. */
  async function withSubset(routerPort: number, subset: string[]): Promise<string> {
    const doc = parse(renderEnvoyConfig({ routers: [{ host: '127.0.0.1', port: routerPort }] })) as Yaml;
    const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config as Yaml;
    const filters = hcm.http_filters as Yaml[];
    const extProc = filters.find((f) => f.name === 'envoy.filters.http.ext_proc') as Yaml;
    extProc.typed_config.metadata_options.forwarding_namespaces = { untyped: ['envoy.lb.subset_hint'] };
    filters.splice(filters.indexOf(extProc), 0, {
      name: 'envoy.filters.http.set_metadata',
      typed_config: {
        '@type': 'type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config',
        metadata: [
          {
            metadata_namespace: 'envoy.lb.subset_hint',
            value: { 'x-gateway-destination-endpoint-subset': subset },
          },
        ],
      },
    });
    envoy = await startEnvoy({ config: stringify(doc) });
    return `http://127.0.0.1:${envoy.listenerPort}`;
  }

  it('every request goes to a worker of the subset; a subset with none of them gets a JSON 503', async () => {
    live = await startSimulator({ timeScale: 0 });
    extra = await startSimulator({ timeScale: 0 });
    router = await startTestRouter({ workers: [live.url, extra.url], policy: 'round_robin' });
    const url = await withSubset(router.grpcPort, [`127.0.0.1:${extra.port}`]);
    for (let n = 0; n < 4; n++) {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: `subset ${n}`, max_tokens: 2 }),
      });
      expect(res.status, await res.text()).toBe(200);
    }
    expect([live.records.length, extra.records.length]).toEqual([0, 4]);
    await expectAllLoadsZero(router);
    await envoy?.close();

    const none = await withSubset(router.grpcPort, ['10.255.255.1:8000']);
    const res = await fetch(`${none}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'outside', max_tokens: 2 }),
    });
    expect(res.status).toBe(503);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('no_workers');
    expect(body.error.message).toContain('x-gateway-destination-endpoint-subset');
    expect([live.records.length, extra.records.length]).toEqual([0, 4]);
    await expectAllLoadsZero(router);
  });
});
