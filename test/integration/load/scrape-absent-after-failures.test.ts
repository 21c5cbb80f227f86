/**
 * A worker that exports no /metrics (404: SGLang without --enable-metrics, a server behind a proxy)
 * is never judged by the scraper ("404 / 405: not a health failure, nothing is recorded"). But if its
 * scrapes failed while it was down (a restart: connection refused / 503, three times), the `metrics`
 * source of worker-health.ts is 'unhealthy', and the later 404s record nothing, so it never becomes
 * healthy again: the worker stays out of selection for good although /health passes. A static worker
 * (permanent registration) keeps its Worker object across process restarts, so this is reachable.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { LoadBoard } from '../../../src/load/load-board.js';
import { MetricsScraper } from '../../../src/load/metrics-scraper.js';
import { Worker } from '../../../src/workers/worker.js';

let server: Server | undefined;
let scraper: MetricsScraper | undefined;
afterEach(async () => {
  await scraper?.close();
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

describe('metrics source after a restart of a worker without /metrics', () => {
  it('comes back once the worker answers again (404) and /health passes', async () => {
    let status = 503;
    server = createServer((_req, res) => res.writeHead(status).end());
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const worker = new Worker({ role: 'regular', url, endpoint: url.slice(7), generation: 1 });
    const health = new WorkerHealth();
    const now = 0;
    scraper = new MetricsScraper({
      workers: () => [worker],
      board: new LoadBoard(1000),
      health,
      intervalMs: 100,
      timeoutMs: 5000,
      clock: () => now,
    });
    const scrape = async (): Promise<void> => {
      const before = scraper!.completedScrapes;
      scraper!.tick();
      while (scraper!.completedScrapes === before) await new Promise((r) => setImmediate(r));
    };

    // The process is restarting: three failed scrapes.
    for (let i = 0; i < 3; i++) await scrape();
    expect(worker.healthy).toBe(false);

    // It is back: /metrics is 404 (no metrics exported), /health passes.
    status = 404;
    for (let i = 0; i < 5; i++) {
      await scrape();
      health.recordCheck(worker, true, now, 'health');
    }
    expect(health.view(worker, now).active).toBe('healthy');
    expect(worker.healthy).toBe(true);
  });
});
