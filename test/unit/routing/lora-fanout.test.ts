/**
 * LoraFanout against real simulators (real HTTP): a runtime LoRA load or unload sent to every
 * selectable worker, once per URL, with each worker's result and the idempotent cases.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LoraFanout } from '../../../src/routing/lora-fanout.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import type { Role } from '../../../src/workers/role.js';
import { waitFor } from '../../support/wait-for.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function sim(opts: SimulatorOptions = { model: 'base', lora: { maxLoras: 2 } }): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, ...opts });
  open.push(s);
  return s;
}

const worker = (s: { url: string; hostPort?: string }, role: Role = 'regular'): Worker =>
  new Worker({ role, url: s.url, endpoint: s.hostPort ?? new URL(s.url).host, generation: 1 });

function fanout(members: Worker[], answered: string[][] = []): LoraFanout {
  const f = new LoraFanout({
    members: () => members,
    timeoutMs: 5_000,
    onAnswered: (urls) => answered.push([...urls]),
  });
  open.push(f);
  return f;
}

const LOAD = Buffer.from(JSON.stringify({ lora_name: 'sql', lora_path: '/adapters/sql' }));
const UNLOAD = Buffer.from(JSON.stringify({ lora_name: 'sql' }));
const served = (s: Simulator) => (s as unknown as { serves(m: string): boolean }).serves('sql');

describe('LoraFanout', () => {
  it('answers only POST /v1/load_lora_adapter and /v1/unload_lora_adapter', () => {
    const f = fanout([]);
    expect(f.answer('POST', '/v1/completions', {}, LOAD)).toBeUndefined();
    expect(f.answer('GET', '/v1/load_lora_adapter', {}, LOAD)).toBeUndefined();
  });

  it('loads on every worker once per URL (a P/D instance in both roles is one process)', async () => {
    const [a, b] = [await sim(), await sim()];
    const answered: string[][] = [];
    const f = fanout([worker(a, 'prefill'), worker(a, 'decode'), worker(b, 'decode')], answered);
    const res = await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!;
    expect(res.status).toBe(200);
    const body = res.body as {
      object: string;
      workers: Array<{ url: string; roles: string[]; status: number }>;
    };
    expect(body.object).toBe('lora_adapter.load');
    expect(body.workers).toEqual([
      expect.objectContaining({ url: a.url, roles: ['prefill', 'decode'], status: 200 }),
      expect.objectContaining({ url: b.url, roles: ['decode'], status: 200 }),
    ]);
    expect([served(a), served(b)]).toEqual([true, true]);
    expect(answered).toEqual([[a.url, b.url]]);

    // Again: already loaded everywhere, which is where it should be.
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(200);
    const un = await f.answer('POST', '/v1/unload_lora_adapter', {}, UNLOAD)!;
    expect(un.status).toBe(200);
    expect([served(a), served(b)]).toEqual([false, false]);
    expect((await f.answer('POST', '/v1/unload_lora_adapter', {}, UNLOAD)!).status).toBe(200);
  });

  it('loads once on a data-parallel server whose engines are workers of their own', async () => {
    const a = await sim();
    const rank = (r: number) =>
      new Worker({ role: 'regular', url: a.url, endpoint: a.hostPort, generation: 1, dpRank: r });
    const res = await fanout([rank(0), rank(1), rank(2)]).answer('POST', '/v1/load_lora_adapter', {}, LOAD)!;
    expect(res.status).toBe(200);
    expect((res.body as { workers: unknown[] }).workers).toEqual([
      expect.objectContaining({ url: a.url, roles: ['regular'], status: 200 }),
    ]);
    expect(served(a)).toBe(true);
  });

  it('some workers failing: 502 naming them; the others keep the adapter', async () => {
    const ok = await sim();
    const noLora = await sim({ model: 'base' }); // runtime updating off: vLLM has no such route
    const down = { url: 'http://127.0.0.1:9', hostPort: '127.0.0.1:9' };
    const res = await fanout([worker(ok), worker(noLora), worker(down)]).answer(
      'POST',
      '/v1/load_lora_adapter',
      {},
      LOAD,
    )!;
    expect(res.status).toBe(502);
    const body = res.body as {
      error: { message: string; type: string };
      workers: Array<{ status: number; ok: boolean }>;
    };
    expect(body.error.type).toBe('server_error');
    expect(body.error.message).toContain('loaded on 1 of 3 workers');
    expect(body.error.message).toContain(noLora.url);
    expect(body.error.message).toContain('http://127.0.0.1:9');
    expect(body.workers.map((w) => [w.status === 0 ? 0 : w.status, w.ok])).toEqual([
      [200, true],
      [404, false],
      [0, false],
    ]);
    expect(served(ok)).toBe(true);
  });

  it("a body every worker refuses is the client's 400, with the worker's message", async () => {
    const [a, b] = [await sim(), await sim()];
    const res = await fanout([worker(a), worker(b)]).answer(
      'POST',
      '/v1/load_lora_adapter',
      {},
      Buffer.from(JSON.stringify({ lora_name: 'sql' })),
    )!;
    expect(res.status).toBe(400);
    expect((res.body as { error: { message: string } }).error.message).toContain('lora_path');
  });

  it("a lora_path no worker finds is vLLM's 404 and message, as from one vLLM", async () => {
    const [a, b] = [await missingAdapterVllm(), await missingAdapterVllm()];
    const res = await fanout([worker(a), worker(b)]).answer(
      'POST',
      '/v1/load_lora_adapter',
      {},
      Buffer.from(JSON.stringify({ lora_name: 'sql', lora_path: '/adapters/missing' })),
    )!;
    expect({
      status: res.status,
      message: (res.body as { error: { message: string } }).error.message,
    }).toEqual({
      status: 404,
      message: 'Loading lora sql failed: No adapter found for /adapters/missing',
    });
  });

  it('skips workers that are not selectable and says why; none selectable is a 503', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a), worker(b)];
    wb.healthy = false;
    wb.asleep = true;
    const res = await fanout([wa, wb]).answer('POST', '/v1/load_lora_adapter', {}, LOAD)!;
    expect(res.status).toBe(200);
    expect((res.body as { skipped: unknown[] }).skipped).toEqual([
      { url: b.url, role: 'regular', reason: 'asleep' },
    ]);
    expect([served(a), served(b)]).toEqual([true, false]);
    wa.healthy = false;
    expect((await fanout([wa, wb]).answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(503);
  });

  it('sends the client authorization, or --worker-api-key instead when set', async () => {
    const keyed = await sim({ model: 'base', lora: { maxLoras: 1 }, apiKey: 'k' });
    const plain = new LoraFanout({ members: () => [worker(keyed)], timeoutMs: 5_000 });
    open.push(plain);
    // Refused without the key: vLLM's 401, as the client would get it from one vLLM.
    expect((await plain.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(401);
    expect(
      (await plain.answer('POST', '/v1/load_lora_adapter', { authorization: 'Bearer k' }, LOAD)!).status,
    ).toBe(200);
    const withKey = new LoraFanout({ members: () => [worker(keyed)], timeoutMs: 5_000, apiKey: 'k' });
    open.push(withKey);
    expect((await withKey.answer('POST', '/v1/unload_lora_adapter', {}, UNLOAD)!).status).toBe(200);
  });

  it('a worker that joins later, or restarts, gets the adapters loaded so far; an unload is forgotten', async () => {
    const [a, b] = [await sim(), await sim()];
    const members = [worker(a)];
    const replays: Array<[string, string, boolean]> = [];
    const f = new LoraFanout({
      members: () => members,
      timeoutMs: 5_000,
      onReplayed: (url, name, ok) => replays.push([url, name, ok]),
    });
    open.push(f);
    f.sync(); // the members at start: nothing to replay
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(200);
    const other = Buffer.from(JSON.stringify({ lora_name: 'chat', lora_path: '/adapters/chat' }));
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, other)!).status).toBe(200);
    expect(
      (await f.answer('POST', '/v1/unload_lora_adapter', {}, Buffer.from('{"lora_name":"chat"}'))!).status,
    ).toBe(200);
    expect(f.rememberedAdapters).toEqual(['sql']);
    members.push(worker(b));
    f.sync();
    await waitFor(() => replays.length === 1);
    expect(replays).toEqual([[b.url, 'sql', true]]);
    expect(served(b)).toBe(true);
    f.sync(); // nothing new: nothing sent again
    // A restarted process at a known URL (a new generation) lost its adapters: it gets them again.
    const reborn = new Worker({ role: 'regular', url: b.url, endpoint: b.hostPort, generation: 2 });
    members.splice(1, 1, reborn);
    f.sync();
    await waitFor(() => replays.length === 2);
    expect(replays[1]).toEqual([b.url, 'sql', true]); // already loaded there: taken all the same
  });
});

/** A vLLM whose load finds no adapter at the path (its 404 NotFoundError). */
async function missingAdapterVllm(): Promise<{ url: string }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: {
            message: 'Loading lora sql failed: No adapter found for /adapters/missing',
            type: 'NotFoundError',
            param: null,
            code: 404,
          },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  open.push({ close: () => new Promise<void>((resolve) => server.close(() => resolve())) });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}
