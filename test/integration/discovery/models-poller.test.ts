/**
 * ModelsPoller against real HTTP servers: simulated vLLM workers' GET /v1/models, and hand-made
 * servers for the cases a worker can throw at it (no list, garbage, a hang).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ModelsPoller, type ModelsPollOutcome } from '../../../src/discovery/models-poller.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { ModelCatalog } from '../../../src/workers/served-models.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';

const pollers: ModelsPoller[] = [];
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(pollers.splice(0).map((p) => p.close()));
  await Promise.all(closers.splice(0).map((c) => c()));
});

async function serve(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ url: string; open: number }> {
  const open = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const t = {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get open() {
      return open.size;
    },
  };
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return t;
}

async function sim(opts: Parameters<typeof startSimulator>[0]): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, ...opts });
  closers.push(() => s.close());
  return s;
}

const workerAt = (url: string, generation = 1) =>
  new Worker({ role: 'regular', url, endpoint: url.slice('http://'.length), generation });

function poller(workers: () => Worker[], intervalMs = 3_600_000, timeoutMs = 1_000) {
  const catalog = new ModelCatalog();
  const outcomes: Array<{ url: string; outcome: ModelsPollOutcome; reason?: string }> = [];
  const p = new ModelsPoller({
    workers,
    catalog,
    intervalMs,
    timeoutMs,
    onPolled: (url, outcome, reason) => outcomes.push({ url, outcome, ...(reason ? { reason } : {}) }),
  });
  pollers.push(p);
  return { p, catalog, outcomes };
}

describe('ModelsPoller', () => {
  it("records each worker's served names and adapters from its /v1/models", async () => {
    const a = await sim({
      model: 'llama',
      aliases: ['llama-chat'],
      lora: { maxLoras: 2, modules: ['sql-lora'] },
    });
    const b = await sim({ model: 'qwen' });
    const workers = [workerAt(a.url), workerAt(b.url)];
    const { p, catalog, outcomes } = poller(() => workers);
    expect(p.seenAll()).toBe(false);
    p.start();
    await waitFor(() => p.seenAll(), { message: 'both workers read' });
    expect(catalog.of(a.url)?.base).toEqual(['llama', 'llama-chat']);
    expect([...catalog.of(a.url)!.adapters]).toEqual([['sql-lora', 'llama']]);
    expect(catalog.of(b.url)?.base).toEqual(['qwen']);
    expect(outcomes.map((o) => o.outcome)).toEqual(['listed', 'listed']);
  });

  it('a worker without the page keeps its metrics label; garbage or a failure keeps what was known', async () => {
    let body = JSON.stringify({ data: [{ id: 'llama' }, { id: 'sql-lora', parent: 'llama' }] });
    let status = 200;
    const s = await serve((_req, res) => res.writeHead(status).end(body));
    const w = workerAt(s.url);
    const catalog = new ModelCatalog();
    catalog.recordLabel(s.url, 'llama');
    /** One round of a fresh poller (no timer left running between the steps). */
    const readOnce = async (): Promise<{ outcome: ModelsPollOutcome; reason?: string }> => {
      const seen: Array<{ outcome: ModelsPollOutcome; reason?: string }> = [];
      const p = new ModelsPoller({
        workers: () => [w],
        catalog,
        intervalMs: 3_600_000,
        timeoutMs: 1_000,
        onPolled: (_url, outcome, reason) => seen.push({ outcome, ...(reason ? { reason } : {}) }),
      });
      p.start();
      await waitFor(() => seen.length === 1);
      await p.close();
      return seen[0]!;
    };

    expect(await readOnce()).toEqual({ outcome: 'listed' });
    expect(catalog.of(s.url)?.adapters.get('sql-lora')).toBe('llama');

    body = '<html>not a list</html>';
    expect(await readOnce()).toEqual({ outcome: 'invalid', reason: 'not a model list' });
    expect(catalog.of(s.url)?.adapters.get('sql-lora')).toBe('llama');

    status = 503;
    expect(await readOnce()).toEqual({ outcome: 'failed', reason: 'status 503' });
    expect(catalog.of(s.url)?.adapters.get('sql-lora')).toBe('llama');

    status = 404;
    expect(await readOnce()).toEqual({ outcome: 'absent' });
    expect(catalog.of(s.url)).toEqual({ base: ['llama'], adapters: new Map() });
  });

  it('pollNew reads a worker that joined, or re-registered at its URL, without waiting for the next round', async () => {
    const a = await sim({ model: 'llama' });
    const b = await sim({ model: 'qwen' });
    const workers = [workerAt(a.url)];
    const { p, catalog, outcomes } = poller(() => workers);
    p.start();
    await waitFor(() => outcomes.length === 1);
    p.pollNew(); // nothing new: no read
    expect(p.readsInFlight).toBe(0);
    workers.push(workerAt(b.url));
    p.pollNew();
    await waitFor(() => catalog.of(b.url) !== undefined, { message: 'the new worker read' });
    expect(outcomes.map((o) => o.url)).toEqual([a.url, b.url]);
    workers[0] = workerAt(a.url, 2); // a new process at the same URL
    expect(p.seenAll()).toBe(false);
    p.pollNew();
    await waitFor(() => outcomes.length === 3);
    expect(outcomes[2]?.url).toBe(a.url);
    expect(p.seenAll()).toBe(true);
  });

  it('a worker re-registered while its read runs is read again once that read ends', async () => {
    const held: ServerResponse[] = [];
    let listed = 'llama';
    const s = await serve((_req, res) => {
      held.push(res);
    });
    const answer = (res: ServerResponse) => res.end(JSON.stringify({ data: [{ id: listed }] }));
    const workers = [workerAt(s.url, 1)];
    const { p, catalog, outcomes } = poller(() => workers);
    p.start();
    await waitFor(() => held.length === 1, { message: 'the first read arrived' });
    workers[0] = workerAt(s.url, 2); // the old process died; a new one serves another model
    p.pollNew(); // the URL's read is still running: looked at again when it ends
    answer(held[0]!); // the old read ends with the old process's list
    await waitFor(() => held.length === 2, { message: 'the new generation read' });
    expect(catalog.of(s.url)?.base).toEqual(['llama']);
    listed = 'qwen';
    answer(held[1]!);
    await waitFor(() => outcomes.length === 2);
    expect(catalog.of(s.url)?.base).toEqual(['qwen']);
    expect(p.seenAll()).toBe(true);
  });

  it('a read whose report throws is told as a failure, and the worker is read again later', async () => {
    const a = await sim({ model: 'llama' });
    const seen: Array<[ModelsPollOutcome, string | undefined]> = [];
    let throwOnce = true;
    const p = new ModelsPoller({
      workers: () => [workerAt(a.url)],
      catalog: new ModelCatalog(),
      intervalMs: 3_600_000,
      timeoutMs: 1_000,
      onPolled: (_url, outcome, reason) => {
        seen.push([outcome, reason]);
        if (throwOnce) {
          throwOnce = false;
          throw new Error('observer bug');
        }
      },
    });
    pollers.push(p);
    p.start();
    await waitFor(() => seen.length === 2);
    expect(seen).toEqual([
      ['listed', undefined],
      ['failed', 'error: observer bug'],
    ]);
    expect(p.seenAll()).toBe(true);
  });

  it('a hung worker times out without holding the others; close() ends every read', async () => {
    const hung = await serve(() => undefined); // never answers
    const ok = await sim({ model: 'llama' });
    const { p, catalog, outcomes } = poller(() => [workerAt(hung.url), workerAt(ok.url)], 3_600_000, 1_000);
    p.start();
    await waitFor(() => catalog.of(ok.url) !== undefined, { message: 'the healthy worker read' });
    await waitFor(() => outcomes.length === 2, { message: 'the hung read timed out' });
    expect(outcomes.find((o) => o.url === hung.url)).toMatchObject({ outcome: 'failed', reason: 'timeout' });

    const hung2 = await serve(() => undefined);
    const { p: p2 } = poller(() => [workerAt(hung2.url)], 3_600_000, 60_000);
    p2.start();
    await waitFor(() => hung2.open === 1, { message: 'the read reached the server' });
    expect(p2.readsInFlight).toBe(1);
    await p2.close();
    expect(p2.readsInFlight).toBe(0);
    await waitFor(() => hung2.open === 0, { message: 'the connection closed' });
  });

  it('does nothing with intervalMs 0 (off), and counts as having seen everyone', async () => {
    const a = await sim({ model: 'llama' });
    const { p, catalog } = poller(() => [workerAt(a.url)], 0);
    p.start();
    p.pollNew();
    expect(p.seenAll()).toBe(true);
    expect(p.readsInFlight).toBe(0);
    expect(catalog.of(a.url)).toBeUndefined();
  });
});
