/**
 * Starts the router in-process on free ports for tests, with quiet logs and no background checks
 * (no active health checks, no metric scrapes, no /v1/models or /is_paused reads: a test that needs them
 * turns them on).
 */
import { expect } from 'vitest';
import { pino } from 'pino';
import { loopbackConfig, type Config } from '../../src/config.js';
import { startRouter, type Router, type RouterDeps } from '../../src/router.js';
import { waitFor } from './wait-for.js';

export function testConfig(overrides: Partial<Config> = {}): Config {
  return loopbackConfig({
    logLevel: 'silent',
    healthCheckIntervalMs: 0,
    scrapeIntervalMs: 0,
    modelsIntervalMs: 0,
    pausePollMs: 0,
    ...overrides,
  });
}

export async function startTestRouter(
  overrides: Partial<Config> = {},
  deps: Omit<RouterDeps, 'logger'> = {},
): Promise<Router> {
  const level = process.env.ROUTER_TEST_LOG ?? 'silent';
  return startRouter(Object.freeze(testConfig(overrides)), { logger: pino({ level }), ...deps });
}

/** Every worker's load returns to 0 (loads drop when Envoy's ext_proc stream ends, asynchronously). */
export async function expectAllLoadsZero(router: Router): Promise<void> {
  await waitFor(() => router.workers().every((w) => w.load === 0), { timeoutMs: 10_000 }).catch(
    () => undefined,
  );
  expect(router.workers().map((w) => ({ url: w.url, role: w.role, load: w.load }))).toEqual(
    router.workers().map((w) => ({ url: w.url, role: w.role, load: 0 })),
  );
}

export async function adminJson<T = unknown>(
  router: Router,
  path: string,
  init?: RequestInit,
): Promise<{ status: number; body: T }> {
  const res = await fetch(`http://127.0.0.1:${router.adminPort}${path}`, init);
  return { status: res.status, body: (await res.json()) as T };
}

export async function metricsText(router: Router): Promise<string> {
  return (await fetch(`http://127.0.0.1:${router.adminPort}/metrics`)).text();
}

/** The router's `vllm_router_tree_size` of the worker at `url` (characters of its prefix picture), from a /metrics text. */
export function treeSize(metrics: string, url: string): number {
  return Number(
    new RegExp(`^vllm_router_tree_size\\{[^}]*worker="${url}"[^}]*\\} (\\S+)$`, 'm').exec(metrics)?.[1],
  );
}

/** Waits until every worker has been scraped once: the router knows what each serves (its model). */
export async function waitAllScraped(router: Router): Promise<void> {
  await waitFor(
    async () =>
      (await adminJson<{ loadSample: { modelName?: string } | null }[]>(router, '/workers')).body.every(
        (w) => w.loadSample?.modelName !== undefined,
      ),
    { timeoutMs: 10_000, message: 'every worker scraped' },
  );
}
