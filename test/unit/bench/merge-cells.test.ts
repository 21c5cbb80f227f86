import { describe, expect, it } from 'vitest';
import { mergeRuns } from '../../../bench/merge-cells.js';
import { renderReplicas } from '../../../bench/report-replicas.js';
import type { RoutingCell } from '../../../bench/routing-bench.js';
import { routingResult } from './routing-result.js';

function run(
  policy: string,
  hitRate: number,
  tokPerSec: number,
  extra: Partial<RoutingCell> = {},
): RoutingCell {
  return {
    workload: 'eviction-pressure',
    policy,
    requests: 384,
    completed: 384,
    errors: 0,
    hitRate,
    ttftP50Ms: 500,
    ttftP90Ms: 1000,
    ttftP99Ms: 1500,
    itlP50Ms: 10,
    outputTokens: 1000,
    outputTokPerSec: tokPerSec,
    wallMs: 5000,
    processedPerWorker: [200, 184],
    maxOverMeanProcessed: 1.04,
    inFlightCv: 0.4,
    ...extra,
  };
}

describe('mergeRuns (--repeats)', () => {
  it('means of rates, sums of counts, and every run kept', () => {
    const m = mergeRuns([
      run('kv_aware', 0.4, 1000, {
        branches: { exact_hit: 300, exact_home: 84 },
        errors: 1,
        firstError: 'boom',
      }),
      run('kv_aware', 0.5, 1200, { branches: { exact_hit: 310, exact_miss: 74 }, ttftP90Ms: 2000 }),
    ]);
    expect(m.hitRate).toBeCloseTo(0.45);
    expect(m.outputTokPerSec).toBeCloseTo(1100);
    expect(m.ttftP90Ms).toBeCloseTo(1500);
    expect(m).toMatchObject({
      requests: 768,
      completed: 768,
      errors: 1,
      firstError: 'boom',
      outputTokens: 2000,
      wallMs: 10_000,
      processedPerWorker: [400, 368],
      branches: { exact_hit: 610, exact_home: 84, exact_miss: 74 },
      runs: { hitRate: [0.4, 0.5], outputTokPerSec: [1000, 1200] },
    });
  });

  it('one run is the cell itself; no runs or different cells are errors', () => {
    const one = run('kv_aware', 0.4, 1000);
    expect(mergeRuns([one])).toBe(one);
    expect(() => mergeRuns([])).toThrow(RangeError);
    expect(() => mergeRuns([one, run('kv_aware x2', 0.4, 1000)])).toThrow(/is not/);
  });

  it("router CPU per request is the runs' mean, and absent when a run did not measure it", () => {
    const a = run('cache_aware', 0.5, 1000, { routerCpuUsPerRequest: 3000 });
    const b = run('cache_aware', 0.5, 1000, { routerCpuUsPerRequest: 4001 });
    expect(mergeRuns([a, b]).routerCpuUsPerRequest).toBe(3501);
    expect(mergeRuns([a, run('cache_aware', 0.5, 1000)])).not.toHaveProperty('routerCpuUsPerRequest');
  });

  it('the reports show router CPU per request and say how each cell was warmed', () => {
    const cells = [
      run('kv_aware', 0.5, 1000, { routerCpuUsPerRequest: 4200 }),
      run('kv_aware x2', 0.5, 1000),
    ];
    const warm = renderReplicas(routingResult(cells, [], { warmUp: { requests: 128, seedOffset: 1000 } }));
    expect(warm.markdown).toContain('| router CPU µs/request |');
    expect(warm.markdown).toMatch(/\| kv_aware \|.*\| 4200 \| 0 \|/);
    expect(warm.markdown).toMatch(/\| kv_aware x2 \|.*\| n\/a \| 0 \|/);
    expect(warm.markdown).toContain(
      'warm-up pass (the same workload under other seeds, at most 128 requests',
    );
    const cold = renderReplicas(routingResult(cells, [], { warmUp: false }));
    expect(cold.markdown).toContain('measured on fresh processes (`--no-warm-up`');
  });

  it("the replicas report shows a repeated cell's mean, its runs' range, and says how it was made", () => {
    const cells = [
      mergeRuns([run('kv_aware', 0.5, 1000), run('kv_aware', 0.6, 1000)]),
      mergeRuns([run('kv_aware x2', 0.52, 1000), run('kv_aware x2', 0.56, 1000)]),
    ];
    const r = routingResult(cells, [], { repeats: 2 });
    const md = renderReplicas(r).markdown;
    expect(md).toContain('| kv_aware x2 | 54.0% (52.0-56.0) | 0.98x |');
    expect(md).toContain('Each router cell is the mean of 2 runs');
    expect(md).toContain(
      "| eviction-pressure: kv_aware 2 replicas' hit rate vs 1 (exact KV events) | 0.982x |",
    );
  });
});
