/**
 * What a router replica costs with no traffic at all. Prints one JSON object to stdout.
 *
 *   npx tsx bench/idle-cost.bench.ts                  8 workers, 10 s window, the default interval
 *   --workers 32 --seconds 5 --scrape-interval-ms 250
 *
 * Starts the simulated workers (this process), the router (its own process, compiled: as production
 * runs it) with every worker configured and the default `cache_aware` policy, and Envoy in front of
 * it (so the router also answers Envoy's gRPC health checks), waits 3 s, then reads the router's
 * utime + stime from /proc over the window: CPU milliseconds per second while idle. Almost all of it
 * is the `/metrics` scrapes (every worker every `--scrape-interval-ms`): divide by
 * workers x (1000 / interval) for the CPU of one scrape. docs/deploy-envoy.md sizes replicas by it.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare runs made one after the other.
 */
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { numericFlag } from './numeric-flag.js';

const workers = numericFlag('workers', 8);
const seconds = numericFlag('seconds', 10);
const intervalMs = numericFlag('scrape-interval-ms', 100);

const stack = await startRoutedStack({
  workers,
  sim: {},
  router: { policy: 'cache_aware', scrapeIntervalMs: intervalMs },
  routerScript: buildRouter().script,
});
try {
  await new Promise((r) => setTimeout(r, 3000));
  const router = stack.router;
  if (router.cpuMs === undefined) throw new Error('the router must run as its own process');
  const before = router.cpuMs();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const cpuMsPerSec = (router.cpuMs() - before) / seconds;
  const scrapesPerSec = intervalMs > 0 ? workers * (1000 / intervalMs) : 0;
  process.stdout.write(
    `${JSON.stringify(
      {
        benchmark: 'idle-cost',
        workers,
        scrapeIntervalMs: intervalMs,
        seconds,
        routerCpuMsPerSec: cpuMsPerSec,
        ...(scrapesPerSec > 0 ? { cpuMsPerScrape: cpuMsPerSec / scrapesPerSec } : {}),
      },
      null,
      2,
    )}\n`,
  );
} finally {
  await stack.close();
}
