/**
 * The simulator's `/metrics` page: vLLM metric names in Prometheus text exposition format 0.0.4,
 * written by hand (no prom-client registry, so many simulators coexist in one process). Counters are
 * named with `_total` in HELP/TYPE lines too, as Python's prometheus_client emits them for vLLM.
 * Every sample carries `model_name`, except `vllm:cache_config_info`, whose labels are the cache
 * configuration (as vLLM's info metrics are).
 */

export interface SimulatorMetricsSnapshot {
  readonly model: string;
  readonly running: number;
  readonly waiting: number;
  /** KV cache usage in [0, 1]. */
  readonly kvCacheUsage: number;
  readonly prefixCacheQueries: number;
  readonly prefixCacheHits: number;
  readonly promptTokens: number;
  readonly generationTokens: number;
  /** Adds `vllm:cache_config_info` (an info gauge whose labels carry vLLM's CacheConfig). */
  readonly cacheConfig?: { readonly blockSize: number; readonly numGpuBlocks: number };
  /**
   * Adds `vllm:lora_requests_info`: one series per combination of running and waiting adapters (comma
   * separated), valued with the time (epoch seconds) it was last current, as vLLM's
   * `set_to_current_time()` leaves them.
   */
  /**
   * `process_start_time_seconds` (epoch seconds), as prometheus_client's default process collector
   * adds it to a vLLM page: a simulator restarted at the same port shows a later one.
   */
  readonly processStartSeconds?: number;
  /** `vllm:engine_sleep_state` (engine 0): 0 awake, 1 weights offloaded, 2 all discarded. Default 0. */
  readonly sleepLevel?: number;
  readonly lora?: {
    readonly maxLora: number;
    readonly series: ReadonlyArray<{
      readonly running: string;
      readonly waiting: string;
      readonly at: number;
    }>;
  };
}

export function escapeLabelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');
}

export function metricsText(s: SimulatorMetricsSnapshot): string {
  const label = `{model_name="${escapeLabelValue(s.model)}"}`;
  const rows: [string, 'gauge' | 'counter', string, number][] = [
    ['vllm:num_requests_running', 'gauge', 'Number of requests in model execution batches.', s.running],
    ['vllm:num_requests_waiting', 'gauge', 'Number of requests waiting to be processed.', s.waiting],
    ['vllm:kv_cache_usage_perc', 'gauge', 'KV-cache usage. 1 means 100 percent usage.', s.kvCacheUsage],
    [
      'vllm:prefix_cache_queries_total',
      'counter',
      'Prefix cache queries, in terms of number of queried tokens.',
      s.prefixCacheQueries,
    ],
    [
      'vllm:prefix_cache_hits_total',
      'counter',
      'Prefix cache hits, in terms of number of cached tokens.',
      s.prefixCacheHits,
    ],
    ['vllm:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', s.promptTokens],
    ['vllm:generation_tokens_total', 'counter', 'Number of generation tokens processed.', s.generationTokens],
  ];
  let out = '';
  for (const [name, type, help, value] of rows) {
    out += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n${name}${label} ${value}\n`;
  }
  {
    const name = 'vllm:engine_sleep_state';
    const level = s.sleepLevel ?? 0;
    out +=
      `# HELP ${name} Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is ` +
      `awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.\n` +
      `# TYPE ${name} gauge\n`;
    const states: [string, boolean][] = [
      ['awake', level === 0],
      ['weights_offloaded', level === 1],
      ['discard_all', level === 2],
    ];
    for (const [state, on] of states) {
      out += `${name}{engine="0",model_name="${escapeLabelValue(s.model)}",sleep_state="${state}"} ${on ? '1.0' : '0.0'}\n`;
    }
  }
  const c = s.cacheConfig;
  if (c) {
    const name = 'vllm:cache_config_info';
    out +=
      `# HELP ${name} Information of the LLMEngine CacheConfig\n# TYPE ${name} gauge\n` +
      `${name}{block_size="${c.blockSize}",cache_dtype="auto",enable_prefix_caching="True",` +
      `num_gpu_blocks="${c.numGpuBlocks}"} 1.0\n`;
  }
  if (s.processStartSeconds !== undefined) {
    const name = 'process_start_time_seconds';
    out +=
      `# HELP ${name} Start time of the process since unix epoch in seconds.\n# TYPE ${name} gauge\n` +
      `${name} ${s.processStartSeconds}\n`;
  }
  const l = s.lora;
  if (l) {
    const name = 'vllm:lora_requests_info';
    out += `# HELP ${name} Running stats on lora requests.\n# TYPE ${name} gauge\n`;
    for (const x of l.series) {
      out +=
        `${name}{max_lora="${l.maxLora}",running_lora_adapters="${escapeLabelValue(x.running)}",` +
        `waiting_lora_adapters="${escapeLabelValue(x.waiting)}"} ${x.at}\n`;
    }
  }
  return out;
}

/**
 * How SGLang labels its scheduler series (`python -m sglang.launch_server --enable-metrics`):
 * sglang/srt/managers/scheduler_metrics_mixin.py gives the gauges of each data-parallel rank's first
 * tensor-parallel scheduler `model_name`, `engine_type`, `tp_rank`, `pp_rank`, and `dp_rank` under
 * data parallelism (`--dp-size`).
 */
export interface SglangMetricsShape {
  /** The `dp_rank` label (`--dp-size` above 1); absent by default. */
  readonly dpRank?: number;
  /**
   * `--enable-priority-scheduling`: the queue and running gauges carry their total under
   * `priority=""` and a breakdown per priority under `priority="<n>"` (collector.py
   * `_log_gauge_queue_count`); the simulator's requests all count under priority 0.
   */
  readonly priorityScheduling?: boolean;
}

/** A sample value as prometheus_client writes a float. */
function num(v: number): string {
  return Number.isInteger(v) ? `${v}.0` : String(v);
}

/**
 * The same figures as SGLang's `/metrics` page writes them: `sglang:num_queue_reqs`,
 * `sglang:num_running_reqs`, `sglang:token_usage` (the KV pool's used share, 0..1),
 * `sglang:num_used_tokens`, `sglang:max_total_num_tokens` (the cache's blocks x block size),
 * `sglang:cache_hit_rate` and the token counters (`_total`), labelled as SglangMetricsShape says
 * (counters: `model_name` alone). No vLLM cache-config, LoRA or sleep gauge.
 */
export function sglangMetricsText(s: SimulatorMetricsSnapshot, shape: SglangMetricsShape = {}): string {
  const total = s.cacheConfig === undefined ? 0 : s.cacheConfig.blockSize * s.cacheConfig.numGpuBlocks;
  const hitRate = s.prefixCacheQueries > 0 ? s.prefixCacheHits / s.prefixCacheQueries : 0;
  const rows: [string, 'gauge' | 'counter', string, number][] = [
    ['sglang:num_running_reqs', 'gauge', 'The number of running requests.', s.running],
    ['sglang:num_used_tokens', 'gauge', 'The number of used tokens.', Math.round(s.kvCacheUsage * total)],
    ['sglang:token_usage', 'gauge', 'The token usage.', s.kvCacheUsage],
    ['sglang:num_queue_reqs', 'gauge', 'The number of requests in the waiting queue.', s.waiting],
    ['sglang:cache_hit_rate', 'gauge', 'The prefix cache hit rate.', hitRate],
    ['sglang:max_total_num_tokens', 'gauge', 'Maximum total number of tokens in the KV cache pool.', total],
    ['sglang:prompt_tokens_total', 'counter', 'Number of prefill tokens processed.', s.promptTokens],
    [
      'sglang:generation_tokens_total',
      'counter',
      'Number of generation tokens processed.',
      s.generationTokens,
    ],
  ];
  const dp = shape.dpRank === undefined ? '' : `dp_rank="${shape.dpRank}",`;
  const model = escapeLabelValue(s.model);
  let out = '';
  for (const [name, type, help, value] of rows) {
    out += `# HELP ${name} ${help}\n# TYPE ${name} ${type}\n`;
    // Counters come from the tokenizer manager (one process, no scheduler ranks).
    const labels =
      type === 'counter'
        ? `model_name="${model}"`
        : `${dp}engine_type="unified",model_name="${model}",pp_rank="0",tp_rank="0"`;
    const queueCount = name === 'sglang:num_queue_reqs' || name === 'sglang:num_running_reqs';
    if (shape.priorityScheduling === true && queueCount) {
      out += `${name}{${labels},priority=""} ${num(value)}\n`;
      out += `${name}{${labels},priority="0"} ${num(value)}\n`;
    } else {
      out += `${name}{${labels}} ${num(value)}\n`;
    }
  }
  return out;
}
