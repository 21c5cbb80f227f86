/**
 * End to end through a real Envoy: a fleet of mixed hardware. One simulated worker runs everything
 * (prefill, decode steps, overhead) six times slower than the other, as an older GPU generation or a
 * smaller tensor-parallel group would. The default policy (cache_aware, cost mode) learns each
 * worker's pace from the first tokens of its streamed responses (load/timing-estimates.ts) and sends
 * the work where it finishes first:
 *
 * - one request at a time, with nothing cached anywhere, goes to the fast worker once the router has
 *   learned both (before, every worker was scored with the fleet's estimates, and two idle workers
 *   tied and alternated: half the requests waited six times longer than they had to);
 * - /workers and /metrics show the slow worker's pace above the fast one's, the fast one's at or below 1;
 * - a burst still uses both workers' capacity: the slow one is slower, not closed.
 * Ends with every load back to 0.
 */
import { describe, expect, it } from 'vitest';
import { adminJson, metricsText } from '../support/router-fixture.js';
import { learnPaces, paceOnWorkers, uniqueRequest, useMixedFleet } from '../support/mixed-fleet.js';

const fleet = useMixedFleet();

interface WorkerInfo {
  url: string;
  estimates: { pace: number; ttftSamples: number };
}

const unique = (i: number): Promise<string> => uniqueRequest(fleet.stack, i);

describe('a fleet of mixed hardware (cache_aware cost mode, per-worker pace)', () => {
  it('sends one request at a time to the faster worker once it has seen both', async () => {
    const [slow, fast] = fleet.stack.sims;
    // Learning (mixed-fleet.ts `learnPaces`): until the slow one is priced at least 1.1.
    const learned = await learnPaces(fleet.stack);
    const routed: string[] = [];
    for (let i = learned; i < learned + 12; i++) routed.push(await unique(i));
    expect(routed).toEqual(Array(12).fill(fast!.url));

    const view = (await adminJson<WorkerInfo[]>(fleet.stack.router, '/workers')).body;
    const paceOf = (url: string) => view.find((w) => w.url === url)!.estimates.pace;
    // Relative to the pool's estimate, which the fast one's samples now make: the fast one reads the
    // pool's pace or below, the slow one above it (from the one or two samples it took to be avoided).
    expect(paceOf(fast!.url)).toBeLessThanOrEqual(1);
    expect(paceOf(slow!.url)).toBeGreaterThan(paceOf(fast!.url));
    const metrics = await metricsText(fleet.stack.router);
    for (const s of [slow!, fast!]) {
      const series = new RegExp(
        `vllm_router_worker_estimate\\{[^}]*worker="${s.url}"[^}]*estimate="pace"[^}]*\\} ([0-9.e+-]+)`,
      ).exec(metrics);
      expect(Number(series?.[1])).toBeCloseTo(paceOf(s.url), 6);
    }
  });

  it('a burst still uses both workers, the faster one more', async () => {
    const [slow, fast] = fleet.stack.sims;
    // The slow worker's pace was learned only until it read 1.1: far from six times slower. Two
    // bursts give it requests to learn from; the third is the one measured.
    for (const at of [800, 900]) await Promise.all(Array.from({ length: 24 }, (_, k) => unique(at + k)));
    const before = [slow!.records.length, fast!.records.length];
    const workers = await Promise.all(Array.from({ length: 24 }, (_, k) => unique(1000 + k)));
    const toSlow = workers.filter((w) => w === slow!.url).length;
    const toFast = workers.filter((w) => w === fast!.url).length;
    expect(toSlow + toFast).toBe(24);
    expect(toFast, `fast ${toFast}, slow ${toSlow}`).toBeGreaterThan(toSlow);
    expect(slow!.records.length - before[0]!).toBe(toSlow);
    expect(fast!.records.length - before[1]!).toBe(toFast);
    // Measured on the requests the burst gave it too, the slow one is still priced above the fast one.
    const paceOf = (url: string): Promise<number> => paceOnWorkers(fleet.stack, url);
    expect(await paceOf(slow!.url)).toBeGreaterThan(Math.max(1, await paceOf(fast!.url)));
  });
});
