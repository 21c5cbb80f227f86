import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LoadBoard } from '../../../src/load/load-board.js';
import { MetricsScraper, type MetricsScraperOptions } from '../../../src/load/metrics-scraper.js';
import type { LoadFigures } from '../../../src/load/metrics-parse.js';
import { Worker } from '../../../src/workers/worker.js';
import { LOOP_STALL_MS } from '../../../src/util/loop-stall.js';
import { waitFor } from '../../support/wait-for.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { startDpSimulator, type DpSimulator } from '../../../src/sim/dp-server.js';

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

interface TestServer {
  url: string;
  requests: number;
  close(): Promise<void>;
}

const servers: TestServer[] = [];
const scrapers: MetricsScraper[] = [];
const sims: Array<Simulator | DpSimulator> = [];

afterEach(async () => {
  await Promise.all(scrapers.splice(0).map((s) => s.close()));
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(sims.splice(0).map((s) => s.close()));
});

/**
 * A completion sent straight to a simulator (rank-pinned when `rank` is given): its status, or 0 when
 * the connection failed (a test that failed early closes the simulator under it).
 */
async function complete(url: string, rank?: number): Promise<number> {
  try {
    return await completeOnce(url, rank);
  } catch {
    return 0;
  }
}

async function completeOnce(url: string, rank?: number): Promise<number> {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(rank === undefined ? {} : { 'x-data-parallel-rank': String(rank) }),
    },
    body: JSON.stringify({ model: 'm', prompt: 'hello there', max_tokens: 2 }),
  });
  await r.text();
  return r.status;
}

async function serve(handler: Handler): Promise<TestServer> {
  const open = new Set<ServerResponse>();
  const server: Server = createServer((req, res) => {
    t.requests += 1;
    open.add(res);
    res.on('close', () => open.delete(res));
    handler(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const t: TestServer = {
    url: `http://127.0.0.1:${port}`,
    requests: 0,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of open) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  servers.push(t);
  return t;
}

const page = (waiting: number, running: number) =>
  `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n# TYPE vllm:num_requests_waiting gauge\n` +
  `vllm:num_requests_waiting{engine="0",model_name="m"} ${waiting}.0\n` +
  `# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n` +
  `vllm:num_requests_running{engine="0",model_name="m"} ${running}.0\n`;

const workerAt = (url: string, role: 'regular' | 'prefill' | 'decode' = 'regular') =>
  new Worker({ role, url, endpoint: url.slice('http://'.length), generation: 1 });

/** Resolves when `count(url)` reaches n. */
function eventCounter() {
  const counts = new Map<string, number>();
  const waiters: Array<{ url: string; n: number; resolve: () => void }> = [];
  return {
    hit(url: string) {
      counts.set(url, (counts.get(url) ?? 0) + 1);
      for (const w of waiters.splice(0)) {
        if ((counts.get(w.url) ?? 0) >= w.n) w.resolve();
        else waiters.push(w);
      }
    },
    count: (url: string) => counts.get(url) ?? 0,
    waitFor(url: string, n: number): Promise<void> {
      if ((counts.get(url) ?? 0) >= n) return Promise.resolve();
      return new Promise((resolve) => waiters.push({ url, n, resolve }));
    },
  };
}

function start(opts: Partial<MetricsScraperOptions> & Pick<MetricsScraperOptions, 'workers'>) {
  const board = new LoadBoard(60_000);
  const checks: Array<[string, boolean]> = [];
  const scraped = eventCounter();
  const failed = eventCounter();
  const reasons: string[] = [];
  const scraper = new MetricsScraper({
    board,
    intervalMs: 20,
    timeoutMs: 10_000,
    health: { recordCheck: (w, ok) => checks.push([w.id, ok]) },
    onScraped: (url: string, _f: LoadFigures) => scraped.hit(url),
    onScrapeFailed: (url, reason) => {
      reasons.push(reason);
      failed.hit(url);
    },
    ...opts,
  });
  scrapers.push(scraper);
  scraper.start();
  return { scraper, board, checks, scraped, failed, reasons };
}

describe('MetricsScraper (real HTTP servers on port 0)', () => {
  it('records the page with the in-flight and queued counts taken at send time; one scrape per URL for two roles', async () => {
    const s = await serve((_req, res) => res.end(page(3, 4)));
    const p = workerAt(s.url, 'prefill');
    const d = workerAt(s.url, 'decode');
    p.load = 1;
    d.load = 1;
    const { board, scraped, checks } = start({
      workers: () => [p, d],
      queuedOf: (w) => (w === p ? 1 : 0), // the prefill leg has not had its first token
    });
    await scraped.waitFor(s.url, 1);
    expect(board.latest(s.url)).toMatchObject({
      localAtSample: 2,
      queuedAtSample: 1,
      figures: { waiting: 3, running: 4 },
    });
    expect(checks.slice(0, 2)).toEqual([
      [p.id, true],
      [d.id, true],
    ]);
  });

  it("a page's sleep state is recorded unless a sleep or wake_up call through the router is newer", async () => {
    const asleepPage =
      page(0, 0) +
      `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0\n` +
      `vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0\n`;
    const s = await serve((_req, res) => res.end(asleepPage));
    const w = workerAt(s.url);
    const sleeps: boolean[] = [];
    let superseded = true;
    const reads: number[] = [];
    const { scraped } = start({
      workers: () => [w],
      health: { recordCheck: () => undefined, recordSleep: (_w, asleep) => sleeps.push(asleep) },
      sleepSuperseded: (url, takenAtMs) => {
        expect(url).toBe(s.url);
        reads.push(takenAtMs);
        return superseded;
      },
    });
    // A sleep sent through the router is taking effect: the page, read meanwhile, says awake.
    await scraped.waitFor(s.url, 2);
    expect(sleeps).toEqual([]);
    superseded = false;
    const at = scraped.count(s.url);
    await scraped.waitFor(s.url, at + 1);
    expect(sleeps.length).toBeGreaterThan(0);
    expect(sleeps.every((a) => a === false)).toBe(true);
    expect(reads.every((t) => Number.isFinite(t))).toBe(true);
  });

  it("records each data-parallel rank's own engine series under its key, from one scrape of the URL", async () => {
    const twoEngines =
      `vllm:num_requests_waiting{engine="0",model_name="m"} 1.0\nvllm:num_requests_waiting{engine="1",model_name="m"} 6.0\n` +
      `vllm:num_requests_running{engine="0",model_name="m"} 2.0\nvllm:num_requests_running{engine="1",model_name="m"} 9.0\n`;
    const s = await serve((_req, res) => res.end(twoEngines));
    const rank = (r: number) =>
      new Worker({
        role: 'regular',
        url: s.url,
        endpoint: s.url.slice('http://'.length),
        generation: 1,
        dpRank: r,
      });
    const [r0, r1, r2] = [rank(0), rank(1), rank(2)];
    r1.load = 3;
    const { board, scraped, checks } = start({ workers: () => [r0, r1, r2] });
    await scraped.waitFor(s.url, 1);
    // One page read per round for the three ranks (at most one more on the wire), not one per rank.
    expect(s.requests).toBeLessThanOrEqual(scraped.count(s.url) + 1);
    expect(board.latest(`${s.url}@0`)).toMatchObject({
      localAtSample: 0,
      figures: { waiting: 1, running: 2 },
    });
    expect(board.latest(`${s.url}@1`)).toMatchObject({
      localAtSample: 3,
      figures: { waiting: 6, running: 9 },
    });
    // A rank the page does not break out gets a sample without load figures (in-flight counts), not
    // the server's total.
    expect(board.latest(`${s.url}@2`)?.figures?.running).toBeUndefined();
    expect(board.latest(s.url)).toBeUndefined();
    expect(checks.slice(0, 3).map(([, ok]) => ok)).toEqual([true, true, true]);
  });

  it("gives each rank of a hybrid-LB node its own engine's load, though vLLM labels engines by global rank", async () => {
    // Node 2 of `vllm serve --data-parallel-size 4 --data-parallel-size-local 2 --data-parallel-start-rank 2
    // --data-parallel-hybrid-lb`: X-data-parallel-rank 0 / 1 pins its engines, labelled engine="2" / "3".
    const node2 =
      `# TYPE vllm:num_requests_waiting gauge\n` +
      `vllm:num_requests_waiting{engine="2",model_name="m"} 1.0\nvllm:num_requests_waiting{engine="3",model_name="m"} 6.0\n` +
      `# TYPE vllm:num_requests_running gauge\n` +
      `vllm:num_requests_running{engine="2",model_name="m"} 2.0\nvllm:num_requests_running{engine="3",model_name="m"} 9.0\n`;
    const s = await serve((_req, res) => res.end(node2));
    const rank = (r: number) =>
      new Worker({
        role: 'regular',
        url: s.url,
        endpoint: s.url.slice('http://'.length),
        generation: 1,
        dpRank: r,
      });
    const [r0, r1] = [rank(0), rank(1)];
    const { board, scraped } = start({ workers: () => [r0, r1] });
    await scraped.waitFor(s.url, 1);
    expect(board.latest(`${s.url}@0`)?.figures).toMatchObject({ waiting: 1, running: 2 });
    expect(board.latest(`${s.url}@1`)?.figures).toMatchObject({ waiting: 6, running: 9 });
    expect([r0.load, r1.load]).toEqual([0, 0]);
  });

  it('reads an SGLang worker with priority scheduling by its queue total, not total plus per-priority breakdown', async () => {
    // `--enable-priority-scheduling`: SGLang writes each queue gauge's total under priority="" and its
    // breakdown under priority="<n>" (collector.py _log_gauge_queue_count).
    const sim = await startSimulator({
      model: 'm',
      timeScale: 0,
      schedulingPolicy: 'priority',
      sglangMetrics: { priorityScheduling: true },
    });
    sims.push(sim);
    await sim.pause('keep', false);
    const answers = [complete(sim.url), complete(sim.url), complete(sim.url)];
    await waitFor(() => sim.waiting() === 3);
    const w = workerAt(sim.url);
    const { board, scraped, scraper } = start({ workers: () => [w] });
    await scraped.waitFor(sim.url, 1);
    expect(board.latest(sim.url)?.figures).toMatchObject({ waiting: 3, running: 0 });
    await scraper.close();
    sim.resume();
    expect(await Promise.all(answers)).toEqual([200, 200, 200]);
    expect(w.load).toBe(0);
  });

  it('gives each rank of an SGLang --dp-size server its own queue (SGLang labels ranks dp_rank, not engine)', async () => {
    const dp = await startDpSimulator({ model: 'm', timeScale: 0, dataParallelSize: 2, sglangMetrics: {} });
    sims.push(dp);
    await (dp.ranks[1] as Simulator).pause('keep', false);
    const answers = [complete(dp.url, 1), complete(dp.url, 1)];
    await waitFor(() => (dp.ranks[1] as Simulator).waiting() === 2);
    const rank = (r: number) =>
      new Worker({
        role: 'regular',
        url: dp.url,
        endpoint: dp.url.slice('http://'.length),
        generation: 1,
        dpRank: r,
      });
    const [r0, r1] = [rank(0), rank(1)];
    const { board, scraped, scraper } = start({ workers: () => [r0, r1] });
    await scraped.waitFor(dp.url, 1);
    expect(board.latest(`${dp.url}@0`)?.figures).toMatchObject({ waiting: 0, running: 0 });
    expect(board.latest(`${dp.url}@1`)?.figures).toMatchObject({ waiting: 2, running: 0 });
    await scraper.close();
    (dp.ranks[1] as Simulator).resume();
    expect(await Promise.all(answers)).toEqual([200, 200]);
    expect([r0.load, r1.load]).toEqual([0, 0]);
  });

  it("scrapes a worker's own metrics port (annotation / metadata) and keys the sample by its URL", async () => {
    const http = await serve((_req, res) => res.writeHead(500).end('not here'));
    const metrics = await serve((_req, res) => res.end(page(5, 2)));
    const metricsPort = Number(new URL(metrics.url).port);
    const w = new Worker({
      role: 'regular',
      url: http.url,
      endpoint: http.url.slice('http://'.length),
      generation: 1,
      metadata: { metrics_port: String(metricsPort) },
    });
    expect(w.metricsPort).toBe(metricsPort);
    const { board, scraped, failed } = start({ workers: () => [w] });
    await scraped.waitFor(http.url, 1);
    expect(board.latest(http.url)).toMatchObject({ figures: { waiting: 5, running: 2 } });
    expect(http.requests).toBe(0);
    expect(failed.count(http.url)).toBe(0);
  });

  it('a hung worker never delays the others, and is never scraped twice at once', async () => {
    let release: (() => void) | undefined;
    const slow = await serve((_req, res) => {
      release = () => res.end(page(0, 1));
    });
    const fast = await serve((_req, res) => res.end(page(1, 1)));
    const { scraped, scraper } = start({
      workers: () => [workerAt(slow.url), workerAt(fast.url)],
      concurrency: 2,
    });
    await scraped.waitFor(fast.url, 5);
    expect(slow.requests).toBe(1);
    expect(scraped.count(slow.url)).toBe(0);
    expect(scraper.scrapesInFlight).toBeGreaterThanOrEqual(1);
    release!();
    await scraped.waitFor(slow.url, 1);
  });

  it('a timeout is a failed check of the metrics source', async () => {
    const hung = await serve(() => undefined);
    const w = workerAt(hung.url);
    const { checks, reasons } = start({ workers: () => [w], timeoutMs: 100 });
    // A timer that fired late on a starved machine is `router_stalled` (inconclusive, no check).
    const conclusive = () => reasons.filter((r) => r !== 'router_stalled');
    await waitFor(() => conclusive().length >= 2, { message: 'two timeouts', timeoutMs: 30_000 });
    expect(conclusive().slice(0, 2)).toEqual(['timeout', 'timeout']);
    expect(checks.slice(0, 2)).toEqual([
      [w.id, false],
      [w.id, false],
    ]);
  });

  it("a timeout caused by the router's own blocked event loop is inconclusive, not a failed check", async () => {
    const timeoutMs = 1000;
    // Never answers; holds the loop as it receives the scrape (think: tokenizing a 200 KB prompt), well
    // past the timeout. Run in the handler, the hold starts right after the scrape was sent, before its
    // timer can fire even on a starved machine.
    const hung = await serve(() => {
      const until = performance.now() + timeoutMs + LOOP_STALL_MS + 500;
      while (performance.now() < until);
    });
    const w = workerAt(hung.url);
    const { failed, checks, reasons } = start({ workers: () => [w], timeoutMs, intervalMs: 60_000 });
    await failed.waitFor(hung.url, 1);
    expect(reasons[0]).toBe('router_stalled');
    expect(checks).toEqual([]);
  });

  it('5xx and a reset are failed checks; 404 means no metrics, which is not a failure', async () => {
    const broken = await serve((_req, res) => res.writeHead(503).end('down'));
    const reset = await serve((req) => req.socket.destroy());
    const absent = await serve((_req, res) => res.writeHead(404).end());
    const ok = await serve((_req, res) => res.end(page(0, 0)));
    const workers = [broken, reset, absent, ok].map((s) => workerAt(s.url));
    const { failed, scraped, checks, reasons, board } = start({ workers: () => workers });
    await Promise.all([
      failed.waitFor(broken.url, 1),
      failed.waitFor(reset.url, 1),
      scraped.waitFor(ok.url, 3),
    ]);
    while (absent.requests < 2) await new Promise((resolve) => setImmediate(resolve));
    expect(reasons).toContain('status 503');
    expect(failed.count(absent.url), JSON.stringify(reasons)).toBe(0);
    // The process answered: a passed check of the metrics source at most, never a failed one.
    expect(checks.some(([id, okay]) => id === workers[2]!.id && !okay)).toBe(false);
    expect(board.latest(absent.url)).toBeUndefined();
    expect(checks.filter(([id, okay]) => id === workers[0]!.id && okay)).toEqual([]);
  });

  it('a worker that stops exporting /metrics (404) is no longer read through its last page', async () => {
    let status = 200;
    const server = await serve((_req, res) =>
      status === 200 ? res.end(page(9, 3)) : res.writeHead(404).end(),
    );
    const worker = workerAt(server.url);
    const { scraped, board } = start({ workers: () => [worker] });
    await scraped.waitFor(server.url, 1);
    expect(board.latest(server.url)?.figures.waiting).toBe(9);

    // A proxy that forwards only /v1 now stands in front of it (or a server without metrics took over).
    status = 404;
    const seen = server.requests;
    while (server.requests < seen + 2) await new Promise((resolve) => setImmediate(resolve));
    // Its old queue of 9 must not stand for it: once stale it would show no room for good
    // (load/saturation.ts), and /workers and the scraped gauges would keep showing it.
    expect(board.latest(server.url)).toBeUndefined();
  });

  it('a page over 4 MiB is a failed check (too_large), read no further', async () => {
    const line = `# ${'x'.repeat(1022)}\n`; // 1 KiB comment lines: 5 MiB in all
    const huge = await serve((_req, res) => {
      for (let i = 0; i < 5 * 1024; i++) res.write(line);
      res.end(page(0, 0));
    });
    const w = workerAt(huge.url);
    const { failed, checks, reasons, board } = start({ workers: () => [w] });
    await failed.waitFor(huge.url, 1);
    expect(reasons[0]).toBe('too_large');
    expect(checks[0]).toEqual([w.id, false]);
    expect(board.latest(huge.url)).toBeUndefined();
  });

  it('close() is idempotent, aborts scrapes in flight and records nothing after', async () => {
    const hung = await serve(() => undefined);
    const { scraper, checks } = start({ workers: () => [workerAt(hung.url)] });
    while (hung.requests === 0) await new Promise((resolve) => setImmediate(resolve));
    await Promise.all([scraper.close(), scraper.close()]);
    expect(scraper.scrapesInFlight).toBe(0);
    expect(checks).toEqual([]);
  });

  it('keeps nothing of the workers that left: pods churning through new addresses do not grow it', async () => {
    const s = await serve((_req, res) => res.end(page(0, 0)));
    // One server under many URLs (a path each): a pod per URL, each gone when the next one comes.
    let current = [workerAt(`${s.url}/pod-0`)];
    const { scraper, scraped } = start({ workers: () => current, intervalMs: 0 });
    for (let i = 0; i < 50; i++) {
      current = [workerAt(`${s.url}/pod-${i}`)];
      scraper.tick();
      await scraped.waitFor(current[0]!.url, 1);
    }
    scraper.tick(); // a round after the last one left: only the live worker is remembered
    const remembered = (scraper as unknown as { attempted: ReadonlySet<string> }).attempted;
    expect([...remembered].filter((url) => url !== `${s.url}/pod-49`)).toEqual([]);
  });

  it('interval 0 is off; invalid settings are rejected', () => {
    const board = new LoadBoard();
    const off = new MetricsScraper({ workers: () => [], board, intervalMs: 0, timeoutMs: 1 });
    scrapers.push(off);
    off.start();
    expect(off.scrapesInFlight).toBe(0);
    expect(() => new MetricsScraper({ workers: () => [], board, intervalMs: -1, timeoutMs: 1 })).toThrow(
      RangeError,
    );
    expect(() => new MetricsScraper({ workers: () => [], board, intervalMs: 1, timeoutMs: 0 })).toThrow(
      RangeError,
    );
    expect(
      () => new MetricsScraper({ workers: () => [], board, intervalMs: 1, timeoutMs: 1, concurrency: 0 }),
    ).toThrow(RangeError);
  });
});
