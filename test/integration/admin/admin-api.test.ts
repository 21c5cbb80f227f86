/**
 * The admin API of a real router (startTestRouter: real HTTP on 127.0.0.1, port 0): registration,
 * heartbeat and deregistration of workers, input validation, bearer-token and CIDR access control,
 * readiness per mode, and the discovery metrics. A fake clock is used only where expiry matters.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { parseConfig, type Config } from '../../../src/config.js';
import type { Router } from '../../../src/router.js';
import type { WorkerView } from '../../../src/admin/admin-server.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import { pino } from 'pino';
import { startRouter } from '../../../src/router.js';
import {
  adminJson,
  expectAllLoadsZero,
  metricsText,
  startTestRouter,
  testConfig,
} from '../../support/router-fixture.js';

const routers: Router[] = [];
afterEach(async () => {
  for (const r of routers.splice(0)) {
    await expectAllLoadsZero(r);
    await r.close();
  }
});

async function router(overrides: Partial<Config> = {}, clock?: () => number): Promise<Router> {
  const r = await startTestRouter(overrides, clock ? { clock } : {});
  routers.push(r);
  return r;
}

interface RegisterReply {
  generation: number;
  event: string;
  url: string;
  endpoint: string;
}

function post(r: Router, body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`http://127.0.0.1:${r.adminPort}/workers`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

async function registerOk(
  r: Router,
  body: object,
  headers: Record<string, string> = {},
): Promise<RegisterReply> {
  const res = await post(r, body, headers);
  const json = (await res.json()) as RegisterReply;
  expect(res.status, JSON.stringify(json)).toBe(200);
  return json;
}

function del(r: Router, role: string, url: string, headers: Record<string, string> = {}): Promise<Response> {
  const q = new URLSearchParams({ role, url });
  return fetch(`http://127.0.0.1:${r.adminPort}/workers?${q}`, { method: 'DELETE', headers });
}

const workers = async (r: Router): Promise<WorkerView[]> =>
  (await adminJson<WorkerView[]>(r, '/workers')).body;

/** One sample of a Prometheus text exposition (labels in the order prom-client prints them). */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  const want = Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(',');
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.indexOf('}');
    const got = line.slice(name.length + 1, close);
    const parts = got.split(',');
    if (want.split(',').every((p) => parts.includes(p))) return Number(line.slice(close + 1).trim());
  }
  return undefined;
}

describe('POST/GET/DELETE /workers', () => {
  it('registers, lists, heartbeats and deregisters a worker', async () => {
    let now = 10_000;
    const r = await router({ mode: 'pd', discoveryTtlMs: 4000 }, () => now);
    const reply = await registerOk(r, {
      role: 'prefill',
      url: 'http://127.0.0.1:9101',
      zmqAddress: '127.0.0.1:19101',
    });
    expect(reply).toMatchObject({
      event: 'registered',
      url: 'http://127.0.0.1:9101',
      endpoint: '127.0.0.1:9101',
    });
    expect(reply.generation).toBeGreaterThan(0);

    expect(await workers(r)).toEqual([
      {
        role: 'prefill',
        url: 'http://127.0.0.1:9101',
        endpoint: '127.0.0.1:9101',
        zmqAddress: '127.0.0.1:19101',
        generation: reply.generation,
        load: 0,
        processed: 0,
        healthy: true,
        health: { active: 'healthy', breaker: 'closed', asleep: false, cordoned: false, paused: false },
        expiresInMs: 4000,
        // Never scraped (scrapes are off in tests): routing counts in-flight requests; priors only.
        loadSample: null,
        routingLoad: { source: 'in_flight', ahead: 0, foreignShare: 0 },
        estimates: {
          pace: 1,
          ttftFloorMs: 10,
          prefillMsPerToken: 0.05,
          waitMsPerRequest: 20,
          interChunkMs: 20,
          ttftSamples: 0,
          chunkSamples: 0,
          wholeSamples: 0,
        },
        // Neither its /v1/models (off in tests) nor its metrics label known yet.
        servedModels: null,
      },
    ]);

    now += 1500;
    const hb = await registerOk(r, {
      role: 'prefill',
      url: 'http://127.0.0.1:9101',
      zmqAddress: '127.0.0.1:19101',
    });
    expect(hb).toMatchObject({ event: 'heartbeat', generation: reply.generation });
    now += 500;
    expect((await workers(r))[0]).toMatchObject({ generation: reply.generation, expiresInMs: 3500 });

    // A second worker of another role at the SAME url is a separate entry.
    const decode = await registerOk(r, { role: 'decode', url: 'http://127.0.0.1:9101' });
    expect(decode.generation).toBeGreaterThan(reply.generation);
    expect((await workers(r)).map((w) => [w.role, w.url, w.zmqAddress])).toEqual([
      ['prefill', 'http://127.0.0.1:9101', '127.0.0.1:19101'],
      ['decode', 'http://127.0.0.1:9101', null],
    ]);

    const gone = await del(r, 'prefill', 'http://127.0.0.1:9101');
    expect([gone.status, await gone.json()]).toEqual([200, { removed: true }]);
    expect((await workers(r)).map((w) => w.role)).toEqual(['decode']);
    const again = await del(r, 'prefill', 'http://127.0.0.1:9101');
    expect([again.status, await again.json()]).toEqual([404, { removed: false }]);

    // After a deregistration the next registration is a new lifetime.
    const back = await registerOk(r, { role: 'prefill', url: 'http://127.0.0.1:9101' });
    expect(back.event).toBe('registered');
    expect(back.generation).toBeGreaterThan(decode.generation);
  });

  it('a registration after expiry gets a new generation and a fresh worker', async () => {
    let now = 0;
    const r = await router({ discoveryTtlMs: 1000 }, () => now);
    const first = await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9102' });
    const before = r.workers()[0];
    now += 1000; // expired, whether or not the janitor's cleanup pass has run yet
    expect(await workers(r)).toEqual([]);
    const second = await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9102' });
    expect(['replaced', 'registered']).toContain(second.event);
    expect(second.generation).toBeGreaterThan(first.generation);
    const after = r.workers()[0];
    expect(after).not.toBe(before);
    expect((await workers(r)).map((w) => w.generation)).toEqual([second.generation]);
  });

  it('normalises the url key: a heartbeat written differently is still the same worker', async () => {
    const r = await router();
    const a = await registerOk(r, { role: 'regular', url: '127.0.0.1:9103' });
    const b = await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9103/' });
    expect(a.url).toBe('http://127.0.0.1:9103');
    expect(b).toMatchObject({ event: 'heartbeat', generation: a.generation });
    expect((await del(r, 'regular', '127.0.0.1:9103')).status).toBe(200);
    expect(await workers(r)).toEqual([]);
  });

  const BAD_BODIES: ReadonlyArray<[string, string | object]> = [
    ['invalid JSON', '{"role": "regular",'],
    ['a JSON array', '[]'],
    ['a JSON string', '"regular"'],
    ['null', 'null'],
    ['no role', { url: 'http://127.0.0.1:9000' }],
    ['an unknown role', { role: 'leader', url: 'http://127.0.0.1:9000' }],
    ['no url', { role: 'regular' }],
    ['a non-string url', { role: 'regular', url: 9000 }],
    ['an empty url', { role: 'regular', url: '' }],
    ['an https url', { role: 'regular', url: 'https://127.0.0.1:9000' }],
    ['a url with a path', { role: 'regular', url: 'http://127.0.0.1:9000/v1' }],
    ['a non-string zmqAddress', { role: 'prefill', url: 'http://127.0.0.1:9000', zmqAddress: 5 }],
    [
      'a zmqAddress that is no address',
      { role: 'prefill', url: 'http://127.0.0.1:9000', zmqAddress: 'a b\r\nx-injected: 1' },
    ],
    ['a non-boolean permanent', { role: 'regular', url: 'http://127.0.0.1:9000', permanent: 'yes' }],
    ['a metadata array', { role: 'regular', url: 'http://127.0.0.1:9000', metadata: [1] }],
    ['a nested metadata value', { role: 'regular', url: 'http://127.0.0.1:9000', metadata: { a: { b: 1 } } }],
    [
      'a data_parallel_size of 0',
      { role: 'regular', url: 'http://127.0.0.1:9000', metadata: { data_parallel_size: 0 } },
    ],
    [
      'a metrics_port out of range',
      { role: 'regular', url: 'http://127.0.0.1:9000', metadata: { metrics_port: 70_000 } },
    ],
    [
      'a metadata number too large for JSON to give back (1e400: Infinity, listed as null)',
      '{"role": "regular", "url": "http://127.0.0.1:9000", "metadata": {"max_model_len": 1e400}}',
    ],
    [
      'a snake_case zmq_address (vLLM heartbeat spelling)',
      { role: 'regular', url: 'http://127.0.0.1:9000', zmq_address: '127.0.0.1:14579' },
    ],
    [
      'a top-level data_parallel_size',
      { role: 'regular', url: 'http://127.0.0.1:9000', data_parallel_size: 8 },
    ],
  ];

  it('an unknown field is named in the 400, with the spelling the API takes', async () => {
    const r = await router({ mode: 'pd' });
    const res = await post(r, {
      role: 'decode',
      url: 'http://127.0.0.1:9000',
      zmq_address: '127.0.0.1:14579',
    });
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect([res.status, body.error.code]).toEqual([400, 'invalid_registration']);
    expect(body.error.message).toContain('"zmq_address"');
    expect(body.error.message).toContain('zmqAddress');
    expect(await workers(r)).toEqual([]);
  });

  it.each(BAD_BODIES)('POST with %s is a JSON 400 and registers nothing', async (_what, body) => {
    const r = await router();
    const res = await post(r, body);
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toContain('application/json');
    const json = (await res.json()) as { error: { code: string; message: string } };
    expect(json.error.code).toBe('invalid_registration');
    expect(json.error.message.length).toBeGreaterThan(0);
    expect(await workers(r)).toEqual([]);
  });

  it("keeps a registration's metadata; a data_parallel_size lists every rank as a worker", async () => {
    const r = await router();
    await registerOk(r, {
      role: 'regular',
      url: 'http://127.0.0.1:9104',
      metadata: { data_parallel_size: 2, metrics_port: 9105 },
    });
    const listed = await workers(r);
    expect(listed.map((w) => [w.key, w.dpRank, w.metadata])).toEqual([
      ['http://127.0.0.1:9104@0', 0, { data_parallel_size: 2, metrics_port: 9105 }],
      ['http://127.0.0.1:9104@1', 1, { data_parallel_size: 2, metrics_port: 9105 }],
    ]);
    expect((await del(r, 'regular', 'http://127.0.0.1:9104')).status).toBe(200);
    expect(await workers(r)).toEqual([]);
  });

  it('a re-registration with changed metadata is a new worker: /workers shows what was announced last', async () => {
    const r = await router({ mode: 'pd' });
    const url = 'http://127.0.0.1:9106';
    const first = await registerOk(r, { role: 'prefill', url, metadata: { tp_size: 4, dp_size: 1 } });
    const old = r.workers()[0]!;
    const guard = new LoadGuard(old); // a request in flight on it
    try {
      const second = await registerOk(r, { role: 'prefill', url, metadata: { tp_size: 8, dp_size: 1 } });
      // What P/D reads (MoRI-IO remote_tp_size) and /workers shows is the metadata announced last,
      // on a fresh Worker: the request in flight stays on the old one.
      expect((await workers(r)).map((w) => [w.generation, w.metadata, w.load])).toEqual([
        [second.generation, { tp_size: 8, dp_size: 1 }, 0],
      ]);
      expect(second.event).toBe('replaced');
      expect(second.generation).toBeGreaterThan(first.generation);
    } finally {
      guard.release();
    }
    expect(old.load).toBe(0);
  });

  it("a worker url at vLLM's listen-on-all address (0.0.0.0, ::) is a JSON 400 and registers nothing", async () => {
    const r = await router();
    for (const url of ['http://0.0.0.0:8000', 'http://[::]:8000', 'http://0:8000']) {
      const res = await post(r, { role: 'regular', url });
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect([res.status, body.error.code], url).toEqual([400, 'invalid_registration']);
      expect(body.error.message).toMatch(/unspecified/);
    }
    expect(await workers(r)).toEqual([]);
  });

  it('DELETE without a valid role or url is a JSON 400', async () => {
    const r = await router();
    for (const query of [
      '',
      '?role=regular',
      '?url=http://127.0.0.1:9000',
      '?role=boss&url=http://127.0.0.1:9000',
    ]) {
      const res = await fetch(`http://127.0.0.1:${r.adminPort}/workers${query}`, { method: 'DELETE' });
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('invalid_registration');
    }
  });

  it('an oversized body is refused with a JSON 413', async () => {
    const r = await router();
    const res = await post(r, { role: 'regular', url: 'http://127.0.0.1:9000', pad: 'x'.repeat(70_000) });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('body_too_large');
  });
});

describe('HTTP methods', () => {
  it('HEAD on a read endpoint answers like GET without a body (curl -I, wget --spider probes)', async () => {
    const r = await router();
    for (const path of ['/healthz', '/readyz', '/metrics', '/workers']) {
      const get = await fetch(`http://127.0.0.1:${r.adminPort}${path}`);
      await get.arrayBuffer();
      const head = await fetch(`http://127.0.0.1:${r.adminPort}${path}`, { method: 'HEAD' });
      expect([head.status, head.headers.get('content-type')], path).toEqual([
        get.status,
        get.headers.get('content-type'),
      ]);
      expect(await head.text(), path).toBe('');
    }
  });

  it('a 405 names the methods the path takes in Allow, and changes nothing', async () => {
    const r = await router();
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9210' });
    for (const [method, path, allow] of [
      ['PUT', '/workers', 'GET, HEAD, POST, DELETE'],
      ['PATCH', '/workers', 'GET, HEAD, POST, DELETE'],
      ['POST', '/healthz', 'GET, HEAD'],
      ['DELETE', '/metrics', 'GET, HEAD'],
      ['GET', '/workers/cordon', 'POST'],
    ] as const) {
      const res = await fetch(`http://127.0.0.1:${r.adminPort}${path}`, { method });
      expect([res.status, res.headers.get('allow')], `${method} ${path}`).toEqual([405, allow]);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('method_not_allowed');
    }
    expect((await workers(r)).map((w) => [w.url, w.healthy])).toEqual([['http://127.0.0.1:9210', true]]);
  });
});

describe('logs', () => {
  it('each admin write that changes the fleet is one info line naming the peer; a heartbeat is none', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    const r = await startRouter(Object.freeze(testConfig()), { logger });
    routers.push(r);
    const url = 'http://127.0.0.1:9230';
    const write = async (path: string, method = 'POST') =>
      (await fetch(`http://127.0.0.1:${r.adminPort}${path}`, { method })).text();
    await registerOk(r, { role: 'regular', url });
    await registerOk(r, { role: 'regular', url }); // a heartbeat
    await write(`/workers/cordon?url=${url}`);
    await write(`/workers/uncordon?url=${url}`);
    await write(`/workers?role=regular&url=${url}`, 'DELETE');
    const admin = lines.filter((l) => String(l.msg).endsWith('via admin API'));
    expect(admin.map((l) => [l.level, l.msg, l.url, l.peer])).toEqual([
      [30, 'worker registered via admin API', url, '127.0.0.1'],
      [30, 'worker cordoned via admin API', url, '127.0.0.1'],
      [30, 'worker uncordoned via admin API', url, '127.0.0.1'],
      [30, 'worker deregistered via admin API', url, '127.0.0.1'],
    ]);
  });
});

describe('access control', () => {
  it('enforces the bearer token on writes when adminToken is set; reads stay open', async () => {
    const r = await router({ adminToken: 's3cret-token' });
    const body = { role: 'regular', url: 'http://127.0.0.1:9201' };
    for (const auth of [
      undefined,
      'Bearer wrong-token',
      'Basic s3cret-token',
      'Bearer s3cret-token-but-longer',
    ]) {
      const res = await post(r, body, auth === undefined ? {} : { authorization: auth });
      expect(res.status, String(auth)).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe('unauthorized');
    }
    expect(await workers(r)).toEqual([]);
    await registerOk(r, body, { authorization: 'Bearer s3cret-token' });
    expect((await workers(r)).map((w) => w.url)).toEqual([body.url]);

    const noAuthDelete = await del(r, 'regular', body.url);
    expect(noAuthDelete.status).toBe(401);
    await noAuthDelete.text();
    expect(await workers(r)).toHaveLength(1);
    const authed = await del(r, 'regular', body.url, { authorization: 'Bearer s3cret-token' });
    expect(authed.status).toBe(200);
    await authed.text();
    expect(await workers(r)).toEqual([]);
    expect((await adminJson(r, '/readyz')).status).toBe(503);
  });

  it('a token from a Secret file with a trailing newline still lets the bearer in (HTTP strips it from the header)', async () => {
    const parsed = parseConfig([], { VLLM_ROUTER_ADMIN_TOKEN: 's3cret-token\n' });
    if (parsed.help) throw new Error('unexpected --help');
    const r = await router({ adminToken: parsed.config.adminToken });
    const body = { role: 'regular', url: 'http://127.0.0.1:9203' };
    await registerOk(r, body, { authorization: 'Bearer s3cret-token' });
    expect((await post(r, body)).status).toBe(401);
    expect((await workers(r)).map((w) => w.url)).toEqual([body.url]);
  });

  it('refuses a peer outside discoveryAllow with 403', async () => {
    const r = await router({ discoveryAllow: ['10.0.0.0/8'] });
    const res = await post(r, { role: 'regular', url: 'http://10.1.2.3:9000' });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'forbidden',
    });
    const d = await del(r, 'regular', 'http://10.1.2.3:9000');
    expect(d.status).toBe(403);
    await d.text();
    expect(await workers(r)).toEqual([]);
  });

  it('refuses a worker address outside discoveryAllow with 403 and counts it', async () => {
    const r = await router({ discoveryAllow: ['127.0.0.0/8'] });
    const res = await post(r, { role: 'regular', url: 'http://10.1.2.3:9000' });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('10.1.2.3');
    expect(await workers(r)).toEqual([]);
    expect(
      sample(await metricsText(r), 'vllm_router_discovery_rejected_total', { reason: 'not_allowed' }),
    ).toBe(1);
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9202' });
    expect((await workers(r)).map((w) => w.url)).toEqual(['http://127.0.0.1:9202']);
  });
});

describe('worker operations: /workers/cordon, /uncordon, /sleep, /wake_up', () => {
  const op = (r: Router, path: string, headers: Record<string, string> = {}, method = 'POST') =>
    fetch(`http://127.0.0.1:${r.adminPort}${path}`, { method, headers });
  const errorOf = async (res: Response) =>
    ((await res.json()) as { error: { code: string; message: string } }).error;

  it('cordon and uncordon every role registered at the URL, normalised like a registration', async () => {
    const r = await router({ mode: 'pd' });
    await registerOk(r, { role: 'prefill', url: 'http://127.0.0.1:9301' });
    await registerOk(r, { role: 'decode', url: 'http://127.0.0.1:9301' });
    await registerOk(r, { role: 'decode', url: 'http://127.0.0.1:9302' });
    const res = await op(r, `/workers/cordon?url=${encodeURIComponent('http://127.0.0.1:9301/')}`);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { workers: string[] }).workers).toHaveLength(2);
    const cordoned = (await workers(r)).map((w) => [
      w.role,
      w.url,
      w.healthy,
      (w.health as { cordoned: boolean }).cordoned,
    ]);
    expect(cordoned.sort()).toEqual(
      [
        ['decode', 'http://127.0.0.1:9301', false, true],
        ['decode', 'http://127.0.0.1:9302', true, false],
        ['prefill', 'http://127.0.0.1:9301', false, true],
      ].sort(),
    );
    expect(sample(await metricsText(r), 'vllm_router_worker_cordoned', { role: 'prefill' })).toBe(1);
    expect((await op(r, '/workers/uncordon?url=http://127.0.0.1:9301')).status).toBe(200);
    expect((await workers(r)).every((w) => w.healthy)).toBe(true);
  });

  it('answers bad input with a JSON 4xx and touches nothing', async () => {
    const r = await router({ adminToken: 'tok' });
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9303' }, { authorization: 'Bearer tok' });
    const auth = { authorization: 'Bearer tok' };
    const cases: Array<[string, Record<string, string>, string, number, string]> = [
      ['/workers/cordon?url=http://127.0.0.1:9303', {}, 'POST', 401, 'unauthorized'],
      ['/workers/sleep', auth, 'POST', 400, 'invalid_request'],
      ['/workers/sleep?url=http://127.0.0.1:9303&level=3', auth, 'POST', 400, 'invalid_request'],
      ['/workers/sleep?url=http://127.0.0.1:9303&timeout_ms=-1', auth, 'POST', 400, 'invalid_request'],
      // An unset shell variable (`timeout_ms=$T`) is no timeout of 0, nor is hex one of 16 ms.
      ['/workers/sleep?url=http://127.0.0.1:9303&timeout_ms=', auth, 'POST', 400, 'invalid_request'],
      ['/workers/sleep?url=http://127.0.0.1:9303&timeout_ms=0x10', auth, 'POST', 400, 'invalid_request'],
      ['/workers/sleep?url=http://127.0.0.1:9303&timeout_ms=%2010', auth, 'POST', 400, 'invalid_request'],
      ['/workers/sleep?url=http://127.0.0.1:9999', auth, 'POST', 404, 'not_found'],
      ['/workers/wake_up?url=http://127.0.0.1:9999', auth, 'POST', 404, 'not_found'],
      ['/workers/sleep?url=http://127.0.0.1:9303', auth, 'GET', 405, 'method_not_allowed'],
    ];
    for (const [path, headers, method, status, code] of cases) {
      const res = await op(r, path, headers, method);
      expect(res.status, path).toBe(status);
      expect((await errorOf(res)).code, path).toBe(code);
    }
    const [w] = await workers(r);
    expect(w!.healthy).toBe(true);
    expect(w!.health).toMatchObject({ asleep: false, cordoned: false });
  });

  it('a worker that cannot be reached is given back: 502 worker_error, not cordoned, not asleep', async () => {
    const r = await router();
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9' }); // nothing listens on port 9
    const res = await op(r, '/workers/sleep?url=http://127.0.0.1:9');
    expect(res.status).toBe(502);
    expect((await errorOf(res)).code).toBe('worker_error');
    const [w] = await workers(r);
    expect(w!.health).toMatchObject({ asleep: false, cordoned: false });
  });
});

describe('/readyz', () => {
  it('regular mode: 503 with counts until the regular pool has a member, then 200', async () => {
    const r = await router({ mode: 'regular' });
    const before = await adminJson<Record<string, unknown>>(r, '/readyz');
    expect(before.status).toBe(503);
    expect(before.body).toMatchObject({ status: 'not_ready', mode: 'regular', workers: { regular: 0 } });
    // Workers of the other roles would never get a request here: refused, and no readier.
    for (const role of ['prefill', 'decode']) {
      const res = await post(r, { role, url: 'http://127.0.0.1:9301' });
      const body = (await res.json()) as { error: { code: string; message: string } };
      expect([res.status, body.error.code]).toEqual([400, 'invalid_registration']);
      expect(body.error.message).toBe(
        `role ${role} gets no traffic in regular mode (it routes to regular workers)`,
      );
    }
    expect(await workers(r)).toEqual([]);
    expect((await adminJson(r, '/readyz')).status).toBe(503);
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9303' });
    const after = await adminJson<Record<string, unknown>>(r, '/readyz');
    expect(after.status).toBe(200);
    expect(after.body).toMatchObject({ status: 'ready', workers: { regular: 1 } });
    const d = await del(r, 'regular', 'http://127.0.0.1:9303');
    await d.text();
    expect((await adminJson(r, '/readyz')).status).toBe(503);
  });

  it('pd mode: 503 until BOTH prefill and decode pools have a member', async () => {
    const r = await router({ mode: 'pd' });
    expect(await adminJson(r, '/readyz')).toMatchObject({
      status: 503,
      body: { status: 'not_ready', mode: 'pd', workers: { prefill: 0, decode: 0 } },
    });
    await registerOk(r, { role: 'prefill', url: 'http://127.0.0.1:9401' });
    // A regular worker would never get a request in pd mode: a JSON 400, not a silent 200.
    const res = await post(r, { role: 'regular', url: 'http://127.0.0.1:9402' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe(
      'role regular gets no traffic in pd mode (it routes to prefill and decode workers)',
    );
    expect((await workers(r)).map((w) => w.role)).toEqual(['prefill']);
    expect(await adminJson(r, '/readyz')).toMatchObject({
      status: 503,
      body: { workers: { prefill: 1, decode: 0 } },
    });
    await registerOk(r, { role: 'decode', url: 'http://127.0.0.1:9403' });
    expect(await adminJson(r, '/readyz')).toMatchObject({
      status: 200,
      body: { status: 'ready', workers: { prefill: 1, decode: 1 } },
    });
  });

  it('turns 503 again when the only worker expires (fake clock)', async () => {
    let now = 0;
    const r = await router({ discoveryTtlMs: 2000 }, () => now);
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9501' });
    expect((await adminJson(r, '/readyz')).status).toBe(200);
    now += 1999;
    expect((await adminJson(r, '/readyz')).status).toBe(200);
    now += 1;
    expect(await adminJson(r, '/readyz')).toMatchObject({ status: 503, body: { workers: { regular: 0 } } });
  });
});

describe('discovery metrics', () => {
  it('counts registrations, heartbeats and deregistrations, and reports pool sizes', async () => {
    const r = await router();
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9601' });
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9602' });
    await registerOk(r, { role: 'regular', url: 'http://127.0.0.1:9601' });
    let text = await metricsText(r);
    const updates = (role: string, event: string) =>
      sample(text, 'vllm_router_discovery_updates_total', { role, event });
    expect(updates('regular', 'registered')).toBe(2);
    expect(updates('regular', 'heartbeat')).toBe(1);
    expect(sample(text, 'vllm_router_pool_workers', { role: 'regular' })).toBe(2);
    expect(sample(text, 'vllm_router_pool_workers', { role: 'prefill' })).toBe(0);
    expect(sample(text, 'vllm_router_pool_workers', { role: 'decode' })).toBe(0);

    const d = await del(r, 'regular', 'http://127.0.0.1:9602');
    await d.text();
    text = await metricsText(r);
    expect(updates('regular', 'deregistered')).toBe(1);
    expect(sample(text, 'vllm_router_pool_workers', { role: 'regular' })).toBe(1);
    expect(sample(text, 'vllm_router_pool_changes_total', { role: 'regular', change: 'departed' })).toBe(1);
  });
});
