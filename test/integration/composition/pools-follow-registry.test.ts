/**
 * Pools follow the registry (ServiceRegistry.onChange -> reconcile), so a metrics scrape reads
 * current members and never reconciles as a side effect.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Router } from '../../../src/router.js';
import { metricsText, startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';

const routers: Router[] = [];
afterEach(async () => {
  for (const r of routers.splice(0)) await r.close();
});

function poolWorkers(text: string, role: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`vllm_router_pool_workers{role="${role}"}`));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

describe('pools follow the registry', () => {
  it('a registration reaches the pool and the scrape without a request or a reconciling read', async () => {
    const r = await startTestRouter();
    routers.push(r);
    r.registry.register({ role: 'regular', url: 'http://127.0.0.1:9701', endpoint: '127.0.0.1:9701' });
    expect(r.pools.regular.workers.map((w) => w.url)).toEqual(['http://127.0.0.1:9701']);
    expect(poolWorkers(await metricsText(r), 'regular')).toBe(1);
    r.registry.deregister('regular', 'http://127.0.0.1:9701');
    expect(r.pools.regular.workers).toEqual([]);
    expect(poolWorkers(await metricsText(r), 'regular')).toBe(0);
  });

  it('a scrape after an expiry does not reconcile; the janitor sweep does (fake clock)', async () => {
    let now = 0;
    const r = await startTestRouter({ discoveryTtlMs: 1000 }, { clock: () => now });
    routers.push(r);
    r.registry.register({ role: 'regular', url: 'http://127.0.0.1:9702', endpoint: '127.0.0.1:9702' });
    const member = r.pools.regular.workers[0];
    expect(member).toBeDefined();
    now += 1000; // expired in the registry; no sweep yet
    await metricsText(r);
    expect(r.pools.regular.workers).toEqual([member]);
    // The janitor (every second) removes the expired entry; the registry change reconciles the pool.
    await waitFor(() => r.pools.regular.workers.length === 0, {
      message: 'janitor sweep reconciles the pool',
    });
    const text = await metricsText(r);
    expect(poolWorkers(text, 'regular')).toBe(0);
    expect(text).toMatch(/vllm_router_pool_changes_total\{role="regular",change="departed"\} 1/);
  });
});
