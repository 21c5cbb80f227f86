/**
 * Small descriptive statistics for benchmark results (pure functions).
 *
 * Percentiles use the nearest-rank method on a sorted copy (p in [0, 100]); an empty sample gives NaN,
 * which the report renders as "n/a". Added latency between two runs is computed per request (paired by
 * request index) and THEN summarised: percentiles of differences, never differences of percentiles.
 */

export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!;
}

export function mean(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  let s = 0;
  for (const v of values) s += v;
  return s / values.length;
}

/** Population standard deviation. */
export function stddev(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const m = mean(values);
  let s = 0;
  for (const v of values) s += (v - m) ** 2;
  return Math.sqrt(s / values.length);
}

/** Per-index differences `b[i] - a[i]` over the indices where both are finite numbers. */
export function pairedDiffs(
  a: ReadonlyArray<number | undefined>,
  b: ReadonlyArray<number | undefined>,
): number[] {
  const out: number[] = [];
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a[i];
    const y = b[i];
    if (x !== undefined && y !== undefined && Number.isFinite(x) && Number.isFinite(y)) out.push(y - x);
  }
  return out;
}

/** Rounds for JSON/markdown output: 3 significant decimals below 10, else 1 decimal. */
export function round(v: number): number {
  if (!Number.isFinite(v)) return v;
  return Math.abs(v) < 10 ? Math.round(v * 1000) / 1000 : Math.round(v * 10) / 10;
}
