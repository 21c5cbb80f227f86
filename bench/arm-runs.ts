/**
 * The A/B plumbing of the small stand-alone benchmarks (admission, pd-local-prefill): every arm run
 * `repeats` times, interleaved (run 1 of every arm, then run 2, ...) so the host's drift spreads over
 * all arms, and an arm's figure the mean of its runs.
 */

/** Runs each arm `repeats` times, interleaved; logs every result as a JSON line as it comes. */
export async function runInterleaved<A, R>(
  arms: readonly A[],
  repeats: number,
  runOnce: (arm: A, run: number) => Promise<R>,
  log: (line: string) => void,
): Promise<R[]> {
  const runs: R[] = [];
  for (let r = 1; r <= repeats; r++) {
    for (const arm of arms) {
      const res = await runOnce(arm, r);
      log(JSON.stringify(res));
      runs.push(res);
    }
  }
  return runs;
}

/** The mean of `f` over the runs of `arm`, to 0.1. */
export function armMean<A, R extends { readonly arm: A }>(
  runs: readonly R[],
  arm: A,
  f: (run: R) => number,
): number {
  const xs = runs.filter((x) => x.arm === arm).map(f);
  return Math.round((xs.reduce((a, b) => a + b, 0) / xs.length) * 10) / 10;
}

/** The `q` quantile of ascending `sorted` (nearest rank), to 0.1; NaN when empty. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const rank = Math.ceil(q * sorted.length);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]! * 10) / 10;
}
