/**
 * Hostile and broken input through a real Envoy 1.40. Every case ends in a clear JSON error (or an
 * Envoy local reply for what Envoy itself refuses) or a counted drop; the router never crashes and
 * every worker's load is back to 0 after each case.
 *
 * Size limits: the router runs with --max-body-bytes 24 MiB; Envoy's listener buffers 32 MiB
 * (envoy/envoy.yaml per_connection_buffer_limit_bytes). So a 20 MB prompt routes, a body just over
 * 24 MiB gets the router's JSON 413, and a 40 MiB body gets Envoy's own 413 before the router sees it.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import * as zmq from 'zeromq';
import { startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Router } from '../../src/router.js';

const MiB = 1024 * 1024;
const MAX_BODY = 24 * MiB;
const TOKEN = 'hostile-test-token';

interface ErrorBody {
  error: { message: string; type: string; code: string };
}

async function send(
  url: string,
  path: string,
  init: { method?: string; body?: string | Uint8Array<ArrayBuffer>; headers?: Record<string, string> } = {},
): Promise<{ status: number; text: string; json?: ErrorBody; contentType: string | null }> {
  const res = await fetch(`${url}${path}`, {
    method: init.method ?? 'POST',
    headers: init.headers ?? { 'content-type': 'application/json' },
    body: init.body,
  });
  const text = await res.text();
  let json: ErrorBody | undefined;
  try {
    json = JSON.parse(text) as ErrorBody;
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, contentType: res.headers.get('content-type') };
}

describe('hostile HTTP input (regular mode)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      workers: 2,
      router: { policy: 'round_robin', maxBodyBytes: MAX_BODY, adminToken: TOKEN },
    });
  });
  afterAll(async () => stack.close());
  afterEach(async () => {
    await expectAllLoadsZero(stack.router);
    // Still alive and serving after every case.
    expect((await adminJson(stack.router, '/healthz')).status).toBe(200);
  });

  const deep = (n: number) => `{"model":"sim-model","prompt":${'['.repeat(n)}${']'.repeat(n)}}`;
  it.each([
    ['truncated JSON', '{"model": "sim-model", "prompt": "x', 400, 'invalid_json'],
    ['not JSON at all', 'model=sim-model&prompt=x', 400, 'invalid_json'],
    ['100,000 nested arrays', deep(100_000), 400, 'invalid_json'],
    [
      'nested objects past the depth limit',
      `{"model":"m","prompt":"x","a":${'{"a":'.repeat(200)}1${'}'.repeat(200)}}`,
      400,
      'invalid_json',
    ],
    ['a JSON array body', '[1,2,3]', 400, 'invalid_body'],
    ['a JSON null body', 'null', 400, 'invalid_body'],
    ['model is a number', '{"model": 5, "prompt": "x"}', 400, 'missing_model'],
    ['prompt is an object', '{"model": "sim-model", "prompt": {"a": 1}}', 400, 'invalid_prompt'],
    ['prompt is null', '{"model": "sim-model", "prompt": null}', 400, 'invalid_prompt'],
    [
      'stream is a string pydantic refuses',
      '{"model": "sim-model", "prompt": "x", "stream": "maybe"}',
      400,
      'invalid_body',
    ],
    ['an empty body', '', 400, 'invalid_body'],
  ])('/v1/completions with %s', async (_name, body, status, code) => {
    const records = () => stack.sims.reduce((n, s) => n + s.records.length, 0);
    const before = records();
    const r = await send(stack.url, '/v1/completions', { body });
    expect(r.status).toBe(status);
    expect(r.contentType).toContain('application/json');
    expect(r.json?.error.code).toBe(code);
    expect(records()).toBe(before); // answered by the router, never reached a worker
  });

  it.each([
    ['messages is a string', '{"model": "sim-model", "messages": "hi"}', 'invalid_messages'],
    ['messages is empty', '{"model": "sim-model", "messages": []}', 'invalid_messages'],
    [
      'a message without a role',
      '{"model": "sim-model", "messages": [{"content": "hi"}]}',
      'invalid_messages',
    ],
    ['a message that is a number', '{"model": "sim-model", "messages": [7]}', 'invalid_messages'],
  ])('/v1/chat/completions with %s', async (_name, body, code) => {
    const r = await send(stack.url, '/v1/chat/completions', { body });
    expect(r.status).toBe(400);
    expect(r.json?.error.code).toBe(code);
  });

  it.each([
    [
      'messages is a string',
      '{"model": "sim-model", "max_tokens": 1, "messages": "hi"}',
      400,
      'invalid_messages',
    ],
    [
      'a role vLLM refuses',
      '{"model": "sim-model", "messages": [{"role": "tool", "content": "x"}]}',
      400,
      'invalid_messages',
    ],
    [
      'a block without a type',
      '{"model": "sim-model", "messages": [{"role": "user", "content": [{"text": "x"}]}]}',
      400,
      'invalid_messages',
    ],
    [
      'system is a number',
      '{"model": "sim-model", "system": 3, "messages": [{"role": "user", "content": "x"}]}',
      400,
      'invalid_messages',
    ],
    ['truncated JSON', '{"model": "sim-model", "messages": [', 400, 'invalid_json'],
    ['model is missing', '{"messages": [{"role": "user", "content": "x"}]}', 400, 'missing_model'],
  ])("/v1/messages with %s: Anthropic's error shape", async (_name, body, status, code) => {
    const records = () => stack.sims.reduce((n, s) => n + s.records.length, 0);
    const before = records();
    const r = await send(stack.url, '/v1/messages', { body });
    expect(r.status).toBe(status);
    expect(JSON.parse(r.text)).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code },
    });
    expect(records()).toBe(before);
  });

  it('rejects non-UTF-8 bytes with a JSON 400', async () => {
    const body = Buffer.concat([
      Buffer.from('{"model": "sim-model", "prompt": "'),
      Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0x80]),
      Buffer.from('"}'),
    ]);
    const r = await send(stack.url, '/v1/completions', {
      body: new Uint8Array(body),
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).toBe(400);
    expect(r.json?.error.code).toBe('invalid_body');
    expect(r.json?.error.message).toMatch(/UTF-8/);
  });

  it('rejects a non-JSON content-type with 415 and accepts a missing one', async () => {
    const body = JSON.stringify({ model: 'sim-model', prompt: 'content type', max_tokens: 1 });
    const wrong = await send(stack.url, '/v1/completions', {
      body,
      headers: { 'content-type': 'text/plain' },
    });
    expect(wrong.status).toBe(415);
    expect(wrong.json?.error.code).toBe('invalid_content_type');
    // A Uint8Array body makes fetch send no content-type at all.
    const missing = await send(stack.url, '/v1/completions', {
      body: new TextEncoder().encode(body),
      headers: {},
    });
    expect(missing.status).toBe(200);
    expect(JSON.parse(missing.text).choices).toHaveLength(1);
  });

  it('routes a 20 MB prompt (within every limit)', async () => {
    const prompt = 'x'.repeat(20_000_000);
    const r = await send(stack.url, '/v1/completions', {
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 1 }),
    });
    expect(r.status).toBe(200);
    expect(JSON.parse(r.text).usage.prompt_tokens).toBeGreaterThan(0);
  });

  // Just over the limit, and well over it (past the old gRPC message limit of maxBodyBytes + 1 MiB)
  // but still inside Envoy's buffer: both are the router's JSON 413.
  it.each([
    ['just over', MAX_BODY + 64 * 1024],
    ['4 MiB over', MAX_BODY + 4 * MiB],
  ])("answers the router's JSON 413 %s --max-body-bytes", async (_name, size) => {
    const r = await send(stack.url, '/v1/completions', {
      body: JSON.stringify({ model: 'sim-model', prompt: 'y'.repeat(size) }),
    });
    expect(r.status).toBe(413);
    expect(r.json?.error.code).toBe('body_too_large');
    expect(r.json?.error.message).toContain(String(MAX_BODY));
  });

  it("answers Envoy's own 413 above Envoy's buffer limit; the router never sees the body", async () => {
    const before = await metricsText(stack.router);
    const r = await send(stack.url, '/v1/completions', {
      body: JSON.stringify({ model: 'sim-model', prompt: 'z'.repeat(40 * MiB) }),
    });
    expect(r.status).toBe(413);
    expect(r.text).toBe('Payload Too Large');
    expect(stack.sims.some((s) => s.inFlight() > 0)).toBe(false);
    // The router saw only the headers of that request: it ended as 'abandoned' (never routed).
    const after = await metricsText(stack.router);
    expect(counter(after, 'vllm_router_requests_total', 'outcome="abandoned"')).toBe(
      counter(before, 'vllm_router_requests_total', 'outcome="abandoned"') + 1,
    );
  });

  it('routes unknown paths and methods unchanged to a worker, which answers them', async () => {
    const del = await send(stack.url, '/v1/completions', { method: 'DELETE', headers: {} });
    expect(del.status).toBe(405);
    expect(del.json?.error.message).toMatch(/method DELETE not allowed/);
    const nope = await send(stack.url, '/nope', { method: 'GET', headers: {} });
    expect(nope.status).toBe(404);
    expect(nope.json?.error.message).toBe('no route /nope');
    const put = await send(stack.url, '/v1/models', { method: 'PUT', body: '{}' });
    expect(put.status).toBe(404);
    const text = await metricsText(stack.router);
    expect(
      counter(text, 'vllm_router_requests_total', 'route="other",outcome="upstream_4xx"'),
    ).toBeGreaterThanOrEqual(3);
  });

  it('never routes by client-supplied destination or prefiller headers, and keeps X-Request-Id out of routing', async () => {
    const rogue = await startSimulator({ timeScale: 0 });
    try {
      const seen = new Set<string>();
      for (let i = 0; i < 6; i++) {
        const r = await fetch(`${stack.url}/v1/completions`, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-gateway-destination-endpoint': rogue.hostPort,
            'X-Gateway-Destination-Endpoint': rogue.hostPort,
            'x-prefiller-host-port': rogue.hostPort,
            'x-request-id': 'same-id-every-time',
          },
          body: JSON.stringify({ model: 'sim-model', prompt: `steer ${i}`, max_tokens: 1 }),
        });
        expect(r.status).toBe(200);
        await r.text();
      }
      expect(rogue.records.length).toBe(0);
      for (const s of stack.sims) {
        for (const rec of s.records.filter((x) =>
          (x.body as { prompt?: string }).prompt?.startsWith('steer'),
        )) {
          seen.add(s.url);
          // The worker never sees the client's routing headers.
          expect(rec.headers['x-prefiller-host-port']).toBeUndefined();
          expect(rec.headers['x-gateway-destination-endpoint']).toBe(s.hostPort);
        }
      }
      // round_robin spread them: a constant request id did not pin them anywhere.
      expect(seen.size).toBe(2);
    } finally {
      await rogue.close();
    }
  });

  it('refuses admin writes without the bearer token (401); reads stay open', async () => {
    const base = `http://127.0.0.1:${stack.router.adminPort}`;
    const reg = JSON.stringify({ role: 'regular', url: 'http://127.0.0.1:1' });
    const writes: RequestInit[] = [
      { method: 'POST', body: reg, headers: { 'content-type': 'application/json' } },
      { method: 'POST', body: reg, headers: { authorization: 'Bearer wrong' } },
      { method: 'POST', body: reg, headers: { authorization: `Basic ${TOKEN}` } },
      { method: 'POST', body: reg, headers: { authorization: `Bearer ${TOKEN}x` } },
      { method: 'DELETE', headers: {} },
    ];
    for (const init of writes) {
      const path = init.method === 'DELETE' ? `/workers?role=regular&url=${stack.sims[0]!.url}` : '/workers';
      const res = await fetch(`${base}${path}`, init);
      expect(res.status).toBe(401);
      expect(((await res.json()) as ErrorBody).error.code).toBe('unauthorized');
    }
    expect(
      stack.router
        .workers()
        .map((w) => w.url)
        .sort(),
    ).toEqual(stack.sims.map((s) => s.url).sort());
    expect((await fetch(`${base}/workers`)).status).toBe(200);
  });
});

describe('hostile input in P/D mode with ZMQ discovery', () => {
  let router: Router;
  let envoy: EnvoyHandle;
  let prefill: Simulator;
  let decode: Simulator;
  let url: string;
  const sockets: zmq.Dealer[] = [];

  beforeAll(async () => {
    router = await startTestRouter({
      mode: 'pd',
      discoveryZmq: 'tcp://127.0.0.1:0',
      discoveryTtlMs: 3000,
      discoveryAllow: ['127.0.0.0/8'],
      prefillPolicy: 'round_robin',
      decodePolicy: 'round_robin',
    });
    const register = { zmq: router.discoveryEndpoint!, intervalMs: 200 };
    prefill = await startSimulator({ role: 'prefill', timeScale: 0, register });
    decode = await startSimulator({ role: 'decode', timeScale: 0, register });
    await waitFor(() => router.workers().length === 2, { message: 'both workers registered' });
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    url = `http://127.0.0.1:${envoy.listenerPort}`;
  });
  afterAll(async () => {
    for (const s of sockets) s.close();
    await envoy?.close();
    await router?.close();
    await prefill?.close();
    await decode?.close();
  });
  afterEach(async () => expectAllLoadsZero(router));

  function dealer(id: string): zmq.Dealer {
    const s = new zmq.Dealer({ routingId: id, linger: 0, sendTimeout: 2000 });
    s.connect(router.discoveryEndpoint!);
    sockets.push(s);
    return s;
  }

  const completion = (headers: Record<string, string> = {}, prompt = 'pd hostile') =>
    fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2 }),
    });

  it("uses the router's P/D request id, never the client's X-Request-Id or prefiller header", async () => {
    const rogue = await startSimulator({ timeScale: 0 });
    try {
      const res = await completion(
        {
          'X-Request-Id': 'client-chosen-id',
          'x-prefiller-host-port': rogue.hostPort,
          'x-gateway-destination-endpoint': rogue.hostPort,
        },
        'pd steer',
      );
      expect(res.status).toBe(200);
      await res.text();
      const d = decode.records.find((r) => (r.body as { prompt?: string }).prompt === 'pd steer')!;
      expect(d.requestId).toMatch(/^___prefill_addr_.+___decode_addr_.+_[0-9a-f]{32}$/);
      expect(d.requestId).not.toContain('client-chosen-id');
      expect(d.headers['x-prefiller-host-port']).toBeUndefined();
      expect(prefill.findRecord(d.requestId)).toBeDefined();
      expect(rogue.records.length).toBe(0);
    } finally {
      await rogue.close();
    }
  });

  it('drops garbage, truncated, multipart, oversized, foreign and flooded frames; good senders still register', async () => {
    const before = await metricsText(router);
    const good = encode({ type: 'P', http_address: '127.0.0.1:9', zmq_address: '127.0.0.1:19' });
    const bad = dealer('bad-sender');
    await bad.send(Buffer.from('definitely not msgpack'));
    await bad.send(Buffer.from(good.subarray(0, good.length - 5))); // truncated
    await bad.send(Buffer.concat([Buffer.from(good), Buffer.from([0xc1])])); // trailing garbage
    await bad.send(Buffer.from(encode([1, 2, 3]))); // not a map
    await bad.send(Buffer.from(encode({ type: 'X', http_address: '127.0.0.1:9', zmq_address: 'a:1' })));
    await bad.send(Buffer.from(encode({ type: 'D', http_address: 'no-port', zmq_address: 'a:1' })));
    await bad.send([Buffer.from(good), Buffer.from(good)]); // two frames
    await bad.send(
      Buffer.from(encode({ type: 'D', http_address: '10.9.8.7:8000', zmq_address: '10.9.8.7:1' })),
    );
    // Oversized (> 64 KiB): libzmq drops the frame by disconnecting this peer.
    const big = dealer('big-sender');
    await big.send(
      Buffer.from(encode({ type: 'P', http_address: '127.0.0.1:9', zmq_address: 'x'.repeat(100_000) })),
    );
    // A bounded flood of garbage from one more sender.
    const flood = dealer('flood-sender');
    const FLOOD = 5000;
    for (let i = 0; i < FLOOD; i++) await flood.send(Buffer.from([0xc1, i & 0xff]));

    await waitFor(
      async () =>
        counter(await metricsText(router), 'vllm_router_discovery_rejected_total', 'reason="not_msgpack"') -
          counter(before, 'vllm_router_discovery_rejected_total', 'reason="not_msgpack"') >=
        FLOOD + 3,
      { timeoutMs: 20_000, message: 'flood counted' },
    );
    const after = await metricsText(router);
    const delta = (reason: string) =>
      counter(after, 'vllm_router_discovery_rejected_total', `reason="${reason}"`) -
      counter(before, 'vllm_router_discovery_rejected_total', `reason="${reason}"`);
    expect(delta('not_msgpack')).toBe(FLOOD + 3);
    expect(delta('not_a_map')).toBe(1);
    expect(delta('unknown_type')).toBe(1);
    expect(delta('bad_address')).toBe(1);
    expect(delta('multipart')).toBe(1);
    expect(delta('not_allowed')).toBe(1);

    // Only the two real workers are registered, and they keep heartbeating through the flood.
    expect(
      router
        .workers()
        .map((w) => w.url)
        .sort(),
    ).toEqual([decode.url, prefill.url].sort());
    const beats = counter(after, 'vllm_router_discovery_updates_total', 'event="heartbeat"');
    await waitFor(
      async () =>
        counter(await metricsText(router), 'vllm_router_discovery_updates_total', 'event="heartbeat"') >
        beats + 2,
      { message: 'heartbeats after the flood' },
    );
    // And requests still route.
    const res = await completion({}, 'after the flood');
    expect(res.status).toBe(200);
    await res.text();
  });
});

/** Sum of a counter's samples whose labels contain `labels` (a substring of the label set). */
function counter(text: string, name: string, labels: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.indexOf('}');
    if (line.slice(name.length + 1, close).includes(labels)) sum += Number(line.slice(close + 2));
  }
  return sum;
}
