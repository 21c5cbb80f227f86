/**
 * cache_aware cost mode under random (finite, odd) signals never throws, always picks a
 * candidate, never a filtered one while an unfiltered one exists, and its scores are finite.
 */
import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import type { WorkerSignals } from '../../../src/routing/cost-model.js';
import type { LoadView } from '../../../src/load/load-board.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import { input, makeWorkers, route } from '../routing/fixtures.js';

function pick<T>(rnd: () => number, xs: readonly T[]): T {
  return xs[Math.floor(rnd() * xs.length)] as T;
}

describe('cost mode fuzz', () => {
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    it(`seed ${seed}`, () => {
      const rnd = seededRandom(seed);
      const all = makeWorkers(6);
      const nums = [0, 0, 1, 2, 3, 7, 50, 1e6, 1e12, 0.5];
      const views = new Map<string, LoadView>();
      const signals: WorkerSignals = {
        load: (w) => views.get(w.id) as LoadView,
        timing: () => ({
          pace: pick(rnd, [1, 1, 0.5, 4]),
          ttftFloorMs: pick(rnd, [0, 10, 1e6]),
          prefillMsPerToken: pick(rnd, [0, 0.05, 10]),
          waitMsPerRequest: pick(rnd, [0, 20, 1e5]),
          interChunkMs: pick(rnd, [0, 20]),
          ttftSamples: 0,
          chunkSamples: 0,
          wholeSamples: 0,
        }),
        backlog: () => ({ requests: pick(rnd, [0, 0, 1, 5]), tokens: pick(rnd, [0, 100, 1e7]) }),
        foreignShare: () => pick(rnd, [0, 0.5, 1]),
        adapter: () => pick(rnd, [undefined, undefined, 'active', 'free_slot', 'full'] as const),
      };
      const policy = new CacheAwarePolicy(
        {},
        { signals, capacityTokens: () => pick(rnd, [undefined, 1, 1000]) },
      );
      for (const w of all) policy.addWorker(w);
      const texts = ['', 'a'.repeat(300), 'a'.repeat(300) + 'b'.repeat(500), 'hello', 'x'.repeat(2000)];
      for (let step = 0; step < 400; step++) {
        const n = 1 + Math.floor(rnd() * all.length);
        const workers = all.slice(0, n);
        for (const w of workers) {
          const scraped = rnd() < 0.6;
          const ahead = pick(rnd, nums);
          views.set(
            w.id,
            scraped
              ? {
                  source: 'scraped',
                  ahead,
                  waiting: pick(rnd, nums),
                  waitingElsewhere: pick(rnd, nums),
                  kvUsage: pick(rnd, [0, 0.5, 0.95, 1]),
                  ageMs: 0,
                }
              : { source: 'in_flight', ahead },
          );
          w.load = pick(rnd, [0, 1, 2, 100]);
        }
        const sel = input(workers, {
          text: pick(rnd, texts),
          outputTokens: pick(rnd, [0, 10, 10_000]),
          sequences: pick(rnd, [1, 1, 4]),
        });
        const { decision, guard } = route(policy, sel, step);
        expect(workers).toContain(decision.worker);
        const cost = decision.cost!;
        expect(Number.isFinite(cost.chosen.scoreMs)).toBe(true);
        expect(Number.isFinite(cost.chosen.predictedMs)).toBe(true);
        if (rnd() < 0.7) guard.release();
      }
    });
  }
});
