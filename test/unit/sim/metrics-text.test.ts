import { describe, expect, it } from 'vitest';
import { escapeLabelValue, metricsText } from '../../../src/sim/metrics-text.js';

/** An idle worker's figures. */
const IDLE = {
  model: 'm',
  running: 0,
  waiting: 0,
  kvCacheUsage: 0,
  prefixCacheQueries: 0,
  prefixCacheHits: 0,
  promptTokens: 0,
  generationTokens: 0,
};

describe('metricsText', () => {
  it('renders vLLM metric names with model_name (golden)', () => {
    const text = metricsText({
      model: 'm',
      running: 2,
      waiting: 1,
      kvCacheUsage: 0.25,
      prefixCacheQueries: 100,
      prefixCacheHits: 40,
      promptTokens: 100,
      generationTokens: 7,
    });
    const samples = text.split('\n').filter((l) => l !== '' && !l.startsWith('#'));
    expect(samples).toEqual([
      'vllm:num_requests_running{model_name="m"} 2',
      'vllm:num_requests_waiting{model_name="m"} 1',
      'vllm:kv_cache_usage_perc{model_name="m"} 0.25',
      'vllm:prefix_cache_queries_total{model_name="m"} 100',
      'vllm:prefix_cache_hits_total{model_name="m"} 40',
      'vllm:prompt_tokens_total{model_name="m"} 100',
      'vllm:generation_tokens_total{model_name="m"} 7',
      'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0',
      'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="weights_offloaded"} 0.0',
      'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="discard_all"} 0.0',
    ]);
    expect(text).toContain('# TYPE vllm:prefix_cache_hits_total counter\n');
    expect(text).toContain('# TYPE vllm:num_requests_running gauge\n');
  });

  it('adds vllm:cache_config_info with the block size when the cache config is given', () => {
    const text = metricsText({ ...IDLE, cacheConfig: { blockSize: 16, numGpuBlocks: 4096 } });
    expect(text).toContain('# TYPE vllm:cache_config_info gauge\n');
    expect(text).toContain(
      'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="4096"} 1.0\n',
    );
  });

  it.each([
    { raw: 'plain', escaped: 'plain' },
    { raw: 'a"b', escaped: 'a\\"b' },
    { raw: 'a\\b', escaped: 'a\\\\b' },
    { raw: 'a\nb', escaped: 'a\\nb' },
  ])('escapes $raw', ({ raw, escaped }) => {
    expect(escapeLabelValue(raw)).toBe(escaped);
  });

  it.each([
    { level: 1, states: ['0.0', '1.0', '0.0'] },
    { level: 2, states: ['0.0', '0.0', '1.0'] },
  ])('sleep level $level sets vllm:engine_sleep_state as vLLM records it', ({ level, states }) => {
    const text = metricsText({ ...IDLE, sleepLevel: level });
    const values = text
      .split('\n')
      .filter((l) => l.startsWith('vllm:engine_sleep_state{'))
      .map((l) => l.split(' ')[1]);
    expect(values).toEqual(states);
  });
});
