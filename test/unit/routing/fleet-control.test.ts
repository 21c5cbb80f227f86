/**
 * FleetControl against real simulators (real HTTP): vLLM's engine control calls (an RL trainer's
 * pause, cache reset, resume; sleep and wake) sent to every worker once per URL, answered with each
 * worker's result, and followed in the router's own state.
 */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetControl, type FleetState } from '../../../src/routing/fleet-control.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import type { Role } from '../../../src/workers/role.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function sim(): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0 });
  open.push(s);
  return s;
}

const worker = (url: string, role: Role = 'regular', dpRank?: number): Worker =>
  new Worker({
    role,
    url,
    endpoint: new URL(url).host,
    generation: 1,
    ...(dpRank !== undefined ? { dpRank } : {}),
  });

/** The router's side, as recorded calls. */
class Recorded implements FleetState {
  readonly calls: string[] = [];
  recordPause(w: Worker, paused: boolean): void {
    w.paused = paused; // as WorkerHealth does
    this.calls.push(`${w.id} paused=${paused}`);
  }
  recordSleep(w: Worker, asleep: boolean): void {
    if (w.asleep === asleep) return; // as WorkerHealth does: a change, or nothing
    w.asleep = asleep;
    this.calls.push(`${w.id} asleep=${asleep}`);
  }
  sleepRefused(w: Worker): void {
    this.recordSleep(w, false);
  }
  cacheCleared(w: Worker): void {
    this.calls.push(`${w.id} cleared`);
  }
}

function control(
  members: Worker[],
  state: FleetState = new Recorded(),
  apiKey?: string,
  down?: (w: Worker) => boolean,
): FleetControl {
  const f = new FleetControl({
    members: () => members,
    state,
    clock: () => 0,
    timeoutMs: 5_000,
    ...(apiKey !== undefined ? { apiKey } : {}),
    ...(down !== undefined ? { down } : {}),
  });
  open.push(f);
  return f;
}

/** An HTTP server that holds each request until the test answers it (`answer` waits for one to arrive). */
async function holding(): Promise<{ url: string; answer(status: number, body: string): Promise<void> }> {
  const waiting: Array<(status: number, body: string) => void> = [];
  let arrived: (() => void) | undefined;
  const server = createServer((req, res) => {
    req.resume();
    waiting.push((status, body) => res.writeHead(status, { 'content-type': 'application/json' }).end(body));
    arrived?.();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async answer(status, body) {
      if (waiting.length === 0) await new Promise<void>((r) => (arrived = r));
      arrived = undefined;
      waiting.shift()!(status, body);
    },
  };
}

/** An HTTP server that records each request line and authorization and answers `status` with `body`. */
async function capture(status = 200, body = ''): Promise<{ url: string; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((req: IncomingMessage, res) => {
    req.resume();
    seen.push(`${req.method} ${req.url} ${req.headers.authorization ?? '-'}`);
    res.writeHead(status, { 'content-type': 'application/json' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

describe('FleetControl', () => {
  it('answers only the control paths, each with its method', () => {
    const f = control([]);
    expect(f.answer('POST', '/v1/completions', {}, undefined)).toBeUndefined();
    expect(f.answer('GET', '/pause', {}, undefined)).toBeUndefined();
    expect(f.answer('POST', '/is_paused', {}, undefined)).toBeUndefined();
    expect(f.answer('POST', '/pausex', {}, undefined)).toBeUndefined();
  });

  it('pauses every worker once per URL, records it on every worker there, and resumes them', async () => {
    const [a, b] = [await sim(), await sim()];
    const state = new Recorded();
    const members = [
      worker(a.url, 'prefill'),
      worker(a.url, 'decode'),
      worker(b.url, 'regular', 0),
      worker(b.url, 'regular', 1),
    ];
    const f = control(members, state);
    const res = await f.answer('POST', '/pause?mode=keep', {}, undefined)!;
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      status: 'paused',
      workers: [
        { url: a.url, roles: ['prefill', 'decode'], status: 200 },
        { url: b.url, roles: ['regular'], status: 200 },
      ],
    });
    expect([a.paused, b.paused]).toEqual([true, true]);
    // mode=keep leaves vLLM's cache as it is: nothing forgotten.
    expect(state.calls).toEqual(members.map((w) => `${w.id} paused=true`));

    const polled = await f.answer('GET', '/is_paused', {}, undefined)!;
    expect(polled.status).toBe(200);
    expect((polled.body as { is_paused: boolean }).is_paused).toBe(true);

    state.calls.length = 0;
    const resumed = await f.answer('POST', '/resume', {}, undefined)!;
    expect(resumed.status).toBe(200);
    expect((resumed.body as { status: string }).status).toBe('resumed');
    expect([a.paused, b.paused]).toEqual([false, false]);
    expect(state.calls).toEqual(members.map((w) => `${w.id} paused=false`));
    expect(
      ((await f.answer('GET', '/is_paused', {}, undefined)!).body as { is_paused: boolean }).is_paused,
    ).toBe(false);
  });

  it("a pause that empties vLLM's cache (mode abort or wait) and a cache reset make the router forget", async () => {
    const a = await sim();
    const w = worker(a.url);
    const state = new Recorded();
    const f = control([w], state);
    expect((await f.answer('POST', '/pause?mode=wait', {}, undefined)!).status).toBe(200);
    expect(state.calls).toEqual([`${w.id} paused=true`, `${w.id} cleared`]);
    state.calls.length = 0;
    expect((await f.answer('POST', '/pause?mode=abort&clear_cache=false', {}, undefined)!).status).toBe(200);
    expect(state.calls).toEqual([`${w.id} paused=true`]);
    state.calls.length = 0;
    expect((await f.answer('POST', '/reset_prefix_cache', {}, undefined)!).status).toBe(200);
    expect(state.calls).toEqual([`${w.id} cleared`]);
    state.calls.length = 0;
    expect((await f.answer('POST', '/reset_mm_cache', {}, undefined)!).status).toBe(200);
    expect(state.calls).toEqual([]);
  });

  it('sleep records the workers asleep; wake_up records what their /is_sleeping then says', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a.url), worker(b.url)];
    const state = new Recorded();
    const f = control([wa, wb], state);
    expect((await f.answer('POST', '/sleep?level=1', {}, undefined)!).status).toBe(200);
    expect([a.sleepLevel, b.sleepLevel]).toEqual([1, 1]);
    expect(state.calls).toEqual([`${wa.id} asleep=true`, `${wb.id} asleep=true`]);
    const asleep = await f.answer('GET', '/is_sleeping', {}, undefined)!;
    expect((asleep.body as { is_sleeping: boolean }).is_sleeping).toBe(true);
    state.calls.length = 0;
    expect((await f.answer('POST', '/wake_up', {}, undefined)!).status).toBe(200);
    expect([a.sleepLevel, b.sleepLevel]).toEqual([0, 0]);
    expect(state.calls).toEqual([`${wa.id} asleep=false`, `${wb.id} asleep=false`]);
  });

  it('a wake whose /is_sleeping cannot be read: awake without tags, as before with them', async () => {
    const a = await capture(200, ''); // every path 200, no {"is_sleeping": ...} in the answer
    const w = worker(a.url);
    w.asleep = true;
    const f = control([w]);
    expect((await f.answer('POST', '/wake_up?tags=weights', {}, undefined)!).status).toBe(200);
    expect(w.asleep).toBe(true); // a partial wake: the KV cache may still sleep
    expect((await f.answer('POST', '/wake_up', {}, undefined)!).status).toBe(200);
    expect(w.asleep).toBe(false);
    expect(a.seen.filter((l) => l.startsWith('GET /is_sleeping'))).toHaveLength(2);
  });

  it('worker_url narrows the call to that worker (and is not passed on); an unknown one is a 404', async () => {
    const [a, b] = [await capture(200, '{"status":"paused"}'), await capture(200, '{"status":"paused"}')];
    const state = new Recorded();
    const wb = worker(b.url);
    const f = control([worker(a.url), wb], state);
    const res = await f.answer(
      'POST',
      `/pause?mode=keep&worker_url=${encodeURIComponent(`${b.url}/`)}`,
      {},
      undefined,
    )!;
    expect(res.status).toBe(200);
    expect(a.seen).toEqual([]);
    expect(b.seen).toEqual(['POST /pause?mode=keep -']);
    expect(state.calls).toEqual([`${wb.id} paused=true`]);

    const unknown = await f.answer('POST', '/pause?worker_url=http://10.9.9.9:8000', {}, undefined)!;
    expect(unknown.status).toBe(404);
    expect(JSON.stringify(unknown.body)).toContain('http://10.9.9.9:8000');
    expect(b.seen).toHaveLength(1);
  });

  it('a worker counts as paused from the moment the pause is sent, before its answer', async () => {
    let answer: () => void = () => undefined;
    const server = createServer((req, res) => {
      req.resume();
      answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"paused"}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
    const w = worker(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const pending = control([w]).answer('POST', '/pause?mode=keep', {}, undefined)!;
    expect(w.paused).toBe(true);
    await new Promise<void>((r) => server.once('request', () => r()));
    answer();
    expect((await pending).status).toBe(200);
    expect(w.paused).toBe(true);
  });

  it("a pause or resume in flight, or ended after a poll read was sent, is newer than that read's answer", async () => {
    let answer: () => void = () => undefined;
    const server = createServer((req, res) => {
      req.resume();
      answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"resumed"}');
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    let now = 100;
    const f = new FleetControl({
      members: () => [worker(url)],
      state: new Recorded(),
      clock: () => now,
      timeoutMs: 5_000,
    });
    open.push(f);
    expect(f.supersedes(url, 0)).toBe(false); // nothing sent yet
    const pending = f.answer('POST', '/resume', {}, undefined)!;
    expect(f.supersedes(url, 1_000)).toBe(true); // in flight: whatever a read says is older
    await new Promise<void>((r) => server.once('request', () => r()));
    now = 200;
    answer();
    expect((await pending).status).toBe(200);
    expect(f.supersedes(url, 150)).toBe(true); // sent before the call ended
    expect(f.supersedes(url, 250)).toBe(false);
    expect(f.supersedes('http://127.0.0.1:1', 0)).toBe(false);
  });

  it('a sleep counts from the moment it is sent; a worker that refuses it is awake again', async () => {
    const held = await holding();
    const w = worker(held.url);
    const state = new Recorded();
    const f = control([w], state);
    // Falling asleep takes vLLM seconds: no request may be routed to the engine meanwhile.
    const taken = f.answer('POST', '/sleep?level=1', {}, undefined)!;
    expect(w.asleep).toBe(true);
    await held.answer(200, '');
    expect((await taken).status).toBe(200);
    expect(w.asleep).toBe(true);
    expect(state.calls).toEqual([`${w.id} asleep=true`]);

    state.calls.length = 0;
    w.asleep = false;
    const refused = f.answer('POST', '/sleep?level=1', {}, undefined)!;
    expect(w.asleep).toBe(true);
    await held.answer(500, '{"detail":"sleep mode is not enabled"}');
    expect((await refused).status).toBe(502);
    expect(w.asleep).toBe(false);
    expect(state.calls).toEqual([`${w.id} asleep=true`, `${w.id} asleep=false`]);
  });

  it('a sleep the worker refuses leaves its open circuit breaker open: no client request is let back in', async () => {
    const a = await capture(500, '{"detail":"sleep mode is not enabled"}');
    const w = worker(a.url);
    const health = new WorkerHealth({ breaker: { failureThreshold: 5, cooldownMs: 30_000 } });
    for (let i = 0; i < 5; i++) health.recordOutcome(w, 'server_error', 0);
    expect(health.view(w, 0)).toMatchObject({ breaker: 'open', selectable: false });
    const f = control([w], {
      recordPause: (x, paused, now) => health.recordPause(x, paused, now),
      recordSleep: (x, asleep, now) => health.recordSleep(x, asleep, now),
      sleepRefused: (x, now) => health.sleepRefused(x, now),
      cacheCleared: () => {},
    });
    expect((await f.answer('POST', '/sleep?level=1', {}, undefined)!).status).toBe(502);
    // The failing worker stays out until its cool-down ends, as before the refused sleep.
    expect(health.view(w, 0)).toMatchObject({ asleep: false, breaker: 'open', selectable: false });
    expect(w.healthy).toBe(false);
    expect(w.load).toBe(0);
  });

  it.each(['0', 'no', 'off', 'False', 'N', 'f'])(
    "a pause with clear_cache=%s keeps vLLM's cache (pydantic reads it false): the router forgets nothing",
    async (value) => {
      const a = await sim();
      const w = worker(a.url);
      const state = new Recorded();
      const f = control([w], state);
      const res = await f.answer('POST', `/pause?mode=abort&clear_cache=${value}`, {}, undefined)!;
      expect(res.status).toBe(200);
      expect(state.calls).toEqual([`${w.id} paused=true`]);
      expect(w.load).toBe(0);
    },
  );

  it('a sleep or wake_up in flight, or ended after a metrics page was read, is newer than its sleep state', async () => {
    const held = await holding();
    let now = 100;
    const f = new FleetControl({
      members: () => [worker(held.url)],
      state: new Recorded(),
      clock: () => now,
      timeoutMs: 5_000,
    });
    open.push(f);
    expect(f.supersedes(held.url, 0, 'sleep')).toBe(false);
    const pending = f.answer('POST', '/sleep', {}, undefined)!;
    expect(f.supersedes(held.url, 1_000, 'sleep')).toBe(true);
    expect(f.supersedes(held.url, 1_000, 'pause')).toBe(false); // a sleep says nothing of a pause
    now = 200;
    await held.answer(200, '');
    expect((await pending).status).toBe(200);
    expect(f.supersedes(held.url, 150, 'sleep')).toBe(true); // read while it was falling asleep
    expect(f.supersedes(held.url, 250, 'sleep')).toBe(false);
  });

  it("passes the client's authorization and body on, or --worker-api-key instead", async () => {
    const a = await capture();
    await control([worker(a.url)]).answer(
      'POST',
      '/sleep?level=2',
      { authorization: 'Bearer client' },
      Buffer.from('{}'),
    )!;
    await control([worker(a.url)], new Recorded(), 'fleet-key').answer(
      'POST',
      '/resume',
      { authorization: 'Bearer client' },
      undefined,
    )!;
    expect(a.seen).toEqual(['POST /sleep?level=2 Bearer client', 'POST /resume Bearer fleet-key']);
  });

  it('a worker that cannot be reached makes a 502 naming it; the others are paused and recorded', async () => {
    const a = await sim();
    const gone = await capture();
    await open.pop()!.close(); // its port is closed now
    const [wa, wg] = [worker(a.url), worker(gone.url)];
    const state = new Recorded();
    const res = await control([wa, wg], state).answer('POST', '/pause?mode=keep', {}, undefined)!;
    expect(res.status).toBe(502);
    const body = res.body as { error: { message: string }; workers: Array<{ url: string; status: number }> };
    expect(body.error.message).toContain(`1 of 2 workers took it; failed: ${gone.url}`);
    expect(body.workers.map((w) => w.status)).toEqual([200, 0]);
    expect(a.paused).toBe(true);
    // Both counted paused from the moment the call went out; the one that did not take it is not.
    expect(state.calls).toEqual([`${wa.id} paused=true`, `${wg.id} paused=true`, `${wg.id} paused=false`]);
    expect([wa.paused, wg.paused]).toEqual([true, false]);
  });

  it('a static worker its health checks hold down does not fail the pause: 200, listed down', async () => {
    const a = await sim();
    const gone = await capture();
    await open.pop()!.close(); // the process died; a static worker stays a member
    const [wa, wg] = [worker(a.url), worker(gone.url)];
    const state = new Recorded();
    const f = control([wa, wg], state, undefined, (w) => w === wg);
    const res = await f.answer('POST', '/pause?mode=keep', {}, undefined)!;
    expect(res.status).toBe(200);
    const body = res.body as {
      status: string;
      workers: Array<{ url: string; status: number; down?: boolean }>;
    };
    expect(body.status).toBe('paused');
    expect(body.workers.map((w) => [w.url, w.status, w.down])).toEqual([
      [a.url, 200, undefined],
      [gone.url, 0, true],
    ]);
    expect([wa.paused, wg.paused]).toEqual([true, false]);
    // The fleet's is_paused is the answer of the workers that run.
    const asked = await f.answer('GET', '/is_paused', {}, undefined)!;
    expect(asked.status).toBe(200);
    expect((asked.body as { is_paused: boolean }).is_paused).toBe(true);
    await f.answer('POST', '/resume', {}, undefined);
    // Only the dead ones: nothing took it, a 503 in JSON.
    const none = await control([wg], new Recorded(), undefined, () => true).answer(
      'POST',
      '/pause',
      {},
      undefined,
    )!;
    expect(none.status).toBe(503);
    expect((none.body as { error: { type: string } }).error.type).toBe('service_unavailable');
  });

  it('a down worker that answers after all (it just came back) is paused like the others', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a.url), worker(b.url)];
    const res = await control([wa, wb], new Recorded(), undefined, (w) => w === wb).answer(
      'POST',
      '/pause?mode=keep',
      {},
      undefined,
    )!;
    expect(res.status).toBe(200);
    expect((res.body as { workers: Array<{ down?: boolean }> }).workers.map((w) => w.down)).toEqual([
      undefined,
      undefined,
    ]);
    expect([a.paused, b.paused, wa.paused, wb.paused]).toEqual([true, true, true, true]);
    await control([wa, wb]).answer('POST', '/resume', {}, undefined);
  });

  it('a fleet that does not serve the path (vLLM without dev mode) gets its 404 with a hint; no member is a 503', async () => {
    const [a, b] = [
      await capture(404, '{"detail":"Not Found"}'),
      await capture(404, '{"detail":"Not Found"}'),
    ];
    const state = new Recorded();
    const res = await control([worker(a.url), worker(b.url)], state).answer('POST', '/pause', {}, undefined)!;
    expect(res.status).toBe(404);
    expect((res.body as { error: { message: string } }).error.message).toBe(
      'Not Found (vLLM serves /pause with VLLM_SERVER_DEV_MODE=1)',
    );
    expect(state.calls.filter((c) => c.endsWith('paused=false'))).toHaveLength(2);
    expect(state.calls.filter((c) => c.endsWith('cleared'))).toEqual([]);
    expect((await control([]).answer('POST', '/resume', {}, undefined)!).status).toBe(503);
  });
});
