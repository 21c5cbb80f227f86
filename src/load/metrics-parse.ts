/**
 * A worker's Prometheus `/metrics` page -> the load figures routing uses (pure: no I/O, no timers).
 *
 * Names (configurable, first name found wins per figure; defaults cover vLLM and SGLang so either
 * works out of the box):
 *   waiting   vllm:num_requests_waiting   | sglang:num_queue_reqs
 *   running   vllm:num_requests_running   | sglang:num_running_reqs
 *   kvUsage   vllm:kv_cache_usage_perc    | vllm:gpu_cache_usage_perc (vLLM < 0.10) | sglang:token_usage
 *   blockSize vllm:cache_config_info's `block_size` label
 *   numGpuBlocks  its `num_gpu_blocks` label (the worker's KV-cache capacity, in blocks)
 *   capacityTokens  sglang:max_total_num_tokens (SGLang's KV pool, in tokens; SGLang has no cache
 *             config gauge), the largest series (each engine's own pool, as num_gpu_blocks is)
 *   lora      (one name; '' = off) vllm:lora_requests_info's `max_lora`, `running_lora_adapters`, `waiting_lora_adapters`,
 *             from its LATEST series: vLLM sets the gauge to the current time under the labels of the
 *             moment (`set_to_current_time()`), so every combination of adapters the worker has had
 *             stays on the page as its own series; the one with the largest value is now (the
 *             inference extension's endpoint picker reads it the same way). Page order is creation
 *             order, not recency: a worker back to an earlier combination lists it before newer ones.
 *   modelName the `model_name` label of the waiting/running samples (vLLM's served model name: the
 *             base model; a request naming anything else on a LoRA-enabled worker is for an adapter)
 *   asleep    (one name; '' = off) vllm:engine_sleep_state: one series per engine and `sleep_state`
 *             (`awake`, `weights_offloaded`, `discard_all`), each 0 or 1. The worker is asleep when any
 *             engine's `awake` series is 0 or any of its other states is 1 (vLLM's sleep mode puts
 *             every engine to sleep together; a request reaching a sleeping engine crashes it on
 *             vLLM releases without a guard). Absent (SGLang, vLLM before the gauge): awake.
 *   processStartSeconds  process_start_time_seconds: when the serving process started (epoch
 *             seconds), from prometheus_client's default process collector, which vLLM's default
 *             registry carries (vllm/v1/metrics/prometheus.py get_prometheus_registry: REGISTRY unless
 *             PROMETHEUS_MULTIPROC_DIR is set, as with --api-server-count > 1, whose pages lack it). A
 *             later value at the same URL is another process (load/process-starts.ts).
 * A page with several samples of a figure (data-parallel engines, several `model_name`s) sums the
 * counts and takes the largest KV usage (the fullest engine is the one that will queue). SGLang labels
 * each scheduler's gauges `model_name`, `engine_type`, `tp_rank`, `pp_rank`[, `moe_ep_rank`,
 * `dp_rank`] (scheduler_metrics_mixin.py); its attention data-parallel ranks
 * (`--enable-dp-attention`) are told apart by `tp_rank` alone, each its own queue, so series are
 * summed whatever their `tp_rank`. With `--enable-priority-scheduling` SGLang writes a queue gauge's
 * total under `priority=""` and its breakdown per priority under `priority="<n>"` (collector.py
 * `_log_gauge_queue_count`): a sample with a non-empty `priority` label is part of a total on the
 * page and is not read.
 * Per engine (`perEngine`, for a server whose data-parallel ranks are scheduled one by one:
 * workers/data-parallel.ts): vLLM labels each engine's series `engine="<rank>"` with its GLOBAL
 * data-parallel rank (vllm/v1/engine/async_llm.py: `engine_idxs=engine_ranks_managed`), which on a
 * node of a hybrid or external load-balanced deployment starts at `--data-parallel-start-rank`, while
 * `X-data-parallel-rank` picks one of the server's own engines by its index from 0 (core_client.py
 * DPLBAsyncMPClient indexes `core_engines`, the local engines; input_processor.py checks it against
 * the local size). `engines` therefore maps each engine seen on the page BY ITS INDEX in the server
 * (its label minus the page's lowest engine label; the same thing on a page labelled from 0) to the
 * figures of its own series alone, as above (a figure with no series for that engine is missing; the
 * cache config and model name fall back to the page's, which every engine of one server shares).
 * SGLang (`--dp-size N`, which honours `X-Data-Parallel-Rank` too) labels each rank's series
 * `dp_rank="<rank>"` instead, the server's own index from 0: a page without `engine` labels is split
 * by `dp_rank`, taken as the index itself.
 * LoRA state: vLLM writes `vllm:lora_requests_info` without an `engine` label, every engine to the
 * same series set (loggers.py; it warns that the gauge is "incorrect/misleading with data parallel"),
 * so the latest series is whichever engine stepped last. On a page of several engines an engine gets
 * only the server's `max_lora` from it (no adapters running or waiting: what the router has in flight
 * there stands for them, routing/lora-affinity.ts), never another engine's adapters.
 *
 * Parsing: the exposition format is parsed by `parse-prometheus-text-format` (a port of the Prometheus
 * Python client's parser: label escapes, timestamps, `# HELP`/`# TYPE`). A vLLM page is ~1,000 lines,
 * mostly histogram buckets (~4 ms to parse whole on this machine, too much 10 times a second per
 * worker), so only the lines that START with a wanted name are handed to the parser (~0.05 ms).
 * A malformed line makes the parser throw; the lines are then parsed one by one and the bad ones
 * dropped, so garbage elsewhere on the page never costs the figures that are readable.
 *
 * Values: `NaN`, `+Inf`, `-Inf`, negative or unparsable values are ignored (the figure is missing);
 * counts above MAX_COUNT are clamped (a 1e308 queue must not turn every score into Infinity);
 * KV usage is clamped to [0, 1].
 */
import parsePrometheusTextFormat, { type ParsedFamily } from 'parse-prometheus-text-format';

export interface MetricNames {
  readonly waiting: readonly string[];
  readonly running: readonly string[];
  readonly kvUsage: readonly string[];
  readonly cacheConfig: string;
  /** Gauges of the KV-cache capacity in tokens, first found wins (not configurable, as cacheConfig). */
  readonly kvCapacity: readonly string[];
  readonly lora: string;
  readonly sleepState: string;
  /** '' = off. */
  readonly processStart: string;
}

export const DEFAULT_METRIC_NAMES: Readonly<MetricNames> = Object.freeze({
  waiting: ['vllm:num_requests_waiting', 'sglang:num_queue_reqs'],
  running: ['vllm:num_requests_running', 'sglang:num_running_reqs'],
  kvUsage: ['vllm:kv_cache_usage_perc', 'vllm:gpu_cache_usage_perc', 'sglang:token_usage'],
  cacheConfig: 'vllm:cache_config_info',
  kvCapacity: ['sglang:max_total_num_tokens'],
  lora: 'vllm:lora_requests_info',
  sleepState: 'vllm:engine_sleep_state',
  processStart: 'process_start_time_seconds',
});

/** Counts beyond this are clamped (no real engine queues a million requests). */
export const MAX_COUNT = 1_000_000;

/** A KV capacity gauge above this many tokens is not read (a billion 16-token blocks, as num_gpu_blocks). */
const MAX_CAPACITY_TOKENS = 16e9;

export interface LoraInfo {
  readonly maxLora?: number;
  readonly running: readonly string[];
  readonly waiting: readonly string[];
}

/** What one page said; a figure is undefined when the page did not carry it readably. */
export interface LoadFigures {
  readonly waiting?: number;
  readonly running?: number;
  /** In [0, 1]. */
  readonly kvUsage?: number;
  readonly blockSize?: number;
  /** KV-cache capacity in blocks (with blockSize: the most prompt tokens the worker can keep cached). */
  readonly numGpuBlocks?: number;
  /** KV-cache capacity in tokens from a gauge of it (SGLang), when the page has one above 0. */
  readonly capacityTokens?: number;
  readonly lora?: LoraInfo;
  /** The served (base) model name from the load samples' `model_name` label, when they carry one. */
  readonly modelName?: string;
  /** Whether the engine is in vLLM's sleep mode; undefined when the page has no sleep-state gauge. */
  readonly asleep?: boolean;
  /** When the serving process started, epoch seconds (process_start_time_seconds; see the header). */
  readonly processStartSeconds?: number;
  /** Lines the parser rejected. */
  readonly malformedLines: number;
  /**
   * `perEngine`: each data-parallel engine's own figures, by its index in the server (its `engine`
   * label minus the page's lowest one: see the header).
   */
  readonly engines?: ReadonlyMap<string, LoadFigures>;
}

export function parseLoadFigures(
  text: string,
  names: Readonly<MetricNames> = DEFAULT_METRIC_NAMES,
  opts: { perEngine?: boolean } = {},
): LoadFigures {
  // An empty name turns its figure off (it would match every line).
  const wanted = [
    ...names.waiting,
    ...names.running,
    ...names.kvUsage,
    names.cacheConfig,
    ...names.kvCapacity,
    names.lora,
    names.sleepState,
    names.processStart,
  ].filter((n) => n.length > 0);
  const { families, malformed } = parseWanted(text, wanted);
  const page = figuresOf(families, names, malformed);
  if (opts.perEngine !== true) return page;
  const engines = new Map<string, LoadFigures>();
  const { ranks: labels, first } = engineLabels(families, names);
  // An unlabelled LoRA series is one engine's only when the page has one engine (see the header).
  const pageLora =
    page.lora === undefined || labels.length <= 1
      ? page.lora
      : {
          ...(page.lora.maxLora !== undefined ? { maxLora: page.lora.maxLora } : {}),
          running: [],
          waiting: [],
        };
  for (const engine of labels) {
    const own = new Map<string, Samples>();
    for (const [name, samples] of families)
      own.set(
        name,
        samples.filter((m) => engineOf(m) === engine),
      );
    const f = figuresOf(own, names, 0);
    engines.set(String(engine - first), {
      ...f,
      ...(f.blockSize === undefined && page.blockSize !== undefined ? { blockSize: page.blockSize } : {}),
      ...(f.numGpuBlocks === undefined && page.numGpuBlocks !== undefined
        ? { numGpuBlocks: page.numGpuBlocks }
        : {}),
      ...(f.capacityTokens === undefined && page.capacityTokens !== undefined
        ? { capacityTokens: page.capacityTokens }
        : {}),
      ...(f.lora === undefined && pageLora !== undefined ? { lora: pageLora } : {}),
      ...(f.modelName === undefined && page.modelName !== undefined ? { modelName: page.modelName } : {}),
      ...(f.asleep === undefined && page.asleep !== undefined ? { asleep: page.asleep } : {}),
    });
  }
  return { ...page, engines };
}

/**
 * The engine labels (as ranks) of the load samples (waiting, running, KV usage), in page order, and
 * the label of the server's first engine: the lowest `engine` label (vLLM labels by global rank), 0
 * on a page labelled `dp_rank` alone (SGLang's ranks are the server's own, and a rank that has not
 * logged yet has no series to take the lowest from).
 */
function engineLabels(
  families: Map<string, Samples>,
  names: Readonly<MetricNames>,
): { ranks: number[]; first: number } {
  const out = new Set<number>();
  let first = Infinity;
  for (const name of [...names.waiting, ...names.running, ...names.kvUsage]) {
    for (const m of families.get(name) ?? []) {
      const e = engineOf(m);
      if (e === undefined) continue;
      out.add(e);
      if (rankLabel(m.labels?.engine) !== undefined) first = Math.min(first, e);
    }
  }
  return { ranks: [...out], first: first === Infinity ? 0 : first };
}

/** A sample's engine as a rank, when it has one: vLLM's `engine` label, else SGLang's `dp_rank`. */
function engineOf(sample: Samples[number]): number | undefined {
  return rankLabel(sample.labels?.engine) ?? rankLabel(sample.labels?.dp_rank);
}

function rankLabel(raw: string | undefined): number | undefined {
  return raw !== undefined && /^[0-9]{1,3}$/.test(raw) ? Number(raw) : undefined;
}

function figuresOf(
  families: Map<string, Samples>,
  names: Readonly<MetricNames>,
  malformed: number,
): LoadFigures {
  // A per-priority breakdown of a total on the page is not read (see the header).
  const values = (name: string): number[] => {
    const out: number[] = [];
    for (const s of families.get(name) ?? []) {
      const priority = s.labels?.priority;
      if (priority !== undefined && priority !== '') continue;
      const v = finiteNonNegative(s.value);
      if (v !== undefined) out.push(v);
    }
    return out;
  };
  const firstOf = (list: readonly string[], combine: (vs: number[]) => number): number | undefined => {
    for (const name of list) {
      const vs = values(name);
      if (vs.length > 0) return combine(vs);
    }
    return undefined;
  };
  const sum = (vs: number[]): number =>
    Math.min(
      MAX_COUNT,
      vs.reduce((a, b) => a + b, 0),
    );
  const max = (vs: number[]): number => Math.min(1, Math.max(...vs));

  let blockSize: number | undefined;
  let numGpuBlocks: number | undefined;
  for (const s of families.get(names.cacheConfig) ?? []) {
    const b = Number(s.labels?.block_size);
    if (Number.isInteger(b) && b > 0) blockSize = b;
    const n = Number(s.labels?.num_gpu_blocks);
    if (Number.isInteger(n) && n > 0 && n <= 1e9) numGpuBlocks = n;
  }
  let lora: LoraInfo | undefined;
  let loraAt = -Infinity;
  for (const s of families.get(names.lora) ?? []) {
    const at = Number(s.value);
    if (!(at >= loraAt)) continue; // NaN or older: not the current combination
    loraAt = at;
    const l = s.labels ?? {};
    const maxLora = Number(l.max_lora);
    lora = {
      ...(Number.isInteger(maxLora) && maxLora >= 0 ? { maxLora } : {}),
      running: splitList(l.running_lora_adapters),
      waiting: splitList(l.waiting_lora_adapters),
    };
  }
  let modelName: string | undefined;
  for (const name of [...names.waiting, ...names.running]) {
    for (const s of families.get(name) ?? []) {
      const m = s.labels?.model_name;
      if (m !== undefined && m.length > 0) {
        modelName = m;
        break;
      }
    }
    if (modelName !== undefined) break;
  }
  const asleep = names.sleepState === '' ? undefined : sleeping(families.get(names.sleepState));
  const started = names.processStart === '' ? [] : values(names.processStart);
  const processStartSeconds = started.length === 1 && started[0]! > 0 ? started[0] : undefined;
  const waiting = firstOf(names.waiting, sum);
  const running = firstOf(names.running, sum);
  const kvUsage = firstOf(names.kvUsage, max);
  const capacity = firstOf(names.kvCapacity, (vs) => Math.max(...vs));
  const capacityTokens =
    capacity !== undefined && Number.isInteger(capacity) && capacity > 0 && capacity <= MAX_CAPACITY_TOKENS
      ? capacity
      : undefined;
  return {
    ...(waiting === undefined ? {} : { waiting }),
    ...(running === undefined ? {} : { running }),
    ...(kvUsage === undefined ? {} : { kvUsage }),
    ...(blockSize === undefined ? {} : { blockSize }),
    ...(numGpuBlocks === undefined ? {} : { numGpuBlocks }),
    ...(capacityTokens === undefined ? {} : { capacityTokens }),
    ...(lora === undefined ? {} : { lora }),
    ...(modelName === undefined ? {} : { modelName }),
    ...(asleep === undefined ? {} : { asleep }),
    ...(processStartSeconds === undefined ? {} : { processStartSeconds }),
    malformedLines: malformed,
  };
}

type Samples = ParsedFamily['metrics'];

/**
 * The parser's reading of recently seen wanted lines (read-only once stored): a worker's load lines
 * are mostly the same from one scrape to the next (an idle worker's always), and the parser costs
 * a few us per line, most of a small page's parsing. Bounded by the lines' length: emptied when full.
 */
const PARSED = new Map<string, readonly ParsedFamily[]>();
const PARSED_MAX_CHARS = 1 << 20;
let parsedChars = 0;

/** Parses only the sample lines of the wanted metric names. */
function parseWanted(
  text: string,
  wanted: readonly string[],
): { families: Map<string, Samples>; malformed: number } {
  const lines: string[] = [];
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end === -1) end = text.length;
    const c = text.charCodeAt(start);
    // Sample lines only (comments start with '#'); cheap first-character screen before startsWith.
    if (c !== 35 && c !== 10) {
      for (const name of wanted) {
        if (text.startsWith(name, start)) {
          const next = text.charCodeAt(start + name.length);
          if (next === 123 /* { */ || next === 32 /* space */ || next === 9 /* tab */) {
            lines.push(text.slice(start, end));
          }
          break;
        }
      }
    }
    start = end + 1;
  }
  const families = new Map<string, Samples>();
  const add = (parsed: readonly ParsedFamily[]): void => {
    for (const f of parsed) {
      const list = families.get(f.name);
      if (list) list.push(...f.metrics);
      else families.set(f.name, [...f.metrics]);
    }
  };
  if (lines.length === 0) return { families, malformed: 0 };
  // The parser drops a final line without '\n'; every line here ends with one.
  const wantedText = lines.join('\n') + '\n';
  const seen = PARSED.get(wantedText);
  if (seen !== undefined) {
    add(seen);
    return { families, malformed: 0 };
  }
  try {
    const parsed = parsePrometheusTextFormat(wantedText);
    if (parsedChars + wantedText.length > PARSED_MAX_CHARS) {
      PARSED.clear();
      parsedChars = 0;
    }
    PARSED.set(wantedText, parsed);
    parsedChars += wantedText.length;
    add(parsed);
    return { families, malformed: 0 };
  } catch {
    let malformed = 0;
    for (const line of lines) {
      try {
        add(parsePrometheusTextFormat(line + '\n'));
      } catch {
        malformed += 1;
      }
    }
    return { families, malformed };
  }
}

/** The sleep-state gauge's verdict (see the header); undefined without a readable series. */
function sleeping(samples: Samples | undefined): boolean | undefined {
  let seen = false;
  for (const s of samples ?? []) {
    const state = s.labels?.sleep_state;
    const v = Number(s.value);
    if (state === undefined || !Number.isFinite(v)) continue;
    seen = true;
    if (state === 'awake' ? v === 0 : v >= 1) return true;
  }
  return seen ? false : undefined;
}

function finiteNonNegative(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const v = Number(raw);
  return Number.isFinite(v) && v >= 0 ? v : undefined;
}

function splitList(raw: string | undefined): string[] {
  if (raw === undefined || raw === '') return [];
  return raw
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}
