import { describe, expect, it } from 'vitest';
import { kvEventTargets, renderKvEvents } from '../../../bench/report-kv-events.js';
import { renderReplicas } from '../../../bench/report-replicas.js';
import type { RoutingCell, RoutingResult } from '../../../bench/routing-bench.js';
import { routingResult } from './routing-result.js';

function cell(
  workload: string,
  policy: string,
  hitRate: number,
  ttftP90Ms = 100,
  tokPerSec = 1000,
): RoutingCell {
  return {
    workload: workload as RoutingCell['workload'],
    policy,
    requests: 10,
    completed: 10,
    errors: 0,
    hitRate,
    ttftP50Ms: ttftP90Ms / 2,
    ttftP90Ms,
    ttftP99Ms: ttftP90Ms * 2,
    itlP50Ms: 10,
    outputTokens: 100,
    outputTokPerSec: tokPerSec,
    wallMs: 1000,
    processedPerWorker: [5, 5],
    maxOverMeanProcessed: 1,
    inFlightCv: 0.1,
  };
}

function result(cells: RoutingCell[], targets = kvEventTargets(cells)): RoutingResult {
  return routingResult(cells, targets, {
    kvEvents: { tokenizer: 'test/fixtures/tokenizer', tokenRatio: 2.2 },
  });
}

describe('kvEventTargets', () => {
  it.each([
    { exact: 0.5, approx: 0.5, met: true },
    { exact: 0.51, approx: 0.5, met: true },
    { exact: 0.49, approx: 0.5, met: false },
  ])('hit rate exact $exact vs approximate $approx -> met $met', ({ exact, approx, met }) => {
    const t = kvEventTargets([
      cell('shared-prefix', 'cache_aware', approx),
      cell('shared-prefix', 'cache_aware exact', exact),
    ]);
    expect(t).toEqual([
      expect.objectContaining({
        name: 'cache_aware exact shared-prefix hit rate vs cache_aware (approximate)',
        met,
      }),
    ]);
  });

  it.each([
    { p90: 50, tput: 1150, met: [true, true, true] },
    { p90: 51, tput: 1150, met: [true, false, true] },
    { p90: 50, tput: 1149, met: [true, true, false] },
  ])('eviction-pressure: TTFT p90 $p90 vs 100 and tok/s $tput vs 1000 -> $met', ({ p90, tput, met }) => {
    const t = kvEventTargets([
      cell('eviction-pressure', 'cache_aware', 0.2, 100, 1000),
      cell('eviction-pressure', 'kv_aware', 0.3, p90, tput),
    ]);
    expect(t.map((x) => x.name)).toEqual([
      'kv_aware eviction-pressure hit rate vs cache_aware (approximate)',
      'kv_aware eviction-pressure TTFT p90 vs cache_aware',
      'kv_aware eviction-pressure throughput vs cache_aware',
    ]);
    expect(t.map((x) => x.met)).toEqual(met);
  });

  it('renders every workload with its targets', () => {
    const cells = [
      cell('eviction-pressure', 'cache_aware', 0.2),
      cell('eviction-pressure', 'cache_aware exact', 0.3, 40, 1300),
    ];
    const md = renderKvEvents(result(cells)).markdown;
    expect(md).toContain('## Exact prefix routing from KV events');
    expect(md).toContain('### eviction-pressure');
    expect(md).toContain(
      '| cache_aware exact eviction-pressure TTFT p90 vs cache_aware | 0.4 | <= 0.5x | **met** |',
    );
  });
});

describe('renderReplicas', () => {
  it.each([
    { mode: 'approximate tree', label: 'cache_aware', two: 0.86, verdict: '**met**' },
    { mode: 'approximate tree', label: 'cache_aware', two: 0.84, verdict: '**MISSED**' },
    { mode: 'exact KV events', label: 'cache_aware exact', two: 0.98, verdict: '**met**' },
    { mode: 'exact KV events', label: 'cache_aware exact', two: 0.96, verdict: '**MISSED**' },
  ])('$mode: 2 replicas at $two of one -> $verdict', ({ mode, label, two, verdict }) => {
    const cells = [cell('multi-turn', label, 1), cell('multi-turn', `${label} x2`, two)];
    const md = renderReplicas(result(cells, [])).markdown;
    expect(md).toContain(`| multi-turn: ${label} 2 replicas' hit rate vs 1 (${mode}) | ${two.toFixed(3)}x |`);
    expect(md).toContain(verdict);
  });
});

describe('renderReplicas: prefix home off, pinned-replica saturation', () => {
  it('compares a no-home cell with one replica of its mode', () => {
    const cells = [
      cell('shared-prefix', 'cache_aware', 0.8),
      cell('shared-prefix', 'cache_aware x2 no-home', 0.4),
    ];
    const md = renderReplicas(result(cells, [])).markdown;
    expect(md).toContain('| cache_aware x2 no-home | 40.0% | 0.50x |');
  });

  it('renders the saturation run with its own header and the 2-vs-1 ratios', () => {
    const arm = (label: string, replicas: number, reqPerSec: number, cpuUs: number) => ({
      label,
      replicas,
      cores: replicas === 1 ? ['0'] : ['0', '1'],
      requests: 100,
      completed: 100,
      errors: 0,
      wallMs: 1000,
      reqPerSec,
      latencyP50Ms: 5,
      latencyP99Ms: 9,
      routerCpuMs: cpuUs / 10,
      routerCpuPerRequestUs: cpuUs,
      replicaCpuMs: replicas === 1 ? [cpuUs / 10] : [cpuUs / 20, cpuUs / 20],
      envoyCpuPerRequestUs: 100,
      workersCpuPerRequestUs: 50,
      clientCpuPerRequestUs: 80,
      hostBusy: 0.97,
    });
    const sat = {
      benchmark: 'replica-saturation' as const,
      info: { ...result([], []).info, command: 'npm run bench -- replicas --saturation' },
      setup: {
        concurrency: 64,
        requestsPerRound: 100,
        warmupPerReplica: 10,
        rounds: 1,
        workers: 2,
        simulator: 'sim',
        request: 'small',
        envoy: 'envoy',
        router: 'router',
      },
      arms: [arm('1 replica (core 0)', 1, 1000, 400), arm('2 replicas (cores 0 and 1)', 2, 1300, 440)],
      throughputRatio: 1.3,
      routerCpuPerRequestRatio: 1.1,
    };
    const md = renderReplicas(undefined, sat).markdown;
    expect(md).toContain('### Router throughput per host, replicas pinned to cores');
    expect(md).toContain('npm run bench -- replicas --saturation');
    expect(md).toContain('**1.30x requests/s**');
    expect(md).toContain('router CPU per request 1.10x');
    expect(md).toContain('| 2 replicas (cores 0 and 1) | 1300 | 1.30x | 440 | 1.10x | 22 + 22 |');
    expect(md).not.toContain('### Targets'); // no routing cells in this result
  });
});
