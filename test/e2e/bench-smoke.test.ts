/**
 * CI smoke run of the routing benchmark: a seconds-long quick run through real Envoy (startEnvoy fails
 * clearly when Envoy is missing), asserting only that results are produced and well-formed. No timing
 * assertions: absolute and relative figures on a shared CI machine are noise.
 */
import { describe, expect, it } from 'vitest';
import { runPdBench } from '../../bench/pd-bench.js';
import { renderPd } from '../../bench/report-pd.js';
import { renderRouting } from '../../bench/report-sections.js';
import { kvEventTargets } from '../../bench/report-kv-events.js';
import { REPLICA_VARIANTS, runRoutingBench } from '../../bench/routing-bench.js';

describe('routing benchmark (quick smoke run)', () => {
  it('produces a well-formed result and doc section', async () => {
    const result = await runRoutingBench({
      quick: true,
      workloads: ['shared-prefix', 'no-sharing', 'external-load'],
      policies: ['round_robin', 'cache_aware'],
      workers: 4,
    });
    expect(result.benchmark).toBe('routing');
    expect(result.info.cores).toBeGreaterThan(0);
    expect(result.cells).toHaveLength(6);
    for (const c of result.cells) {
      expect(['shared-prefix', 'no-sharing', 'external-load']).toContain(c.workload);
      expect(['round_robin', 'cache_aware']).toContain(c.policy);
      expect(c.requests).toBeGreaterThan(0);
      expect(c.completed + c.errors).toBe(c.requests);
      expect(c.hitRate).toBeGreaterThanOrEqual(0);
      expect(c.hitRate).toBeLessThanOrEqual(1);
      expect(c.outputTokens).toBeGreaterThan(0);
      expect(Number.isFinite(c.ttftP50Ms)).toBe(true);
      expect(c.processedPerWorker).toHaveLength(4);
      expect(c.processedPerWorker.reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(c.completed);
    }
    expect(result.targets.map((t) => t.name)).toEqual([
      'cache_aware shared-prefix hit rate vs round_robin',
      'cache_aware shared-prefix throughput vs round_robin',
      'cache_aware shared-prefix max/mean processed per worker',
      'cache_aware no-sharing throughput vs round_robin',
      'cache_aware no-sharing max/mean processed per worker',
      'cache_aware external-load throughput vs round_robin',
      'cache_aware external-load max/mean processed per worker',
    ]);
    // external-load: the background went straight to the first half of the workers, and the router's
    // traffic was measured apart from it (hit rate from its usage frames).
    const ext = result.cells.find((c) => c.workload === 'external-load' && c.policy === 'round_robin')!;
    const routed = ext.processedPerWorker.reduce((a, b) => a + b, 0);
    expect(routed).toBeGreaterThanOrEqual(ext.completed);
    expect(routed).toBeLessThanOrEqual(ext.requests);
    expect(result.setup.peers).toEqual({});
    expect(JSON.parse(JSON.stringify(result))).toMatchObject({ benchmark: 'routing' });
    const section = renderRouting(result);
    expect(section.markdown).toContain('## Routing quality');
    expect(section.markdown).toContain('### shared-prefix');
    expect(section.markdown).toContain('### Side by side');
    expect(section.markdown).toContain('Peers: not run');
    expect(section.assets.map((a) => a.file)).toContain('bench-routing-hit-rate.svg');
    for (const a of section.assets) expect(a.svg.startsWith('<svg')).toBe(true);
  });

  it('KV-event run: simulators publish, exact variants (and two replicas) subscribe, prefix affinity hashes; every request served', async () => {
    const result = await runRoutingBench({
      quick: true,
      kvEvents: true,
      variants: REPLICA_VARIANTS,
      policies: ['cache_aware', 'cache_aware exact x2', 'cache_aware x2 prefix'],
      workloads: ['eviction-pressure'],
      workers: 2,
      targets: kvEventTargets,
    });
    expect(result.setup.kvEvents).toEqual({ tokenizer: 'test/fixtures/tokenizer', tokenRatio: 2.2 });
    expect(result.cells.map((c) => c.policy)).toEqual([
      'cache_aware',
      'cache_aware exact x2',
      'cache_aware x2 prefix',
    ]);
    for (const c of result.cells) {
      expect(c.workload).toBe('eviction-pressure');
      expect(c.errors).toBe(0);
      expect(c.completed).toBe(c.requests);
      expect(c.hitRate).toBeGreaterThanOrEqual(0);
      expect(c.hitRate).toBeLessThanOrEqual(1);
      expect(Number.isFinite(c.ttftP90Ms)).toBe(true);
    }
    expect(result.targets).toEqual([]);
  });
});

describe('P/D benchmark (quick smoke run)', () => {
  it('runs static, bootstrap and registered fleets through Envoy and renders its section', async () => {
    // One sequential static fleet, Mooncake (bootstrap, overlapped legs), MoRI-IO WRITE (ZMQ
    // registration, concurrent legs); test/e2e/pd-connectors.test.ts checks every connector's fields.
    const connectors = ['nixl', 'mooncake', 'mori-io-write'];
    const result = await runPdBench({ quick: true, addedTtftRequests: 5, connectors });
    expect(result.benchmark).toBe('pd');
    expect(result.setup.peers).toEqual({});
    expect(result.cells.map((c) => `${c.variant} ${c.concurrency}`)).toEqual(
      connectors.flatMap((v) => [`${v} 1`, `${v} 4`]),
    );
    for (const c of result.cells) {
      expect(c.frontDoor).toBe('router');
      // The simulated decode workers fail a wrong KV handover: every request must get through.
      expect({ variant: c.variant, errors: c.errors, firstError: c.firstError }).toEqual({
        variant: c.variant,
        errors: 0,
        firstError: undefined,
      });
      expect(c.completed).toBe(c.requests);
      expect(c.outputTokens).toBe(c.completed * result.setup.outputTokens);
      expect(Number.isFinite(c.ttftP50Ms)).toBe(true);
    }
    expect(result.addedTtft?.requests).toBe(5);
    const md = renderPd(result).markdown;
    expect(md).toContain('## P/D per KV connector');
    expect(md).toContain('### Concurrency 4');
    expect(md).toContain('Peers: not run');
    expect(md).toContain('### Added TTFT of the sequential path');
  }, 240_000);
});
