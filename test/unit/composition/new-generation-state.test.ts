/**
 * a new registration generation at a URL must not inherit the old process's served models
 * (catalog) or scraped load (board) — wiring.ts forgets them only through the pool's `replaced` hook,
 * which fires only when the SAME pool key is seen with a new generation in one reconcile.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import { parseModelList } from '../../../src/workers/served-models.js';
import { testConfig } from '../../support/router-fixture.js';

const OLD_LIST = JSON.stringify({ object: 'list', data: [{ id: 'old-model', max_model_len: 4096 }] });
const sample = {
  takenAtMs: 0,
  localAtSample: 0,
  queuedAtSample: 0,
  figures: { waiting: 40, running: 8, kvUsage: 0.9, blockSize: 16, numGpuBlocks: 1000, malformedLines: 0 },
};

describe('new generation at a URL', () => {
  it('expiry seen by a reconciling read before the sweep, then the new process registers', () => {
    let now = 0;
    const c = wireRouter(testConfig({ discoveryTtlMs: 1000 }), {
      logger: pino({ level: 'silent' }),
      clock: () => now,
    });
    const url = 'http://127.0.0.1:9831';
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:9831' });
    const old = c.pools.byRole.regular.workers[0]!;
    c.catalog.recordListed(url, parseModelList(OLD_LIST));
    c.board.record(old.key, sample);

    now = 1500; // expired; the janitor has not swept yet
    c.pools.workers(); // a health-check / scrape / poll round reconciles: the old Worker departs
    expect(c.pools.byRole.regular.workers).toEqual([]);

    const r = c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:9831' }); // the new process
    expect('event' in r && r.event).toBe('replaced');
    const fresh = c.pools.byRole.regular.workers[0]!;
    expect(fresh.generation).not.toBe(old.generation);
    // The new process's models and load are its own, not the old one's.
    expect(c.catalog.of(url)).toBeUndefined();
    expect(c.board.latest(fresh.key)).toBeUndefined();
  });

  it('a new generation that also changes data_parallel_size', () => {
    const now = 0;
    const c = wireRouter(testConfig(), { logger: pino({ level: 'silent' }), clock: () => now });
    const url = 'http://127.0.0.1:9832';
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:9832' });
    c.catalog.recordListed(url, parseModelList(OLD_LIST));
    // A new process at the URL (its endpoint changed: a new lifetime), started with 2 DP ranks.
    const r = c.registry.register({
      role: 'regular',
      url,
      endpoint: '127.0.0.2:9832',
      metadata: { data_parallel_size: 2 },
    });
    expect('event' in r && r.event).toBe('replaced');
    expect(c.pools.byRole.regular.workers.map((w) => w.key)).toEqual([`${url}@0`, `${url}@1`]);
    expect(c.catalog.of(url)).toBeUndefined();
  });
});
