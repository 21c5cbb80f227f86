/**
 * A worker put to sleep through the router (fleet-control.ts forwards `POST /sleep` and records
 * `recordSleep(w, true)`; admin sleep does the same) is taken out of selection. The next metrics
 * scrape of a page that carries no sleep gauge (a vLLM release with sleep mode but without
 * `vllm:engine_sleep_state`, or `--metric-sleep-state ''`) calls `recordSleep(w, false)` because
 * `page.asleep === true` is false for "unknown": within one scrape interval (100 ms) the sleeping
 * engine is selectable again, and a request routed to it crashes it (vllm#15483, worker-sleep.ts).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { LoadBoard } from '../../../src/load/load-board.js';
import { DEFAULT_METRIC_NAMES } from '../../../src/load/metrics-parse.js';
import { MetricsScraper } from '../../../src/load/metrics-scraper.js';
import { Worker } from '../../../src/workers/worker.js';

const PAGE =
  `# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n` +
  `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine="0",model_name="m"} 0.0\n`;

let server: Server | undefined;
let scraper: MetricsScraper | undefined;
afterEach(async () => {
  await scraper?.close();
  server?.closeAllConnections();
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

describe('a scrape of a page that says nothing of sleep mode', () => {
  it.each([
    ['default names (page without the gauge)', DEFAULT_METRIC_NAMES],
    ["--metric-sleep-state ''", { ...DEFAULT_METRIC_NAMES, sleepState: '' }],
  ])('keeps a worker put to sleep through the router asleep: %s', async (_name, names) => {
    server = createServer((_req, res) => res.end(PAGE));
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const worker = new Worker({ role: 'regular', url, endpoint: url.slice(7), generation: 1 });
    const health = new WorkerHealth();
    scraper = new MetricsScraper({
      workers: () => [worker],
      board: new LoadBoard(1000),
      health,
      intervalMs: 100,
      timeoutMs: 5000,
      names,
      clock: () => 0,
    });
    // fleet-control.ts: a forwarded POST /sleep answered 2xx.
    health.recordSleep(worker, true, 0);
    expect(worker.healthy).toBe(false);

    scraper.tick();
    while (scraper.completedScrapes === 0) await new Promise((r) => setImmediate(r));

    expect(worker.asleep).toBe(true);
    expect(worker.healthy).toBe(false);
  });
});
