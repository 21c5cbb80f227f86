/**
 * End to end through a real Envoy 1.40 configured the way endpoint-picker gateways (Gateway API
 * Inference Extension) configure ext_proc: FULL_DUPLEX_STREAMED request AND response bodies, trailer
 * modes SEND, and `envoy.lb` allowed through `metadata_options.receiving_namespaces`.
 *
 * In FDS Envoy streams body chunks to the router while the headers reply is pending, and forwards
 * upstream ONLY what the router sends back as `streamed_response`; so a body that arrives intact at
 * the worker (checked byte for byte on a 1.5 MB prompt, the size at which Envoy 1.35-1.37 repeated the
 * final chunk) proves the echo path, and a full token count at the client proves the response echo.
 *
 * Probes check what the session relies on but cannot see itself: a bare ext_proc server records
 * Envoy's first message (Envoy 1.40 does carry `protocol_config` with both body modes), and Envoys whose
 * worker cluster reads the destination from the `envoy.lb` dynamic metadata only (header lookup off:
 * ORIGINAL_DST `metadata_key`, and the override_host policy Istio's InferencePool support uses) prove
 * the metadata reaches Envoy. Those Envoys are spawned here from the rendered reference config plus
 * that one structural edit, because startEnvoy() has no option for it.
 *
 * Observed with Envoy 1.40 (for reference; the session does not depend on it): a body is delivered as
 * data chunk(s) with end_of_stream false followed by an EMPTY chunk with end_of_stream true (a 1.5 MB
 * body arrived as one 1.5 MB chunk + the empty end chunk); no duplicate final chunk; with trailer mode
 * SEND and a client that sends no trailers, no trailers message arrives, and Envoy resets the stream
 * right after the reply to the final response chunk.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import OpenAI from 'openai';
import { parse, stringify } from 'yaml';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startEnvoy, findEnvoy } from '../../src/envoy/envoy-process.js';
import {
  overrideHostCluster,
  renderEnvoyConfig,
  type EnvoyRenderOptions,
} from '../../src/envoy/envoy-config.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import {
  BodySendMode,
  extProcService,
  type ProcessingRequest,
  type ProcessingResponse,
} from '../../src/extproc/proto.js';
import { DESTINATION_HEADER, LB_METADATA_NAMESPACE } from '../../src/extproc/headers.js';

/** How endpoint-picker gateways configure the ext_proc filter. */
type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const FDS: EnvoyRenderOptions = {
  requestBodyMode: 'FULL_DUPLEX_STREAMED',
  responseBodyMode: 'FULL_DUPLEX_STREAMED',
  trailerMode: 'SEND',
};

let stack: Stack;
let openai: OpenAI;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    // No pacing: a stream is kept in flight by a simulator hold (released by the test), not by time;
    // no simulated delays either, so the 1.5 MB prompts cost only their transport.
    router: { policy: 'round_robin' },
    envoy: FDS,
  });
  openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
});

const totalLoad = (s: Stack = stack) => s.router.workers().reduce((n, w) => n + w.load, 0);

/** Holds the next stream on every worker (round robin picks one) after `afterChunks` SSE events. */
function holdNextStream(afterChunks: number): { release(): void } {
  const holds = stack.sims.map((s) => s.hold({ afterChunks }));
  return { release: () => holds.forEach((h) => h.release()) };
}

describe('FULL_DUPLEX_STREAMED through Envoy', () => {
  it('serves a non-streaming completion with the full token count', async () => {
    const res = await openai.completions.create({ model: 'sim-model', prompt: 'Hello FDS', max_tokens: 5 });
    expect(res.usage?.completion_tokens).toBe(5);
    expect(res.choices[0]?.text.length).toBeGreaterThan(0);
    await waitFor(() => totalLoad() === 0);
  });

  it('serves a non-streaming chat completion', async () => {
    const res = await openai.chat.completions.create({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'hi over FDS' }],
      max_tokens: 4,
    });
    expect(res.usage?.completion_tokens).toBe(4);
    expect(res.choices[0]?.message.content?.length).toBeGreaterThan(0);
  });

  it('streams a chat completion, holding the load until the last chunk', async () => {
    // The role chunk and 5 of the 6 token chunks go out; the last token and [DONE] wait for release.
    const HELD = 6;
    const hold = holdNextStream(HELD);
    const stream = await openai.chat.completions.create({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'stream over FDS' }],
      max_tokens: 6,
      stream: true,
    });
    const loads: number[] = [];
    let contentChunks = 0;
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        if (chunk.choices[0]?.delta?.content) contentChunks += 1;
        if (!chunk.choices[0]?.finish_reason) loads.push(totalLoad());
        if (++chunks === HELD) hold.release();
      }
    } finally {
      hold.release();
    }
    expect(contentChunks).toBe(6);
    expect(loads.length).toBeGreaterThan(0);
    expect(new Set(loads)).toEqual(new Set([1]));
    await waitFor(() => totalLoad() === 0);
  });

  it('streams a completion with every token and [DONE]', async () => {
    const res = await fetch(`${stack.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'count to eight', max_tokens: 8, stream: true }),
    });
    expect(res.status).toBe(200);
    const text = await res.text();
    const events = text
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice(6));
    expect(events.at(-1)).toBe('[DONE]');
    const tokens = events
      .slice(0, -1)
      .map((e) => JSON.parse(e) as { choices: Array<{ text: string }> })
      .filter((e) => (e.choices[0]?.text ?? '') !== '');
    expect(tokens.length).toBe(8);
    await waitFor(() => totalLoad() === 0);
  });

  it('serves concurrent streams and releases every load', async () => {
    const one = async (i: number) => {
      const stream = await openai.completions.create({
        model: 'sim-model',
        prompt: `parallel ${i}`,
        max_tokens: 4,
        stream: true,
      });
      let n = 0;
      for await (const c of stream) if (c.choices[0]?.text) n += 1;
      return n;
    };
    const counts = await Promise.all(Array.from({ length: 8 }, (_, i) => one(i)));
    expect(counts).toEqual(Array.from({ length: 8 }, () => 4));
    await waitFor(() => totalLoad() === 0);
  });

  it('releases the load when the client aborts mid-stream', async () => {
    const hold = holdNextStream(2);
    const stream = await openai.completions.create({
      model: 'sim-model',
      prompt: 'abort me over FDS',
      max_tokens: 50,
      stream: true,
    });
    let seen = 0;
    try {
      for await (const _chunk of stream) {
        if (++seen === 2) {
          expect(totalLoad()).toBe(1);
          stream.controller.abort();
          break;
        }
      }
    } finally {
      hold.release();
    }
    await waitFor(() => totalLoad() === 0);
    await waitFor(() => stack.sims.every((s) => s.inFlight() === 0));
    const text = await metricsText(stack.router);
    expect(text).toMatch(/vllm_router_requests_total\{route="completions",outcome="cancelled"\} [1-9]/);
  });

  it('answers a malformed body with a JSON 400 and takes no load', async () => {
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model": "sim-model", "messages": [',
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as { error: { code: string } };
    expect(body.error.code).toBe('invalid_json');
    expect(totalLoad()).toBe(0);
  });

  it('passes a ~1.5 MB prompt through intact (the size that made Envoy repeat the final chunk)', async () => {
    const prompt = 'lorem ipsum dolor sit amet '.repeat(58_000); // 1,566,000 bytes
    const before = stack.sims.reduce((n, s) => n + s.records.length, 0);
    const res = await fetch(`${stack.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 3 }),
    });
    const text = await res.text();
    expect(res.status, text.slice(0, 300)).toBe(200);
    const body = JSON.parse(text) as { usage: { completion_tokens: number } };
    expect(body.usage.completion_tokens).toBe(3);
    const records = stack.sims.flatMap((s) => s.records);
    expect(records.length).toBe(before + 1);
    const rec = records.find((r) => (r.body as { prompt?: string }).prompt?.length === prompt.length);
    expect((rec?.body as { prompt?: string } | undefined)?.prompt === prompt).toBe(true);
    await waitFor(() => totalLoad() === 0);
  });

  it('streams a response to a ~1.5 MB prompt', async () => {
    const prompt = 'sed do eiusmod tempor '.repeat(70_000); // 1,540,000 bytes
    const stream = await openai.completions.create({
      model: 'sim-model',
      prompt,
      max_tokens: 5,
      stream: true,
    });
    let n = 0;
    for await (const c of stream) if (c.choices[0]?.text) n += 1;
    expect(n).toBe(5);
    await waitFor(() => totalLoad() === 0);
  });

  it('routes body-less requests such as GET /v1/models', async () => {
    const res = await fetch(`${stack.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<{ id: string }> };
    expect(body.data[0]?.id).toBe('sim-model');
  });

  it('ends with every load at 0 and no ext_proc stream open', async () => {
    await expectAllLoadsZero(stack.router);
    await waitFor(async () => /vllm_router_extproc_streams_active 0\b/.test(await metricsText(stack.router)));
    // Envoy saw no ext_proc protocol error (spurious message, timeout, failed stream).
    const stats = await stack.envoy.stats('ext_proc');
    for (const name of ['spurious_msgs_received', 'message_timeouts', 'streams_failed']) {
      // Envoy emits every ext_proc counter, zero or not: a missing line is a renamed stat, not a pass.
      const m = new RegExp(`\\.${name}: (\\d+)`).exec(stats);
      expect(m, `no ext_proc stat ${name} in\n${stats}`).not.toBeNull();
      expect(Number(m?.[1]), `${name}\n${stats}`).toBe(0);
    }
  });
});

describe('an empty pool behind FDS', () => {
  it('answers 503 with a JSON error', async () => {
    const empty = await startStack({ workers: 0, router: { policy: 'round_robin' }, envoy: FDS });
    try {
      const res = await fetch(`${empty.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: 'anyone?', max_tokens: 1 }),
      });
      expect(res.status).toBe(503);
      expect(res.headers.get('content-type')).toContain('application/json');
      const body = (await res.json()) as { error: { code: string } };
      expect(body.error.code).toBe('no_workers');
    } finally {
      await empty.close();
    }
  });
});

describe('what Envoy 1.40 sends in FDS', () => {
  it('announces the body modes in protocol_config on the first message', async () => {
    const seen: ProcessingRequest[] = [];
    const server = new grpc.Server();
    server.addService(extProcService().service, {
      Process: (call: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) => {
        call.on('error', () => undefined);
        call.on('data', (msg: ProcessingRequest) => {
          seen.push(msg);
          if (msg.request_headers) {
            call.write({
              immediate_response: { status: { code: 204 }, details: 'probe' },
            });
          }
        });
        call.on('end', () => call.end());
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) =>
        err ? reject(err) : resolve(p),
      ),
    );
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port }], ...FDS });
    try {
      const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt: 'probe' }),
      });
      expect(res.status).toBe(204);
      await res.text();
      const first = seen[0];
      expect(first?.request_headers).toBeDefined();
      expect(first?.protocol_config?.request_body_mode).toBe(BodySendMode.FULL_DUPLEX_STREAMED);
      expect(first?.protocol_config?.response_body_mode).toBe(BodySendMode.FULL_DUPLEX_STREAMED);
    } finally {
      await envoy.close();
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
    }
  });

  // Two ways a gateway can follow the router's `envoy.lb` metadata with the header lookup off:
  // ORIGINAL_DST with `metadata_key` (any ip:port), and the override_host load-balancing policy on a
  // cluster of known endpoints (how Istio's InferencePool support does it). The router knows only
  // worker B; Envoy's override_host cluster holds A and B with a least-request fallback, so a request
  // that landed on A would prove the metadata was ignored.
  const metadataKey = { key: LB_METADATA_NAMESPACE, path: [{ key: DESTINATION_HEADER }] };
  it.each([
    [
      'ORIGINAL_DST metadata_key',
      (): Yaml => ({
        type: 'ORIGINAL_DST',
        lb_policy: 'CLUSTER_PROVIDED',
        original_dst_lb_config: { use_http_header: false, metadata_key: metadataKey },
      }),
    ],
    [
      'override_host policy',
      (a: Simulator, b: Simulator): Yaml =>
        overrideHostCluster(
          [a, b].map((x) => ({ host: '127.0.0.1', port: x.port })),
          { metadata: metadataKey },
        ),
    ],
  ])('routes on the envoy.lb dynamic metadata alone (%s)', async (_name, workersCluster) => {
    const a = await startSimulator({ timeScale: 0 });
    const b = await startSimulator({ timeScale: 0 });
    const router = await startTestRouter({ workers: [b.url], policy: 'round_robin' });
    let envoy: { listenerPort: number; close(): Promise<void> } | undefined;
    try {
      const doc = parse(
        renderEnvoyConfig({ routers: [{ host: '127.0.0.1', port: router.grpcPort }], ...FDS }),
      ) as Yaml;
      const clusters = doc.static_resources.clusters as Yaml[];
      const i = clusters.findIndex((c) => c.name === 'vllm_workers');
      const old = clusters[i] as Yaml;
      clusters[i] = {
        name: 'vllm_workers',
        connect_timeout: old.connect_timeout,
        per_connection_buffer_limit_bytes: old.per_connection_buffer_limit_bytes,
        ...workersCluster(a, b),
      };
      envoy = await spawnEnvoy(stringify(doc));
      for (let n = 0; n < 4; n++) {
        const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim-model', prompt: `metadata only ${n}`, max_tokens: 2 }),
        });
        const text = await res.text();
        expect(res.status, text).toBe(200);
      }
      expect({ a: a.records.length, b: b.records.length }).toEqual({ a: 0, b: 4 });
      await expectAllLoadsZero(router);
    } finally {
      await envoy?.close();
      await router.close();
      await a.close();
      await b.close();
    }
  });
});

/** Runs Envoy on an already rendered config (admin port and listener port 0). */
async function spawnEnvoy(yamlText: string): Promise<{ listenerPort: number; close(): Promise<void> }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'vllm-router-fds-'));
  const configPath = path.join(dir, 'envoy.yaml');
  const adminPath = path.join(dir, 'admin-address');
  writeFileSync(configPath, yamlText);
  const child = spawn(
    findEnvoy(),
    ['-c', configPath, '--disable-hot-restart', '--admin-address-path', adminPath, '-l', 'error'],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4096);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    let admin = '';
    await waitFor(
      () => {
        if (child.exitCode !== null) throw new Error(`envoy exited: ${stderr}`);
        if (existsSync(adminPath)) admin = readFileSync(adminPath, 'utf8').trim();
        return admin !== '';
      },
      { timeoutMs: 30_000, intervalMs: 50, message: 'envoy admin address' },
    );
    const adminUrl = `http://${admin}`;
    await waitFor(async () => (await fetch(`${adminUrl}/ready`)).status === 200, {
      timeoutMs: 30_000,
      intervalMs: 50,
      message: 'envoy ready',
    });
    const listeners = (await (await fetch(`${adminUrl}/listeners?format=json`)).json()) as {
      listener_statuses: Array<{ local_address: { socket_address: { port_value: number } } }>;
    };
    const listenerPort = listeners.listener_statuses[0]?.local_address.socket_address.port_value ?? 0;
    return { listenerPort, close };
  } catch (err) {
    await close();
    throw err;
  }
}
