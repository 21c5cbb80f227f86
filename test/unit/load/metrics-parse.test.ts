import { describe, expect, it } from 'vitest';
import { MAX_COUNT, parseLoadFigures, DEFAULT_METRIC_NAMES } from '../../../src/load/metrics-parse.js';
import { metricsText } from '../../../src/sim/metrics-text.js';

/** An excerpt of a vLLM 0.10 page as prometheus_client writes it (HELP/TYPE, _created, histograms, info). */
const VLLM_PAGE = `# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12345.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1024.0
vllm:prefix_cache_hits_created{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.7337e+09
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.31
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_gpu_blocks="27000"} 1.0
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="4",running_lora_adapters="sql,chat",waiting_lora_adapters=""} 1.7337e+09
`;

const line = (name: string, value: string, labels = 'engine="0",model_name="m"') =>
  `${name}{${labels}} ${value}\n`;

describe('parseLoadFigures', () => {
  it.each([
    {
      name: "vLLM's page",
      text: VLLM_PAGE,
      want: {
        waiting: 2,
        running: 5,
        kvUsage: 0.42,
        blockSize: 16,
        numGpuBlocks: 27000,
        lora: { maxLora: 4, running: ['sql', 'chat'], waiting: [] },
        modelName: 'meta-llama/Llama-3.1-8B-Instruct',
        malformedLines: 0,
      },
    },
    {
      name: 'older vLLM: gpu_cache_usage_perc as the fallback KV usage',
      text: line('vllm:gpu_cache_usage_perc', '0.7') + line('vllm:num_requests_running', '1'),
      want: { running: 1, kvUsage: 0.7, modelName: 'm', malformedLines: 0 },
    },
    {
      name: 'SGLang names',
      text:
        line('sglang:num_queue_reqs', '3') +
        line('sglang:num_running_reqs', '9') +
        line('sglang:token_usage', '0.5'),
      want: { waiting: 3, running: 9, kvUsage: 0.5, modelName: 'm', malformedLines: 0 },
    },
    {
      name: 'data-parallel engines: counts summed, the fullest KV cache',
      text:
        line('vllm:num_requests_waiting', '1', 'engine="0"') +
        line('vllm:num_requests_waiting', '2', 'engine="1"') +
        line('vllm:kv_cache_usage_perc', '0.3', 'engine="0"') +
        line('vllm:kv_cache_usage_perc', '0.8', 'engine="1"'),
      want: { waiting: 3, kvUsage: 0.8, malformedLines: 0 },
    },
    { name: 'missing metrics', text: line('python_info', '1'), want: { malformedLines: 0 } },
    { name: 'empty page', text: '', want: { malformedLines: 0 } },
    {
      name: 'NaN, +Inf and negative values are ignored',
      text:
        line('vllm:num_requests_waiting', 'NaN') +
        line('vllm:num_requests_running', '+Inf') +
        line('vllm:kv_cache_usage_perc', '-0.5'),
      want: { modelName: 'm', malformedLines: 0 },
    },
    {
      name: 'huge values are clamped',
      text: line('vllm:num_requests_waiting', '1e308') + line('vllm:kv_cache_usage_perc', '7'),
      want: { waiting: MAX_COUNT, kvUsage: 1, modelName: 'm', malformedLines: 0 },
    },
    {
      name: 'garbage page',
      text: '\u0000\u0001<html>oops</html>\n{{{ }}}\nvllm:num_requests_waiting\n',
      want: { malformedLines: 0 },
    },
    {
      name: 'a malformed wanted line costs only itself',
      text: 'vllm:num_requests_waiting{engine="0" 2\n' + line('vllm:num_requests_running', '4'),
      want: { running: 4, modelName: 'm', malformedLines: 1 },
    },
    {
      name: 'a prefix of a wanted name is not that name',
      text: line('vllm:num_requests_waiting_by_reason', '9') + line('vllm:num_requests_waiting', '1'),
      want: { waiting: 1, modelName: 'm', malformedLines: 0 },
    },
    {
      name: 'no trailing newline, timestamps, escaped label values',
      text: 'vllm:num_requests_running{model_name="a \\"b\\"\\\\c"} 6 1700000000000',
      want: { running: 6, modelName: 'a "b"\\c', malformedLines: 0 },
    },
    {
      // vLLM sets the gauge to the current time under the labels of the moment, so every combination
      // the worker has had stays on the page, in creation order: here it went "" -> "a" -> "a,b" -> "a".
      name: 'LoRA: the series with the latest time, not the last line',
      text:
        line(
          'vllm:lora_requests_info',
          '1733700000.5',
          'max_lora="2",running_lora_adapters="",waiting_lora_adapters=""',
        ) +
        line(
          'vllm:lora_requests_info',
          '1733700009.25',
          'max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""',
        ) +
        line(
          'vllm:lora_requests_info',
          '1733700004.0',
          'max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"',
        ),
      want: { lora: { maxLora: 2, running: ['a'], waiting: [] }, malformedLines: 0 },
    },
    {
      name: 'LoRA: back to no adapter at all is the current state too',
      text:
        line(
          'vllm:lora_requests_info',
          '1733700001',
          'max_lora="1",running_lora_adapters="a",waiting_lora_adapters="b"',
        ) +
        line(
          'vllm:lora_requests_info',
          '1733700002',
          'max_lora="1",running_lora_adapters="",waiting_lora_adapters=""',
        ) +
        line(
          'vllm:lora_requests_info',
          'NaN',
          'max_lora="1",running_lora_adapters="z",waiting_lora_adapters=""',
        ),
      want: { lora: { maxLora: 1, running: [], waiting: [] }, malformedLines: 0 },
    },
  ])('$name', ({ text, want }) => {
    expect(parseLoadFigures(text)).toEqual(want);
  });

  it('takes configured names (first one found wins)', () => {
    const names = { ...DEFAULT_METRIC_NAMES, waiting: ['my:queue', 'vllm:num_requests_waiting'] };
    const text = line('vllm:num_requests_waiting', '1') + line('my:queue', '5');
    expect(parseLoadFigures(text, names).waiting).toBe(5);
  });
});

describe('parseLoadFigures: a figure turned off', () => {
  it('an empty LoRA metric name reads no LoRA info (and does not match every line)', () => {
    const text =
      line('vllm:num_requests_running', '2') +
      line(
        'vllm:lora_requests_info',
        '1733700000',
        'max_lora="1",running_lora_adapters="a",waiting_lora_adapters=""',
      );
    expect(parseLoadFigures(text, { ...DEFAULT_METRIC_NAMES, lora: '' })).toEqual({
      running: 2,
      modelName: 'm',
      malformedLines: 0,
    });
  });
});

describe("parseLoadFigures: vLLM's sleep mode (vllm:engine_sleep_state)", () => {
  // What vLLM's PrometheusStatLogger.record_sleep_state leaves on the page, per engine.
  const sleepState = (engine: string, awake: string, offloaded: string, discarded: string): string =>
    line('vllm:engine_sleep_state', awake, `engine="${engine}",model_name="m",sleep_state="awake"`) +
    line(
      'vllm:engine_sleep_state',
      offloaded,
      `engine="${engine}",model_name="m",sleep_state="weights_offloaded"`,
    ) +
    line('vllm:engine_sleep_state', discarded, `engine="${engine}",model_name="m",sleep_state="discard_all"`);
  const running = line('vllm:num_requests_running', '0');

  it.each([
    { name: 'awake', text: sleepState('0', '1.0', '0.0', '0.0'), asleep: false },
    { name: 'sleep level 1 (weights offloaded)', text: sleepState('0', '0.0', '1.0', '0.0'), asleep: true },
    { name: 'sleep level 2 (all discarded)', text: sleepState('0', '0.0', '0.0', '1.0'), asleep: true },
    {
      name: 'two data-parallel engines, one asleep: asleep (a request may land on it)',
      text: sleepState('0', '1.0', '0.0', '0.0') + sleepState('1', '0.0', '1.0', '0.0'),
      asleep: true,
    },
    {
      name: 'only the awake series, at 0: asleep',
      text: line('vllm:engine_sleep_state', '0', 'engine="0",model_name="m",sleep_state="awake"'),
      asleep: true,
    },
    {
      name: 'an unknown state at 0 next to awake 1: awake',
      text:
        sleepState('0', '1.0', '0.0', '0.0') +
        line('vllm:engine_sleep_state', '0', 'engine="0",model_name="m",sleep_state="hibernating"'),
      asleep: false,
    },
    { name: 'no gauge (SGLang, older vLLM): no verdict', text: '', asleep: undefined },
    {
      name: 'series without a sleep_state label or with NaN values: no verdict',
      text:
        line('vllm:engine_sleep_state', '0') +
        line('vllm:engine_sleep_state', 'NaN', 'engine="0",model_name="m",sleep_state="awake"'),
      asleep: undefined,
    },
  ])('$name', ({ text, asleep }) => {
    const figures = parseLoadFigures(running + text);
    expect(figures.asleep).toBe(asleep);
    expect(figures.running).toBe(0);
  });

  it('an empty sleep-state name reads nothing (and does not match every line)', () => {
    const text = running + sleepState('0', '0.0', '1.0', '0.0');
    expect(parseLoadFigures(text, { ...DEFAULT_METRIC_NAMES, sleepState: '' })).toEqual({
      running: 0,
      modelName: 'm',
      malformedLines: 0,
    });
  });

  it("reads the simulator's page, awake and asleep", () => {
    const page = (sleepLevel: number): string =>
      metricsText({
        model: 'm',
        running: 0,
        waiting: 0,
        kvCacheUsage: 0,
        prefixCacheQueries: 0,
        prefixCacheHits: 0,
        promptTokens: 0,
        generationTokens: 0,
        sleepLevel,
      });
    expect(parseLoadFigures(page(0)).asleep).toBe(false);
    expect(parseLoadFigures(page(1)).asleep).toBe(true);
    expect(parseLoadFigures(page(2)).asleep).toBe(true);
  });
});

describe('parseLoadFigures: per data-parallel engine (perEngine)', () => {
  // A `vllm serve --data-parallel-size 2` page as vLLM writes it: every engine's series labelled.
  const PAGE = [
    '# HELP vllm:num_requests_running Number of requests in model execution batches.',
    '# TYPE vllm:num_requests_running gauge',
    'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
    'vllm:num_requests_running{engine="1",model_name="m"} 7.0',
    '# TYPE vllm:num_requests_waiting gauge',
    'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
    'vllm:num_requests_waiting{engine="1",model_name="m"} 5.0',
    '# TYPE vllm:kv_cache_usage_perc gauge',
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
    'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75',
    '# TYPE vllm:cache_config_info gauge',
    'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0',
    '',
  ].join('\n');

  it("gives each engine its own series' figures, and the page's total as before", () => {
    const f = parseLoadFigures(PAGE, DEFAULT_METRIC_NAMES, { perEngine: true });
    expect(f).toMatchObject({ running: 10, waiting: 5, kvUsage: 0.75 });
    expect(f.engines?.get('0')).toMatchObject({
      running: 3,
      waiting: 0,
      kvUsage: 0.25,
      blockSize: 16,
      modelName: 'm',
    });
    // Engine 1's cache config is not on the page: the server's (every engine's) is.
    expect(f.engines?.get('1')).toMatchObject({
      running: 7,
      waiting: 5,
      kvUsage: 0.75,
      blockSize: 16,
      numGpuBlocks: 1000,
    });
    expect([...(f.engines?.keys() ?? [])]).toEqual(['0', '1']);
  });

  it('reads no engines unless asked, and none from a page without the label', () => {
    expect(parseLoadFigures(PAGE).engines).toBeUndefined();
    const plain = parseLoadFigures('vllm:num_requests_running{model_name="m"} 2\n', DEFAULT_METRIC_NAMES, {
      perEngine: true,
    });
    expect(plain.running).toBe(2);
    expect(plain.engines?.size).toBe(0);
  });

  it("keys a hybrid-LB node's engines by their index in the server, not vLLM's global rank label", () => {
    // Node 2 of `vllm serve --data-parallel-size 4 --data-parallel-size-local 2
    // --data-parallel-start-rank 2 --data-parallel-hybrid-lb`: its API server labels its engines with
    // their global ranks 2 and 3 (engine_ranks_managed), while X-data-parallel-rank 0 / 1 picks them.
    const node2 = [
      '# TYPE vllm:num_requests_running gauge',
      'vllm:num_requests_running{engine="2",model_name="m"} 3.0',
      'vllm:num_requests_running{engine="3",model_name="m"} 7.0',
      '# TYPE vllm:num_requests_waiting gauge',
      'vllm:num_requests_waiting{engine="2",model_name="m"} 0.0',
      'vllm:num_requests_waiting{engine="3",model_name="m"} 5.0',
      '# TYPE vllm:kv_cache_usage_perc gauge',
      'vllm:kv_cache_usage_perc{engine="2",model_name="m"} 0.25',
      'vllm:kv_cache_usage_perc{engine="3",model_name="m"} 0.75',
      '# TYPE vllm:cache_config_info gauge',
      'vllm:cache_config_info{block_size="16",engine="2",num_gpu_blocks="1000"} 1.0',
      'vllm:cache_config_info{block_size="16",engine="3",num_gpu_blocks="1000"} 1.0',
      '',
    ].join('\n');
    const f = parseLoadFigures(node2, DEFAULT_METRIC_NAMES, { perEngine: true });
    expect([...(f.engines?.keys() ?? [])]).toEqual(['0', '1']);
    expect(f.engines?.get('0')).toMatchObject({ running: 3, waiting: 0, kvUsage: 0.25, blockSize: 16 });
    expect(f.engines?.get('1')).toMatchObject({ running: 7, waiting: 5, kvUsage: 0.75, blockSize: 16 });
  });

  it("never gives an engine another engine's LoRA adapters (vLLM's lora gauge has no engine label)", () => {
    // `--enable-lora --max-loras 1 --data-parallel-size 2`: every engine sets the one unlabelled gauge
    // to the time under its own adapters (loggers.py set_to_current_time); engine 1, running adapter
    // B, stepped last. Engine 0 runs nothing: it has its slot free, not B.
    const withLora =
      PAGE +
      [
        '# TYPE vllm:lora_requests_info gauge',
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} 1.7e9',
        'vllm:lora_requests_info{max_lora="1",running_lora_adapters="B",waiting_lora_adapters=""} 1.7000001e9',
        '',
      ].join('\n');
    const f = parseLoadFigures(withLora, DEFAULT_METRIC_NAMES, { perEngine: true });
    expect(f.lora).toEqual({ maxLora: 1, running: ['B'], waiting: [] }); // the server's page, as before
    for (const rank of ['0', '1']) {
      expect(f.engines?.get(rank)?.lora).toEqual({ maxLora: 1, running: [], waiting: [] });
    }
    // One engine on the page: the gauge is that engine's.
    const one = parseLoadFigures(
      'vllm:num_requests_running{engine="0",model_name="m"} 1\n' +
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="B",waiting_lora_adapters=""} 5\n',
      DEFAULT_METRIC_NAMES,
      { perEngine: true },
    );
    expect(one.engines?.get('0')?.lora).toEqual({ maxLora: 2, running: ['B'], waiting: [] });
  });

  it('ignores engine labels that are not ranks', () => {
    const f = parseLoadFigures(
      'vllm:num_requests_running{engine="x",model_name="m"} 2\n',
      DEFAULT_METRIC_NAMES,
      {
        perEngine: true,
      },
    );
    expect(f.engines?.size).toBe(0);
  });
});

describe('process start time', () => {
  it("reads prometheus_client's process_start_time_seconds, and the simulator's", () => {
    const page =
      '# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n' +
      '# TYPE process_start_time_seconds gauge\n' +
      'process_start_time_seconds 1.76511020785e+09\n' +
      'process_cpu_seconds_total 12.5\n' +
      'vllm:num_requests_running{engine="0",model_name="m"} 1.0\n';
    expect(parseLoadFigures(page).processStartSeconds).toBe(1765110207.85);
    expect(parseLoadFigures(page, { ...DEFAULT_METRIC_NAMES, processStart: '' }).processStartSeconds).toBe(
      undefined,
    );
    const sim = metricsText({
      model: 'm',
      running: 0,
      waiting: 0,
      kvCacheUsage: 0,
      prefixCacheQueries: 0,
      prefixCacheHits: 0,
      promptTokens: 0,
      generationTokens: 0,
      processStartSeconds: 1765110300.25,
    });
    expect(parseLoadFigures(sim).processStartSeconds).toBe(1765110300.25);
  });
});

describe('parseLoadFigures: SGLang pages (scheduler series labelled tp_rank / pp_rank / dp_rank)', () => {
  const sg = (name: string, labels: string, value: string) =>
    `${name}{engine_type="unified",model_name="m",${labels}} ${value}\n`;

  it('sums the attention data-parallel ranks of --enable-dp-attention, told apart by tp_rank alone', () => {
    // `--tp 8 --dp 2 --enable-dp-attention`: ranks 0 and 4 write their own queues, no dp_rank label.
    const page =
      sg('sglang:num_queue_reqs', 'pp_rank="0",tp_rank="0"', '4.0') +
      sg('sglang:num_queue_reqs', 'pp_rank="0",tp_rank="4"', '1.0') +
      sg('sglang:token_usage', 'pp_rank="0",tp_rank="0"', '0.5') +
      sg('sglang:token_usage', 'pp_rank="0",tp_rank="4"', '0.25') +
      sg('sglang:max_total_num_tokens', 'pp_rank="0",tp_rank="0"', '500000.0') +
      sg('sglang:max_total_num_tokens', 'pp_rank="0",tp_rank="4"', '500000.0');
    expect(parseLoadFigures(page)).toMatchObject({ waiting: 5, kvUsage: 0.5, capacityTokens: 500000 });
  });

  it("reads a priority-scheduling queue's total, not its per-priority breakdown on top", () => {
    const page =
      sg('sglang:num_queue_reqs', 'pp_rank="0",priority="",tp_rank="0"', '5.0') +
      sg('sglang:num_queue_reqs', 'pp_rank="0",priority="0",tp_rank="0"', '2.0') +
      sg('sglang:num_queue_reqs', 'pp_rank="0",priority="10",tp_rank="0"', '3.0');
    expect(parseLoadFigures(page).waiting).toBe(5);
  });

  it("keys a --dp-size server's ranks by dp_rank itself, even before rank 0 has written a series", () => {
    // SGLang writes a scheduler's gauges at its first batch (or 30 s idle): rank 0 may have none yet.
    const page =
      sg('sglang:num_queue_reqs', 'dp_rank="1",pp_rank="0",tp_rank="0"', '3.0') +
      sg('sglang:num_running_reqs', 'dp_rank="1",pp_rank="0",tp_rank="0"', '2.0');
    const f = parseLoadFigures(page, DEFAULT_METRIC_NAMES, { perEngine: true });
    expect(f).toMatchObject({ waiting: 3, running: 2 });
    expect([...(f.engines?.keys() ?? [])]).toEqual(['1']);
    expect(f.engines?.get('1')).toMatchObject({ waiting: 3, running: 2, modelName: 'm' });
  });
});
