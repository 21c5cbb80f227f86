/**
 * The ext_proc server driven by a real grpc-js client exactly as Envoy drives it (BUFFERED request
 * body, STREAMED response body), on real ports. Covers every way a stream can end.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import * as grpc from '@grpc/grpc-js';
import type { Router } from '../../../src/router.js';
import {
  ExtProcTestClient,
  removedHeaders,
  requestBody,
  requestHeaders,
  responseBody,
  responseHeaders,
  setHeader,
} from '../../support/extproc-client.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';

const WORKERS = ['http://127.0.0.1:18001', 'http://127.0.0.1:18002', 'http://127.0.0.1:18003'];
const completion = { model: 'm', prompt: 'hello world', max_tokens: 4, stream: true };

let router: Router;
let client: ExtProcTestClient;

beforeAll(async () => {
  router = await startTestRouter({ workers: WORKERS, policy: 'round_robin', decisionHeader: true });
  client = new ExtProcTestClient(router.grpcPort);
});
afterAll(async () => {
  client.close();
  await router.close();
});
afterEach(async () => {
  await expectAllLoadsZero(router);
});

function loadOf(endpoint: string): number {
  return router.workers().find((w) => w.endpoint === endpoint)?.load ?? -1;
}

describe('ext_proc server', () => {
  it('routes a completion on its body, holds the load until response end-of-stream, then releases it', async () => {
    const s = client.open();
    const h = await s.send(
      requestHeaders('POST', '/v1/completions', { 'x-gateway-destination-endpoint': '6.6.6.6:1' }),
    );
    expect(h?.request_headers).toBeDefined();
    expect(removedHeaders(h)).toContain('x-gateway-destination-endpoint');

    const b = await s.send(requestBody(completion));
    const dest = setHeader(b, 'x-gateway-destination-endpoint');
    expect(dest).toMatch(/^127\.0\.0\.1:1800[123]$/);
    expect(b?.request_body?.response?.clear_route_cache).toBe(true);
    expect(
      b?.dynamic_metadata?.fields['envoy.lb']?.structValue?.fields['x-gateway-destination-endpoint']
        ?.stringValue,
    ).toBe(dest);
    expect(loadOf(dest as string)).toBe(1);

    const rh = await s.send(responseHeaders(200));
    expect(setHeader(rh, 'x-vllm-router-decision')).toContain('policy=round_robin');
    expect(loadOf(dest as string)).toBe(1);
    await s.send(responseBody('data: {"x":1}\n\n'));
    expect(loadOf(dest as string)).toBe(1);
    await s.send(responseBody('data: [DONE]\n\n', true));
    expect(loadOf(dest as string)).toBe(0);
    s.cancel();
  });

  it('spreads round-robin traffic over all workers', async () => {
    const seen = new Map<string, number>();
    for (let i = 0; i < 6; i++) {
      const s = client.open();
      await s.send(requestHeaders('POST', '/v1/chat/completions'));
      const b = await s.send(requestBody({ model: 'm', messages: [{ role: 'user', content: `q${i}` }] }));
      const dest = setHeader(b, 'x-gateway-destination-endpoint') as string;
      seen.set(dest, (seen.get(dest) ?? 0) + 1);
      await s.send(responseHeaders(200, true));
      s.cancel();
    }
    expect([...seen.values()]).toEqual([2, 2, 2]);
  });

  it('routes body-less requests on their headers', async () => {
    const s = client.open();
    const r = await s.send(requestHeaders('GET', '/v1/models', {}, true));
    expect(setHeader(r, 'x-gateway-destination-endpoint')).toMatch(/^127\.0\.0\.1:/);
    await s.send(responseHeaders(200));
    await s.send(responseBody('{}', true));
    s.cancel();
  });

  it.each([
    ['malformed JSON', '{"model": "m", "prompt": ', 400, 'invalid_json'],
    ['a body that is not an object', '[1,2]', 400, 'invalid_body'],
    ['a missing prompt', '{"model":"m"}', 400, 'invalid_prompt'],
    ['a model that is not a string', '{"model":5,"prompt":"x"}', 400, 'missing_model'],
  ])('answers %s with a JSON %i and takes no load', async (_name, body, status, code) => {
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const r = await s.send(requestBody(body));
    expect(r?.immediate_response?.status.code).toBe(status);
    const parsed = JSON.parse((r?.immediate_response?.body as Buffer).toString());
    expect(parsed.error.code).toBe(code);
    expect(typeof parsed.error.message).toBe('string');
    s.cancel();
  });

  it('rejects a non-JSON content type with 415', async () => {
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions', { 'content-type': 'text/plain' }));
    const r = await s.send(requestBody(completion));
    expect(r?.immediate_response?.status.code).toBe(415);
    s.cancel();
  });

  it('releases the load when the stream is cancelled mid-response (client abort / upstream reset)', async () => {
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const b = await s.send(requestBody(completion));
    const dest = setHeader(b, 'x-gateway-destination-endpoint') as string;
    await s.send(responseHeaders(200));
    await s.send(responseBody('data: {}\n\n'));
    expect(loadOf(dest)).toBe(1);
    s.cancel();
    await waitFor(() => loadOf(dest) === 0);
  });

  it('releases the load when the stream ends before response headers (Envoy local reply)', async () => {
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const b = await s.send(requestBody(completion));
    const dest = setHeader(b, 'x-gateway-destination-endpoint') as string;
    expect(loadOf(dest)).toBe(1);
    s.halfClose();
    await waitFor(() => loadOf(dest) === 0);
    const text = await metricsText(router);
    expect(text).toMatch(/vllm_router_requests_total\{route="completions",outcome="no_response"\} [1-9]/);
  });

  it('counts a request ok when its last response chunk and the half-close arrive together', async () => {
    const okCount = async () =>
      Number(
        /vllm_router_requests_total\{route="completions",outcome="ok"\} (\d+)/.exec(
          await metricsText(router),
        )?.[1] ?? 0,
      );
    const before = await okCount();
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const b = await s.send(requestBody(completion));
    const dest = setHeader(b, 'x-gateway-destination-endpoint') as string;
    await s.send(responseHeaders(200));
    // One tick: the final chunk, then Envoy's half-close (its stream is done).
    s.write(responseBody('data: [DONE]\n\n', true));
    s.halfClose();
    expect(await s.next()).toMatchObject({ response_body: {} });
    await s.done;
    expect(loadOf(dest)).toBe(0);
    expect(await okCount()).toBe(before + 1);
  });

  it('releases exactly once when several end signals arrive', async () => {
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const b = await s.send(requestBody(completion));
    const dest = setHeader(b, 'x-gateway-destination-endpoint') as string;
    const w = router.workers().find((x) => x.endpoint === dest);
    const processedBefore = w?.processed ?? 0;
    await s.send(responseHeaders(500));
    await s.send(responseBody('oops', true));
    s.halfClose();
    s.cancel();
    await s.done;
    expect(w?.load).toBe(0);
    expect(w?.processed).toBe(processedBefore + 1);
  });

  it('answers 413 for bodies over the limit', async () => {
    const small = await startTestRouter({ workers: WORKERS, maxBodyBytes: 1000 });
    const c = new ExtProcTestClient(small.grpcPort);
    try {
      const s = c.open();
      await s.send(requestHeaders('POST', '/v1/completions'));
      const r = await s.send(requestBody({ model: 'm', prompt: 'x'.repeat(2000) }));
      expect(r?.immediate_response?.status.code).toBe(413);
      s.cancel();
      await expectAllLoadsZero(small);
    } finally {
      c.close();
      await small.close();
    }
  });

  it('reports gRPC health SERVING for every service name Envoy and gateways ask for', async () => {
    const { HealthClient } = await healthClient();
    for (const service of ['', 'liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor']) {
      const status = await new Promise<string>((resolve, reject) =>
        HealthClient.check({ service }, (err: Error | null, res: { status: string }) =>
          err ? reject(err) : resolve(res.status),
        ),
      );
      expect(status).toBe('SERVING');
    }
    HealthClient.close();
  });
});

describe('ext_proc server with no workers', () => {
  it('answers 503 naming the empty pool and creates no state', async () => {
    const empty = await startTestRouter({ workers: [] });
    const c = new ExtProcTestClient(empty.grpcPort);
    try {
      const s = c.open();
      await s.send(requestHeaders('POST', '/v1/completions'));
      const r = await s.send(requestBody(completion));
      expect(r?.immediate_response?.status.code).toBe(503);
      const body = JSON.parse((r?.immediate_response?.body as Buffer).toString());
      expect(body.error.message).toContain('0 regular');
      expect(empty.workers()).toEqual([]);
      s.cancel();
    } finally {
      c.close();
      await empty.close();
    }
  });
});

async function healthClient() {
  const protoLoader = await import('@grpc/proto-loader');
  const { protoPath } = await import('grpc-health-check');
  const def = protoLoader.loadSync(protoPath, { keepCase: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const HealthClient: any = new pkg.grpc.health.v1.Health(
    `127.0.0.1:${router.grpcPort}`,
    grpc.credentials.createInsecure(),
  );
  return { HealthClient };
}
