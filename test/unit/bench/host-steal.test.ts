import { describe, expect, it } from 'vitest';
import { cpuTicks, hostBusyMs, parseCpuTicks, stealFraction } from '../../../bench/host-steal.js';
import { mergeRuns } from '../../../bench/merge-cells.js';
import { stealNote } from '../../../bench/report-doc.js';
import type { RoutingCell } from '../../../bench/routing-bench.js';

// The first lines of a real /proc/stat (2 CPUs): user nice system idle iowait irq softirq steal guest guest_nice.
const STAT = [
  'cpu  2000 10 500 90000 40 0 50 400 0 0',
  'cpu0 1000 5 250 45000 20 0 25 200 0 0',
  'cpu1 1000 5 250 45000 20 0 25 200 0 0',
  'intr 123',
].join('\n');

describe('host steal time', () => {
  it('reads the aggregate cpu line: steal, idle + iowait and the sum of the first eight fields', () => {
    expect(parseCpuTicks(STAT)).toEqual({
      steal: 400,
      total: 2000 + 10 + 500 + 90000 + 40 + 0 + 50 + 400,
      idle: 90000 + 40,
    });
  });

  it("the host's busy CPU between two readings: neither idle, iowait nor stolen time, in ms", () => {
    const before = { steal: 100, total: 1000, idle: 500 };
    // 300 more ticks: 100 idle, 50 stolen, 150 busy (10 ms each).
    expect(hostBusyMs(before, { steal: 150, total: 1300, idle: 600 })).toBe(1500);
    expect(hostBusyMs(undefined, before)).toBeUndefined();
  });

  it('rejects a text without a well-formed cpu line', () => {
    expect(parseCpuTicks('cpu0 1 2 3\nintr 5')).toBeUndefined();
    expect(parseCpuTicks('cpu  1 2 3')).toBeUndefined();
    expect(parseCpuTicks('cpu  a b c d e f g h')).toBeUndefined();
  });

  it('the stolen share between two readings, undefined without both or without elapsed time', () => {
    expect(stealFraction({ steal: 100, total: 1000, idle: 0 }, { steal: 150, total: 1200, idle: 0 })).toBe(
      0.25,
    );
    expect(stealFraction(undefined, { steal: 1, total: 2, idle: 0 })).toBeUndefined();
    expect(stealFraction({ steal: 1, total: 2, idle: 0 }, { steal: 1, total: 2, idle: 0 })).toBeUndefined();
  });

  it('reads this host (Linux): steal never above the total', () => {
    const t = cpuTicks();
    expect(t).toBeDefined();
    expect(t!.steal).toBeGreaterThanOrEqual(0);
    expect(t!.steal).toBeLessThanOrEqual(t!.total);
  });

  it('the report names the cells above 5% steal, or says there were none', () => {
    const cells = [
      { workload: 'multi-turn', policy: 'round_robin', stealFraction: 0.01 },
      { workload: 'no-sharing', policy: 'cache_aware', stealFraction: 0.12 },
      { workload: 'no-sharing', policy: 'smg cache_aware' },
    ];
    const note = stealNote(cells);
    expect(note).toContain('6.5% on average');
    expect(note).toContain('no-sharing cache_aware 12.0%');
    expect(note).not.toContain('multi-turn');
    expect(stealNote([cells[0]!])).toContain('no cell above 5.0%');
    expect(stealNote([cells[2]!])).toBe('');
  });

  it('repeated runs keep the mean steal, and none when a run has none', () => {
    const cell = (steal: number | undefined): RoutingCell => ({
      workload: 'multi-turn',
      policy: 'cache_aware',
      requests: 10,
      completed: 10,
      errors: 0,
      hitRate: 0.5,
      ttftP50Ms: 1,
      ttftP90Ms: 2,
      ttftP99Ms: 3,
      itlP50Ms: 1,
      outputTokens: 100,
      outputTokPerSec: 50,
      wallMs: 2000,
      processedPerWorker: [5, 5],
      maxOverMeanProcessed: 1,
      inFlightCv: 0,
      ...(steal !== undefined ? { stealFraction: steal } : {}),
    });
    expect(mergeRuns([cell(0.1), cell(0.3)]).stealFraction).toBeCloseTo(0.2);
    expect(mergeRuns([cell(0.1), cell(undefined)]).stealFraction).toBeUndefined();
  });
});
