/**
 * A router (a new or restarted replica) reports ready only once it has rebuilt its picture of the
 * fleet from the workers: here, the KV-event stream of its one worker (real ZMQ publisher, real
 * router, real gRPC health). Until then `/readyz` answers 503 naming what it waits for and the gRPC
 * health that Envoy checks says NOT_SERVING; a publisher that never comes keeps it out only until
 * --warmup-timeout-ms.
 */
import http from 'node:http';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Router } from '../../../src/router.js';
import { KvEventPublisher } from '../../../src/sim/kv-event-publisher.js';
import { freePort } from '../../support/free-ports.js';
import { adminJson, startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';
import { healthClient } from './router-child.js';

const EXTPROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startRouterWithKvSource(overrides: Record<string, unknown> = {}) {
  const workerUrl = 'http://127.0.0.1:18000';
  const endpoint = `tcp://127.0.0.1:${await freePort()}`;
  const router: Router = await startTestRouter({
    workers: [workerUrl],
    policy: 'kv_aware',
    kvEventSource: [`${workerUrl}=${endpoint}`],
    ...overrides,
  });
  cleanups.push(() => router.close());
  const health = healthClient(router.grpcPort);
  cleanups.push(() => health.close());
  const readyz = () => adminJson<{ status: string; warmingUp?: string[] }>(router, '/readyz');
  return { router, health, readyz, endpoint };
}

describe('warm-up', () => {
  it('is not ready until the KV-event stream of every worker is connected, then ready', async () => {
    const { health, readyz, endpoint } = await startRouterWithKvSource({ warmupTimeoutMs: 600_000 });
    const before = await readyz();
    expect(before.status).toBe(503);
    expect(before.body.warmingUp).toEqual(['kv events synced']);
    for (const name of ['', 'readiness', EXTPROC_SERVICE])
      expect(await health.check(name)).toBe('NOT_SERVING');
    // Liveness is not warm-up: the process is up.
    expect(await health.check('liveness')).toBe('SERVING');

    const publisher = new KvEventPublisher({ endpoint });
    cleanups.push(() => publisher.close());
    await publisher.start();

    await waitFor(async () => (await readyz()).status === 200, { timeoutMs: 20_000, message: 'ready' });
    expect((await readyz()).body.warmingUp).toBeUndefined();
    for (const name of ['', 'readiness', EXTPROC_SERVICE]) expect(await health.check(name)).toBe('SERVING');
  });

  it('a publisher that never comes keeps the router out only until --warmup-timeout-ms', async () => {
    const { health, readyz } = await startRouterWithKvSource({ warmupTimeoutMs: 300 });
    await waitFor(async () => (await readyz()).status === 200, { timeoutMs: 20_000, message: 'ready' });
    expect(await health.check(EXTPROC_SERVICE)).toBe('SERVING');
  });

  it.each([
    {
      page: '/metrics',
      waitsFor: 'worker metrics scraped',
      config: { scrapeIntervalMs: 50 },
      body: '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 0\n',
    },
    {
      page: '/v1/models',
      waitsFor: 'worker models listed',
      config: { modelsIntervalMs: 60_000 },
      body: '{"object":"list","data":[{"id":"m"}]}',
    },
  ])("is not ready until every worker's $page has been read once", async ({ waitsFor, config, body }) => {
    // A worker whose pages answer only when the test says so.
    const held: http.ServerResponse[] = [];
    let release = false;
    const answer = (res: http.ServerResponse) => res.end(body);
    const worker = http.createServer((req, res) => (release ? answer(res) : held.push(res)));
    await new Promise<void>((r) => worker.listen(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => worker.close(() => r())));
    cleanups.push(() => held.splice(0).forEach((res) => res.destroy()));
    const port = (worker.address() as net.AddressInfo).port;
    const router = await startTestRouter({
      workers: [`http://127.0.0.1:${port}`],
      ...config,
      scrapeTimeoutMs: 600_000,
      warmupTimeoutMs: 600_000,
    });
    cleanups.push(() => router.close());
    await waitFor(() => held.length > 0, { message: 'first read arrived' });
    const before = await adminJson<{ warmingUp?: string[] }>(router, '/readyz');
    expect(before.status).toBe(503);
    expect(before.body.warmingUp).toEqual([waitsFor]);
    release = true;
    held.splice(0).forEach(answer);
    await waitFor(async () => (await adminJson(router, '/readyz')).status === 200, {
      timeoutMs: 20_000,
      message: 'ready',
    });
  });

  it('a router with nothing to warm is ready at once', async () => {
    const router = await startTestRouter({ workers: ['http://127.0.0.1:18001'] });
    cleanups.push(() => router.close());
    expect((await adminJson(router, '/readyz')).status).toBe(200);
  });
});
