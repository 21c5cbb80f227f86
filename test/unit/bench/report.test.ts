import { describe, expect, it } from 'vitest';
import { passesNote, replaceSection, table } from '../../../bench/report-doc.js';
import { mean, pairedDiffs, percentile, stddev } from '../../../bench/stats.js';
import { renderBarChart } from '../../../bench/svg-chart.js';

describe('stats', () => {
  it.each([
    { values: [], p: 50, want: NaN },
    { values: [5], p: 99, want: 5 },
    { values: [4, 1, 3, 2], p: 50, want: 2 },
    { values: [4, 1, 3, 2], p: 100, want: 4 },
    { values: Array.from({ length: 100 }, (_, i) => i + 1), p: 99, want: 99 },
  ])('percentile($values, $p) = $want', ({ values, p, want }) => {
    expect(percentile(values, p)).toEqual(want);
  });

  it('mean and population stddev', () => {
    expect(mean([1, 2, 3, 4])).toBe(2.5);
    expect(stddev([2, 4, 4, 4, 5, 5, 7, 9])).toBe(2);
  });

  it('pairedDiffs pairs by index and skips missing values', () => {
    expect(pairedDiffs([1, 2, undefined, 4], [2, 5, 3, undefined, 9])).toEqual([1, 3]);
  });
});

describe('report-doc', () => {
  it('replaceSection replaces only its markers, or appends', () => {
    const doc = 'intro\n<!-- bench:routing:start -->\nold\n<!-- bench:routing:end -->\nhand-written\n';
    const out = replaceSection(doc, 'routing', 'new');
    expect(out).toBe('intro\n<!-- bench:routing:start -->\nnew\n<!-- bench:routing:end -->\nhand-written\n');
    expect(replaceSection(out, 'scale', 'x')).toContain('hand-written\n\n<!-- bench:scale:start -->\nx\n');
  });

  it('passesNote names the workloads whose cells measure several passes, nothing when none does', () => {
    const note = passesNote({
      'multi-turn': { users: 32, measuredPasses: 4 },
      'shared-prefix': { groups: 32 },
      'hot-burst': { burst: 200, measuredPasses: 3 },
    });
    expect(note).toContain('multi-turn 4, hot-burst 3; the others one.');
    expect(note).not.toContain('shared-prefix');
    expect(passesNote({ 'shared-prefix': { groups: 32 } })).toBe('');
    expect(passesNote(undefined)).toBe('');
  });

  it('table renders a markdown table and escapes pipes', () => {
    expect(
      table(
        ['a', 'b'],
        [
          [1, 'x|y'],
          [NaN, 'z'],
        ],
      ),
    ).toBe('| a | b |\n|---|---|\n| 1 | x\\|y |\n| n/a | z |');
  });
});

describe('svg chart', () => {
  it('renders one bar per finite value, deterministically', () => {
    const chart = {
      title: 'T <&>',
      yLabel: 'y',
      categories: ['a', 'b'],
      series: [
        { name: 's1', values: [1, 2] },
        { name: 's2', values: [3, NaN] },
      ],
    };
    const svg = renderBarChart(chart);
    expect(svg).toBe(renderBarChart(chart));
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('T &lt;&amp;&gt;');
    // 2 legend swatches + background + 3 bars
    expect(svg.match(/<rect /g)).toHaveLength(6);
    expect(svg).toContain('n/a');
  });
});
