/**
 * Small pure helpers of the chaos soak: a seeded PRNG (so a run can be replayed with --seed) and a
 * least-squares slope (memory growth in bytes per second).
 */
import { seededRandom } from '../../src/util/seeded-random.js';

export { seededRandom };

/** Integer in [lo, hi] (inclusive). */
export function randomInt(rand: () => number, lo: number, hi: number): number {
  return lo + Math.floor(rand() * (hi - lo + 1));
}

/**
 * Ordinary least-squares slope of y over x: sum((x - mx)(y - my)) / sum((x - mx)^2).
 * Fewer than 2 points, or all x equal, gives 0.
 */
export function linearSlope(points: ReadonlyArray<readonly [number, number]>): number {
  const n = points.length;
  if (n < 2) return 0;
  let mx = 0;
  let my = 0;
  for (const [x, y] of points) {
    mx += x;
    my += y;
  }
  mx /= n;
  my /= n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) * (x - mx);
  }
  return den === 0 ? 0 : num / den;
}
