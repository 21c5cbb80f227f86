/**
 * A tiny grouped bar chart renderer (SVG text, no dependencies) for docs/benchmarks.md.
 *
 * Layout: one cluster of bars per category (e.g. a workload), one bar per series (e.g. a policy) in a
 * fixed palette, the value printed above each bar, a legend on top, a linear y axis from 0 to the
 * largest value (rounded up to a "nice" 1/2/5 x 10^k step) with 5 grid lines. Non-finite values draw no
 * bar and print "n/a". Deterministic output for the same input (charts diff cleanly in git).
 */

export interface BarChart {
  title: string;
  yLabel: string;
  categories: readonly string[];
  series: ReadonlyArray<{ name: string; values: ReadonlyArray<number> }>;
  /** Formats a value label. Default: up to 3 significant digits. */
  format?: (v: number) => string;
  /** Optional horizontal reference line (e.g. a target). */
  reference?: { value: number; label: string };
}

const PALETTE = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7'];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const exp = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * exp >= v) return m * exp;
  return 10 * exp;
}

export function defaultFormat(v: number): string {
  if (!Number.isFinite(v)) return 'n/a';
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toPrecision(2);
}

export function renderBarChart(c: BarChart): string {
  const fmt = c.format ?? defaultFormat;
  const nSeries = Math.max(1, c.series.length);
  const barW = 14;
  const gap = 4;
  const clusterW = nSeries * (barW + gap) + 24;
  const left = 64;
  const top = 70 + Math.ceil(c.series.length / 4) * 18;
  const plotH = 220;
  const width = Math.max(480, left + c.categories.length * clusterW + 20);
  const height = top + plotH + 50;
  let max = 0;
  for (const s of c.series) for (const v of s.values) if (Number.isFinite(v) && v > max) max = v;
  if (c.reference && c.reference.value > max) max = c.reference.value;
  const yMax = niceMax(max);
  const y = (v: number): number => top + plotH - (v / yMax) * plotH;
  const out: string[] = [];
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="11">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="${width / 2}" y="16" text-anchor="middle" font-size="13" font-weight="bold">${esc(c.title)}</text>`,
  );
  c.series.forEach((s, i) => {
    const lx = left + (i % 4) * 150;
    const ly = 30 + Math.floor(i / 4) * 18;
    out.push(
      `<rect x="${lx}" y="${ly - 9}" width="10" height="10" fill="${PALETTE[i % PALETTE.length]}"/>`,
      `<text x="${lx + 14}" y="${ly}">${esc(s.name)}</text>`,
    );
  });
  for (let k = 0; k <= 5; k++) {
    const v = (yMax * k) / 5;
    const yy = y(v).toFixed(1);
    out.push(
      `<line x1="${left}" x2="${width - 10}" y1="${yy}" y2="${yy}" stroke="#ddd"/>`,
      `<text x="${left - 4}" y="${yy}" text-anchor="end" dominant-baseline="middle">${esc(fmt(v))}</text>`,
    );
  }
  out.push(
    `<text transform="translate(14 ${top + plotH / 2}) rotate(-90)" text-anchor="middle">${esc(c.yLabel)}</text>`,
  );
  c.categories.forEach((cat, ci) => {
    const x0 = left + 12 + ci * clusterW;
    c.series.forEach((s, si) => {
      const v = s.values[ci] ?? NaN;
      const x = x0 + si * (barW + gap);
      if (Number.isFinite(v) && v > 0) {
        out.push(
          `<rect x="${x}" y="${y(v).toFixed(1)}" width="${barW}" height="${(top + plotH - y(v)).toFixed(1)}" fill="${PALETTE[si % PALETTE.length]}"/>`,
        );
      }
      const ly = (Number.isFinite(v) ? y(Math.max(0, v)) : top + plotH) - 3;
      out.push(
        `<text x="${x + barW / 2}" y="${ly.toFixed(1)}" text-anchor="start" font-size="9" transform="rotate(-90 ${x + barW / 2} ${ly.toFixed(1)})" dx="2" dy="3">${esc(fmt(v))}</text>`,
      );
    });
    out.push(
      `<text x="${x0 + (nSeries * (barW + gap)) / 2}" y="${top + plotH + 16}" text-anchor="middle">${esc(cat)}</text>`,
    );
  });
  if (c.reference) {
    const yy = y(c.reference.value).toFixed(1);
    out.push(
      `<line x1="${left}" x2="${width - 10}" y1="${yy}" y2="${yy}" stroke="#c00" stroke-dasharray="4 3"/>`,
      `<text x="${width - 12}" y="${Number(yy) - 3}" text-anchor="end" fill="#c00">${esc(c.reference.label)}</text>`,
    );
  }
  out.push(
    `<line x1="${left}" x2="${width - 10}" y1="${top + plotH}" y2="${top + plotH}" stroke="#333"/>`,
    '</svg>',
  );
  return out.join('\n') + '\n';
}
