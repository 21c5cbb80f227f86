import { describe, expect, it } from 'vitest';
import { BOUND_LABEL, routingTargets, type RoutingCell } from '../../../bench/routing-bench.js';
import { targetVerdict } from '../../../bench/report-doc.js';
import { sharedPrefixHitCeiling, type WorkloadName } from '../../../bench/workloads.js';

function cell(workload: WorkloadName, policy: string, outputTokPerSec: number, hitRate = 0): RoutingCell {
  return {
    workload,
    policy,
    requests: 10,
    completed: 10,
    errors: 0,
    hitRate,
    ttftP50Ms: 1,
    ttftP90Ms: 1,
    ttftP99Ms: 1,
    itlP50Ms: 1,
    outputTokens: 100,
    outputTokPerSec,
    wallMs: 1,
    processedPerWorker: [5, 5],
    maxOverMeanProcessed: 1,
    inFlightCv: 0,
  };
}

const find = (name: string) => (t: { name: string }) => t.name === name;

describe('routing targets and what a run allows', () => {
  it('a throughput target above the free-prefill bound is unreachable in that run, and says its ceiling', () => {
    const targets = routingTargets([
      cell('multi-turn', 'round_robin', 1000),
      cell('multi-turn', 'cache_aware', 1070),
      cell('multi-turn', BOUND_LABEL, 1170),
    ]);
    const t = targets.find(find('cache_aware multi-turn throughput vs round_robin'))!;
    expect(t).toMatchObject({ value: 1.07, met: false, ceiling: 1.17, unreachable: true });
    expect(targetVerdict(t)).toBe('**MISSED** (ceiling in this run: 1.17x)');
  });

  it('a missed target the bound allows is a plain miss; a met one is met', () => {
    const targets = routingTargets([
      cell('shared-prefix', 'round_robin', 1000, 0.2),
      cell('shared-prefix', 'cache_aware', 1850, 0.8),
      cell('shared-prefix', BOUND_LABEL, 2100, 0.2),
      cell('long-prompt', 'round_robin', 100),
      cell('long-prompt', 'cache_aware', 190),
      cell('long-prompt', BOUND_LABEL, 1300),
    ]);
    const missed = targets.find(find('cache_aware shared-prefix throughput vs round_robin'))!;
    expect(missed).toMatchObject({ met: false, ceiling: 2.1, unreachable: false });
    expect(targetVerdict(missed)).toBe('**MISSED**');
    expect(targetVerdict(targets.find(find('cache_aware long-prompt throughput vs round_robin'))!)).toBe(
      '**met**',
    );
  });

  it("external-load gets no ceiling: round robin's bound still waits on the busy workers routing avoids", () => {
    const targets = routingTargets([
      cell('external-load', 'round_robin', 1000),
      cell('external-load', 'cache_aware', 2000),
      cell('external-load', BOUND_LABEL, 970),
    ]);
    const t = targets.find(find('cache_aware external-load throughput vs round_robin'))!;
    expect(t.ceiling).toBeUndefined();
    expect(t.met).toBe(true);
  });

  it("shared-prefix hit rate: the workload's shape over round robin's hit rate", () => {
    const params = { groups: 32, promptsPerGroup: 16, systemTokens: 2048, questionTokens: 128 };
    expect(sharedPrefixHitCeiling(params)).toBeCloseTo((15 / 16) * (2048 / 2176), 10);
    const targets = routingTargets(
      [cell('shared-prefix', 'round_robin', 1000, 0.201), cell('shared-prefix', 'cache_aware', 1870, 0.878)],
      { 'shared-prefix': params },
    );
    const t = targets.find(find('cache_aware shared-prefix hit rate vs round_robin'))!;
    expect(t).toMatchObject({ met: false, ceiling: 4.39, unreachable: true });
    // Without the workload's parameters (older results): no ceiling, a plain verdict.
    const bare = routingTargets([
      cell('shared-prefix', 'round_robin', 1000, 0.201),
      cell('shared-prefix', 'cache_aware', 1870, 0.878),
    ]).find(find('cache_aware shared-prefix hit rate vs round_robin'))!;
    expect(bare.ceiling).toBeUndefined();
    expect(targetVerdict(bare)).toBe('**MISSED**');
  });
});
