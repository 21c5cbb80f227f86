/**
 * SGLang exports no `vllm:cache_config_info`; its KV pool's size is `sglang:max_total_num_tokens`
 * (sglang/srt/metrics/collector.py, "Maximum total number of tokens in the KV cache pool"). The
 * cache-aware picture of an SGLang worker must be bounded by it, as a vLLM worker's is by its cache
 * config: otherwise the router keeps believing the worker holds prompts its radix cache evicted.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import { parseLoadFigures } from '../../../src/load/metrics-parse.js';
import { sglangMetricsText } from '../../../src/sim/metrics-text.js';
import { testConfig } from '../../support/router-fixture.js';
import { input, route } from '../routing/fixtures.js';

describe("an SGLang worker's KV capacity", () => {
  it('bounds its cache-aware picture by the KV pool its /metrics reports (sglang:max_total_num_tokens)', () => {
    const config = testConfig({ policy: 'cache_aware', charsPerTokenLearn: false });
    const c = wireRouter(config, { logger: pino({ level: 'silent' }), clock: () => 0 });
    const url = 'http://127.0.0.1:9841';
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:9841' });
    const w = c.pools.byRole.regular.workers[0]!;
    // A 1,000-token pool (SGLang's page_size 1: 1,000 one-token pages).
    const page = sglangMetricsText({
      model: 'm',
      running: 0,
      waiting: 0,
      kvCacheUsage: 0,
      prefixCacheQueries: 0,
      prefixCacheHits: 0,
      promptTokens: 0,
      generationTokens: 0,
      cacheConfig: { blockSize: 1, numGpuBlocks: 1000 },
    });
    c.board.record(w.key, { takenAtMs: 0, localAtSample: 0, figures: parseLoadFigures(page) });
    const capacityChars = 1000 * config.charsPerToken;
    const policy = c.pools.byRole.regular.policy;
    for (const ch of ['a', 'b', 'c']) {
      const { guard } = route(policy, input([w], { text: ch.repeat(capacityChars * 0.6) }));
      guard.release();
    }
    const held = c.pools.treeSizes().find(([x]) => x === w)?.[1] ?? 0;
    expect(held).toBeGreaterThan(0);
    expect(held).toBeLessThanOrEqual(capacityChars);
    expect(w.load).toBe(0);
  });
});
