/**
 * PausePoller against real HTTP servers: simulated vLLM workers' GET /is_paused (a pause sent to the
 * engine directly, not through this router), and a worker that does not serve it (404: dev mode off),
 * which is not read again until it re-registers.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { PausePoller } from '../../../src/health/pause-poller.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

async function sim(): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0 });
  closers.push(() => s.close());
  return s;
}

/** A server answering every request with 404, counting them. */
async function without(): Promise<{ url: string; reads: () => number }> {
  let reads = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    reads += 1;
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not Found"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  closers.push(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, reads: () => reads };
}

const workerAt = (url: string, generation = 1): Worker =>
  new Worker({ role: 'regular', url, endpoint: url.slice('http://'.length), generation });

function poller(workers: () => Worker[]): Array<{ url: string; paused: boolean }> {
  const seen: Array<{ url: string; paused: boolean }> = [];
  const p = new PausePoller({
    workers,
    intervalMs: 10,
    timeoutMs: 1_000,
    clock: () => Date.now(),
    onPaused: (url, paused) => seen.push({ url, paused }),
  });
  closers.push(() => p.close());
  p.start();
  return seen;
}

describe('PausePoller', () => {
  it("reports each worker's own /is_paused: a pause sent to the engine directly shows, and its resume", async () => {
    const [a, b] = [await sim(), await sim()];
    const seen = poller(() => [workerAt(a.url), workerAt(b.url)]);
    await waitFor(() => seen.some((x) => x.url === a.url) && seen.some((x) => x.url === b.url));
    expect(seen.every((x) => !x.paused)).toBe(true);
    await a.pause('keep');
    await waitFor(() => seen.some((x) => x.url === a.url && x.paused), { message: 'a paused' });
    expect(seen.filter((x) => x.url === b.url).every((x) => !x.paused)).toBe(true);
    a.resume();
    const at = seen.length;
    await waitFor(() => seen.slice(at).some((x) => x.url === a.url && !x.paused), { message: 'a resumed' });
  });

  it('a worker without /is_paused (404) is read once per registration generation', async () => {
    const [s, plain] = [await sim(), await without()];
    let members = [workerAt(s.url), workerAt(plain.url)];
    const seen = poller(() => members);
    // Several rounds: the simulator is read in each of them.
    await waitFor(() => seen.filter((x) => x.url === s.url).length >= 4, { message: 'four rounds' });
    expect(plain.reads()).toBe(1);
    expect(seen.some((x) => x.url === plain.url)).toBe(false);
    // A new process at the URL (a re-registration) is asked again.
    members = [workerAt(s.url), workerAt(plain.url, 2)];
    await waitFor(() => plain.reads() === 2, { message: 'the new generation read' });
    const after = seen.filter((x) => x.url === s.url).length;
    await waitFor(() => seen.filter((x) => x.url === s.url).length >= after + 3, {
      message: 'three more rounds',
    });
    expect(plain.reads()).toBe(2);
  });
});
