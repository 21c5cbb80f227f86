/**
 * TimingEstimates under random (finite, wide-range) observations stays finite and in bounds,
 * and still learns a plain truth afterwards (not stuck).
 */
import { describe, expect, it } from 'vitest';
import {
  MIN_PREFILL_FRACTION,
  TimingEstimates,
  type WorkerEstimates,
} from '../../../src/load/timing-estimates.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import { makeWorkers } from '../routing/fixtures.js';

function sane(e: WorkerEstimates, bound = true): void {
  for (const k of ['pace', 'ttftFloorMs', 'prefillMsPerToken', 'waitMsPerRequest', 'interChunkMs'] as const) {
    expect(Number.isFinite(e[k]), `${k}=${e[k]}`).toBe(true);
    expect(e[k]).toBeGreaterThanOrEqual(0);
  }
  if (bound) expect(e.prefillMsPerToken).toBeGreaterThanOrEqual(MIN_PREFILL_FRACTION * 0.05 - 1e-12);
}

describe('timing estimates fuzz', () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`seed ${seed}`, () => {
      const rnd = seededRandom(seed);
      const t = new TimingEstimates();
      const ws = makeWorkers(3);
      const pick = (xs: number[]): number => xs[Math.floor(rnd() * xs.length)] as number;
      let now = 1_000_000;
      for (let i = 0; i < 3000; i++) {
        now += pick([0, 1, 100, 60_000]);
        const w = ws[Math.floor(rnd() * ws.length)]!;
        const f = { prefillTokens: pick([0, 1, 100, 5000, 200_000]), ahead: pick([0, 1, 10, 500]) };
        const y = pick([0, 1, 15, 300, 5000, 1e6]);
        const r = rnd();
        if (r < 0.5) t.recordTtft(w, y, f, now);
        else if (r < 0.8) t.recordWhole(w, y, f, pick([0, 10, 1000, 32_000]), now);
        else t.recordInterChunk(w, pick([0, 5, 20, 1e4]));
        for (const x of ws) {
          sane(t.of(x));
          sane(t.scoringOf(x, now), false);
        }
        sane(t.fleetOf('regular'));
      }
      // Then a plain truth: floor 20 ms, 0.1 ms per token, nothing else; the fleet must follow.
      for (let i = 0; i < 2000; i++) {
        now += 10;
        const w = ws[i % ws.length]!;
        const u = (i * 37) % 4000;
        t.recordTtft(w, 20 + 0.1 * u, { prefillTokens: u, ahead: 0 }, now);
      }
      const f = t.fleetOf('regular');
      expect(f.prefillMsPerToken).toBeGreaterThan(0.08);
      expect(f.prefillMsPerToken).toBeLessThan(0.12);
      expect(f.ttftFloorMs).toBeGreaterThan(10);
      expect(f.ttftFloorMs).toBeLessThan(30);
    });
  }
});
