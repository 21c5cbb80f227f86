/**
 * The ext_proc processing modes a user may set in their own Envoy (pointing an existing listener's
 * ext_proc filter at the router), each through the real Envoy 1.40 with envoy/envoy.yaml edited in that
 * one place: either the request is routed, or it fails loudly with what to change
 * (extproc/processing-modes.ts; docs/deploy-envoy.md, "Processing modes").
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { parse, stringify } from 'yaml';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { renderEnvoyConfig } from '../../src/envoy/envoy-config.js';
import { startRouter, type Router } from '../../src/router.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { expectAllLoadsZero, metricsText, testConfig } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

interface ModeStack {
  readonly url: string;
  readonly router: Router;
  readonly envoy: EnvoyHandle;
  /** The router's log lines at warn and above, parsed. */
  readonly logs: Array<Record<string, unknown>>;
  readonly sim: Simulator;
  close(): Promise<void>;
}

/** One worker, the router logging at warn, and Envoy on envoy.yaml with its ext_proc filter edited. */
async function startModeStack(edit: (extProc: Yaml, hcm: Yaml, doc: Yaml) => void): Promise<ModeStack> {
  const logs: Array<Record<string, unknown>> = [];
  const sim: Simulator = await startSimulator({ timeScale: 0 });
  const logger = pino({ level: 'warn' }, { write: (line: string) => logs.push(JSON.parse(line)) });
  const router = await startRouter(Object.freeze(testConfig({ workers: [sim.url] })), { logger });
  const doc = parse(renderEnvoyConfig({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] })) as Yaml;
  const hcm = doc.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  edit(
    (hcm.http_filters as Yaml[]).find((f) => f.name === 'envoy.filters.http.ext_proc')!.typed_config,
    hcm,
    doc,
  );
  const envoy = await startEnvoy({ config: stringify(doc) }).catch(async (err: unknown) => {
    await router.close();
    await sim.close();
    throw err;
  });
  return {
    url: `http://127.0.0.1:${envoy.listenerPort}`,
    router,
    envoy,
    logs,
    sim,
    async close() {
      await envoy.close();
      await router.close();
      await sim.close();
    },
  };
}

async function complete(
  s: ModeStack,
  promptChars: number,
): Promise<{ status: number; json: Yaml | undefined; text: string }> {
  const res = await fetch(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: 'p'.repeat(promptChars), max_tokens: 4 }),
  });
  const text = await res.text();
  let json: Yaml | undefined;
  try {
    json = JSON.parse(text) as Yaml;
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text };
}

/** Log lines whose `problem` mentions `setting`. */
const problems = (s: ModeStack, setting: string): number =>
  s.logs.filter((l) => typeof l.problem === 'string' && l.problem.includes(setting)).length;

/**
 * POSTs a completion whose body reaches Envoy only after its headers, and only in part (a slow client
 * or a large upload still sending): the answer cannot wait for the rest, which never comes.
 */
function completeLate(s: ModeStack): Promise<{ status: number; text: string }> {
  const body = JSON.stringify({ model: 'sim-model', prompt: 'p'.repeat(2000), max_tokens: 4 });
  return new Promise((resolve, reject) => {
    let answered = false;
    const req = http.request(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => {
        answered = true;
        resolve({ status: res.statusCode ?? 0, text });
        req.destroy(); // the rest of the body is never sent
      });
    });
    req.on('error', (err) => {
      if (!answered) reject(err);
    });
    req.flushHeaders();
    setImmediate(() => req.write(body.slice(0, 1000)));
  });
}

describe.each(['STREAMED', 'NONE'])('request_body_mode %s', (mode) => {
  let s: ModeStack;
  beforeAll(async () => {
    s = await startModeStack((ep) => {
      ep.processing_mode.request_body_mode = mode;
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('answers a request whose body comes after its headers with a JSON 500 naming the setting', async () => {
    // Envoy passes the headers on before the router has read the body: the request used to leave
    // without a destination (Envoy's 503 "no healthy upstream"), and nothing said why.
    const r = await completeLate(s);
    expect(r.status, r.text.slice(0, 200)).toBe(500);
    const json = JSON.parse(r.text) as { error: { code: string; message: string } };
    expect(json.error.code).toBe('unsupported_processing_mode');
    expect(json.error.message).toContain('request_body_mode');
    expect(problems(s, 'request_body_mode')).toBe(1);
    await expectAllLoadsZero(s.router);
  });

  it('answers every request with a body the same, whatever its timing; body-less ones are served', async () => {
    for (const chars of [20, 300_000]) {
      const r = await complete(s, chars);
      expect({ status: r.status, code: r.json?.error?.code }, r.text.slice(0, 200)).toEqual({
        status: 500,
        code: 'unsupported_processing_mode',
      });
    }
    expect(problems(s, 'request_body_mode')).toBe(1); // logged once
    expect((await fetch(`${s.url}/v1/models`)).status).toBe(200);
    await expectAllLoadsZero(s.router);
  });
});

/** Envoy's ext_proc filter with response_body_mode NONE and the given trailer mode and flags. */
function responseBodyNone(
  trailers: 'SKIP' | 'SEND',
  opts: { graceful?: boolean; allowModeOverride?: boolean; requestBody?: 'FULL_DUPLEX_STREAMED' } = {},
) {
  return (ep: Yaml, _hcm: Yaml, doc: Yaml): void => {
    ep.processing_mode.response_body_mode = 'NONE';
    ep.processing_mode.response_trailer_mode = trailers;
    ep.allow_mode_override = opts.allowModeOverride ?? true;
    if (opts.requestBody) {
      ep.processing_mode.request_body_mode = opts.requestBody;
      ep.processing_mode.request_trailer_mode = 'SEND'; // Envoy requires it with FULL_DUPLEX_STREAMED
    }
    if (opts.graceful === false) {
      for (const layer of doc.layered_runtime.layers as Yaml[]) {
        delete layer.static_layer?.['envoy.reloadable_features.ext_proc_graceful_grpc_close'];
      }
    }
  };
}

/** vllm_router_requests_total for one outcome (all routes). */
async function outcomes(router: Router, outcome: string): Promise<number> {
  let sum = 0;
  for (const line of (await metricsText(router)).split('\n')) {
    if (line.startsWith('vllm_router_requests_total{') && line.includes(`outcome="${outcome}"`)) {
      sum += Number(line.slice(line.indexOf('}') + 2));
    }
  }
  return sum;
}

/**
 * A streamed completion held by the worker after its first SSE event (the client has it): `during`
 * runs while it is held, then the rest is read.
 */
async function heldStream(s: ModeStack, during: () => Promise<void>): Promise<string> {
  const hold = s.sim.hold({ afterChunks: 1 });
  const res = await fetch(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: 'hold me', max_tokens: 6, stream: true }),
  });
  const reader = res.body!.getReader();
  const first = await reader.read(); // the response headers were answered: the router knows the mode
  expect(first.done).toBe(false);
  await hold.reached();
  try {
    await during();
  } finally {
    hold.release();
  }
  let text = new TextDecoder().decode(first.value);
  for (let r = await reader.read(); !r.done; r = await reader.read())
    text += new TextDecoder().decode(r.value);
  return text;
}

const load = (s: ModeStack): number => s.router.workers()[0]!.load;

describe.each([
  // response_trailer_mode, Envoy's graceful close (half-close; reset without), allow_mode_override
  ['SKIP', true, true],
  ['SKIP', false, true],
  ['SKIP', true, false],
  ['SKIP', false, false],
  ['SEND', true, true],
  ['SEND', false, true],
  ['SEND', true, false],
  ['SEND', false, false],
] as const)(
  'response_body_mode NONE (request body BUFFERED), response_trailer_mode %s, graceful close %s, allow_mode_override %s',
  (trailers, graceful, allowModeOverride) => {
    let s: ModeStack;
    beforeAll(async () => {
      s = await startModeStack(responseBodyNone(trailers, { graceful, allowModeOverride }));
    });
    afterAll(async () => {
      await s?.close();
    });

    it('holds the load to the end of each streamed response, ends each request once as unwatched, logs nothing', async () => {
      // Envoy 1.40 keeps the stream open to the response's end here (the filter is destroyed: half-close
      // or reset), so the load follows the response. Each is unwatched: no chunk ever comes, not even
      // for the responses the router would sample (it used to count those `cancelled`, and logged
      // that the load drops at the response headers).
      for (let i = 0; i < 2; i++) {
        const text = await heldStream(s, async () => {
          // Another request through the same Envoy and router completes meanwhile (its end reaches the
          // router once Envoy is done with it); the held one still counts.
          expect((await complete(s, 20)).status).toBe(200);
          await waitFor(() => load(s) === 1);
        });
        expect(text).toContain('data: [DONE]');
        await waitFor(() => load(s) === 0);
      }
      expect(await outcomes(s.router, 'unwatched')).toBe(4);
      expect(await outcomes(s.router, 'cancelled')).toBe(0);
      expect(problems(s, 'response_body_mode')).toBe(0);
      await expectAllLoadsZero(s.router);
    });
  },
);

describe.each(['SKIP', 'SEND'] as const)(
  'response_body_mode NONE with request body FULL_DUPLEX_STREAMED, response_trailer_mode %s',
  (trailers) => {
    let s: ModeStack;
    beforeAll(async () => {
      s = await startModeStack(responseBodyNone(trailers, { requestBody: 'FULL_DUPLEX_STREAMED' }));
    });
    afterAll(async () => {
      await s?.close();
    });

    it(
      trailers === 'SKIP'
        ? "Envoy ends the router's stream at the response headers: the load drops while it streams; logged"
        : 'Envoy keeps the stream open for the trailers: the load is held to the end; logged as conditional',
      async () => {
        const text = await heldStream(s, async () => {
          if (trailers === 'SKIP') {
            await waitFor(() => load(s) === 0); // still generating
          } else {
            expect((await complete(s, 20)).status).toBe(200);
            await waitFor(() => load(s) === 1);
          }
        });
        expect(text).toContain('data: [DONE]');
        // The router cannot see the trailer mode: it names the condition.
        expect(problems(s, 'unless response_trailer_mode is SEND')).toBe(1);
        await expectAllLoadsZero(s.router);
      },
    );
  },
);

describe('observability_mode: true', () => {
  let s: ModeStack;
  beforeAll(async () => {
    s = await startModeStack((ep) => {
      ep.observability_mode = true;
      ep.processing_mode.request_body_mode = 'STREAMED';
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('logs that Envoy ignores every answer, naming the setting to remove', async () => {
    const r = await complete(s, 20);
    expect(r.status).toBe(503); // Envoy's: no destination
    await waitFor(() => problems(s, 'observability_mode') === 1, { timeoutMs: 5000 }).catch(() => undefined);
    expect(problems(s, 'observability_mode')).toBe(1);
    await expectAllLoadsZero(s.router);
  });
});

describe('response_header_mode SKIP', () => {
  let s: ModeStack;
  beforeAll(async () => {
    s = await startModeStack((ep) => {
      ep.processing_mode.response_header_mode = 'SKIP';
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('logs the setting to change and releases the load', async () => {
    // The router cannot answer a response it sees no headers of: Envoy resets it (it used to log
    // only "unexpected ext_proc message").
    await expect(complete(s, 20)).rejects.toThrow();
    await waitFor(() => problems(s, 'response_header_mode') === 1, { timeoutMs: 5000 }).catch(
      () => undefined,
    );
    expect(problems(s, 'response_header_mode')).toBe(1);
    await expectAllLoadsZero(s.router);
  });
});

describe.each<[string, (ep: Yaml) => void]>([
  ['request_body_mode BUFFERED_PARTIAL', (ep) => (ep.processing_mode.request_body_mode = 'BUFFERED_PARTIAL')],
  ['request_trailer_mode SEND with BUFFERED', (ep) => (ep.processing_mode.request_trailer_mode = 'SEND')],
  ['response_trailer_mode SEND with STREAMED', (ep) => (ep.processing_mode.response_trailer_mode = 'SEND')],
  ['response_body_mode BUFFERED', (ep) => (ep.processing_mode.response_body_mode = 'BUFFERED')],
  ['allow_mode_override: false', (ep) => (ep.allow_mode_override = false)],
  [
    'send_body_without_waiting_for_header_response with BUFFERED',
    (ep) => (ep.send_body_without_waiting_for_header_response = true),
  ],
  ['request_attributes', (ep) => (ep.request_attributes = ['request.path', 'request.headers'])],
])('%s', (_name, edit) => {
  let s: ModeStack;
  beforeAll(async () => {
    s = await startModeStack(edit);
  });
  afterAll(async () => {
    await s?.close();
  });

  it('routes small and large prompts', async () => {
    for (const chars of [20, 300_000]) {
      const r = await complete(s, chars);
      expect(r.status, r.text.slice(0, 200)).toBe(200);
      expect(r.json).toHaveProperty('choices');
    }
    expect(s.logs.filter((l) => l.problem !== undefined)).toEqual([]);
    await expectAllLoadsZero(s.router);
  });
});

/** A WebSocket handshake for vLLM's realtime API: the response, or 'timeout' after 5 s. */
function realtimeHandshake(s: ModeStack): Promise<{ status: number; text: string } | 'timeout'> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${s.url}/v1/realtime`, {
      headers: {
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
      },
    });
    const timer = setTimeout(() => {
      req.destroy();
      resolve('timeout');
    }, 5000);
    req.on('upgrade', (res, socket) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ status: res.statusCode ?? 0, text: '' });
    });
    req.on('response', (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => {
        clearTimeout(timer);
        resolve({ status: res.statusCode ?? 0, text });
      });
    });
    req.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.end();
  });
}

describe("a WebSocket handshake (vLLM's /v1/realtime) through a listener that accepts upgrades", () => {
  let s: ModeStack;
  beforeAll(async () => {
    s = await startModeStack((_ep, hcm) => {
      hcm.upgrade_configs = [{ upgrade_type: 'websocket' }];
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('gets a JSON 501 that says upgrades are not routed', async () => {
    // It used to get no answer at all: Envoy waited for a BUFFERED body that comes only after the
    // handshake, until the route's idle_timeout (10 min). (The reference listener, without
    // upgrade_configs, answers Envoy's own empty 403 before the router sees the request.)
    const r = await realtimeHandshake(s);
    expect(r).not.toBe('timeout');
    const { status, text } = r as { status: number; text: string };
    expect(status, text).toBe(501);
    expect((JSON.parse(text) as { error: { code: string } }).error.code).toBe('unsupported_upgrade');
    // An ordinary request on the same listener is routed.
    expect((await complete(s, 20)).status).toBe(200);
    await expectAllLoadsZero(s.router);
  });
});
