/**
 * A worker replaced by a new process at its URL (a new registration generation) is read through its
 * own load, not the old process's last scraped page: until its first scrape it falls back to
 * in-flight counts, and the old page's KV capacity and queue are gone.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import { testConfig } from '../../support/router-fixture.js';

describe('a worker replaced at its URL', () => {
  it("does not inherit the old process's scraped load", () => {
    const c = wireRouter(testConfig(), { logger: pino({ level: 'silent' }), clock: () => 0 });
    const url = 'http://127.0.0.1:9821';
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:9821' });
    const old = c.pools.byRole.regular.workers[0]!;
    c.board.record(old.key, {
      takenAtMs: 0,
      localAtSample: 0,
      queuedAtSample: 0,
      figures: {
        waiting: 40,
        running: 8,
        kvUsage: 0.9,
        blockSize: 16,
        numGpuBlocks: 1000,
        malformedLines: 0,
      },
    });
    expect(c.board.latest(old.key)?.figures.waiting).toBe(40);
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.2:9821' }); // a new process
    const now = c.pools.byRole.regular.workers[0]!;
    expect(now.generation).not.toBe(old.generation);
    expect(c.board.latest(now.key)).toBeUndefined();
    expect(c.board.view(now.key, 0, 0).source).toBe('in_flight');
  });
});
