/**
 * a load through the router skips the members that are not selectable at that moment (a
 * cordon, a sleep, an open circuit breaker, a failed health check) and lists them in `skipped`. Such a
 * worker is the same process when it comes back into selection (same URL, same generation), so the
 * join replay (LoraFanout.sync: new `url generation` keys only) never loads the adapter on it. The
 * router then routes the adapter's requests to it (served-models.ts: a base model's workers are
 * interchangeable for its adapters), and vLLM answers 404 there. An unload that skips a worker leaves
 * the adapter on it: once back it serves an adapter the client unloaded, and an adapter swapped for a
 * new version under its name (unload, load) stays the old version there (vLLM refuses the new load:
 * "already been loaded").
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LoraFanout } from '../../../src/routing/lora-fanout.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function sim(): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, model: 'base', lora: { maxLoras: 2 } });
  open.push(s);
  return s;
}

const worker = (s: Simulator): Worker =>
  new Worker({ role: 'regular', url: s.url, endpoint: s.hostPort, generation: 1 });
const served = (s: Simulator) => (s as unknown as { serves(m: string): boolean }).serves('sql');
const LOAD = Buffer.from(JSON.stringify({ lora_name: 'sql', lora_path: '/adapters/sql' }));

describe('LoRA load with a worker out of selection', () => {
  it('loads the adapter on a skipped worker once it is back in selection', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a), worker(b)];
    const members = [wa, wb];
    const f = new LoraFanout({ members: () => members, timeoutMs: 5_000 });
    open.push(f);
    f.sync();
    // b is cordoned (maintenance) while the trainer loads the adapter.
    wb.healthy = false;
    wb.cordoned = true;
    const res = await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!;
    expect(res.status).toBe(200);
    expect((res.body as { skipped: unknown[] }).skipped).toEqual([
      { url: b.url, role: 'regular', reason: 'cordoned' },
    ]);
    // b is uncordoned: back in selection, the same process. The router is told (a membership or a
    // health change calls sync()).
    wb.healthy = true;
    wb.cordoned = false;
    f.sync();
    await waitFor(() => served(b), { timeoutMs: 15_000, message: 'b never got the adapter' });
    expect([served(a), served(b)]).toEqual([true, true]);
  });

  it('unloads the adapter from a worker an unload skipped once it is back in selection', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a), worker(b)];
    const members = [wa, wb];
    const f = new LoraFanout({ members: () => members, timeoutMs: 5_000 });
    open.push(f);
    f.sync();
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(200);
    expect([served(a), served(b)]).toEqual([true, true]);
    // b is asleep while the trainer unloads the adapter (to load a new version under the same name,
    // or to retire it).
    wb.healthy = false;
    wb.asleep = true;
    const UNLOAD = Buffer.from(JSON.stringify({ lora_name: 'sql' }));
    const res = await f.answer('POST', '/v1/unload_lora_adapter', {}, UNLOAD)!;
    expect(res.status).toBe(200);
    expect((res.body as { skipped: unknown[] }).skipped).toEqual([
      { url: b.url, role: 'regular', reason: 'asleep' },
    ]);
    wb.healthy = true;
    wb.asleep = false;
    f.sync();
    await waitFor(() => !served(b), { timeoutMs: 5_000, message: 'b still serves the unloaded adapter' });
    expect([served(a), served(b)]).toEqual([false, false]);
  });

  it('a worker skipped by the unload and reload of a new version gets the new version', async () => {
    const [a, b] = [await pathRecordingVllm(), await pathRecordingVllm()];
    const [wa, wb] = [fakeWorker(a.url), fakeWorker(b.url)];
    const members = [wa, wb];
    const f = new LoraFanout({ members: () => members, timeoutMs: 5_000 });
    open.push(f);
    f.sync();
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!).status).toBe(200);
    wb.healthy = false;
    wb.cordoned = true;
    const UNLOAD = Buffer.from(JSON.stringify({ lora_name: 'sql' }));
    const V2 = Buffer.from(JSON.stringify({ lora_name: 'sql', lora_path: '/adapters/sql-v2' }));
    expect((await f.answer('POST', '/v1/unload_lora_adapter', {}, UNLOAD)!).status).toBe(200);
    expect((await f.answer('POST', '/v1/load_lora_adapter', {}, V2)!).status).toBe(200);
    wb.healthy = true;
    wb.cordoned = false;
    f.sync();
    // Without the unload first, vLLM refuses the load of version 2 ("already been loaded") and b goes
    // on serving version 1 under the name.
    await waitFor(() => b.adapters.get('sql') === '/adapters/sql-v2', {
      timeoutMs: 5_000,
      message: `b serves ${b.adapters.get('sql')}`,
    });
    expect(a.adapters.get('sql')).toBe('/adapters/sql-v2');
  });
});

/** vLLM's runtime LoRA endpoints, remembering the path each adapter name was loaded from. */
async function pathRecordingVllm(): Promise<{ url: string; adapters: Map<string, string> }> {
  const adapters = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      const { lora_name: name, lora_path: path } = JSON.parse(text) as {
        lora_name: string;
        lora_path?: string;
      };
      const error = (status: number, message: string): void => {
        res
          .writeHead(status, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { message } }));
      };
      if (req.url === '/v1/load_lora_adapter') {
        if (adapters.has(name)) return error(400, `The lora adapter '${name}' has already been loaded.`);
        adapters.set(name, path ?? '');
        res.writeHead(200).end(`Success: LoRA adapter '${name}' added successfully.`);
      } else if (adapters.delete(name)) {
        res.writeHead(200).end(`Success: LoRA adapter '${name}' removed successfully.`);
      } else error(404, `The lora adapter '${name}' cannot be found.`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  open.push({ close: () => new Promise<void>((r) => server.close(() => r())) });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, adapters };
}

const fakeWorker = (url: string): Worker =>
  new Worker({ role: 'regular', url, endpoint: new URL(url).host, generation: 1 });
