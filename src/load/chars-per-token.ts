/**
 * Characters per prompt token, learned per model from the token counts the workers report.
 *
 * Why: without a tokenizer the router measures prompts in characters (the approximate prefix tree is
 * a tree of characters) and converts with a fixed ratio, `--chars-per-token` (default 4, the usual
 * English BPE average). A worker's KV cache is measured in tokens. When the real ratio differs (code,
 * JSON, CJK text, a small vocabulary), every conversion is off by the same factor: the tree trims a
 * worker's picture to `capacity x ratio` characters and so believes that worker holds contexts it
 * evicted long ago (at 1.8 real characters per token, 2.2x as many as it can hold), and the cost
 * model prices a recomputed prompt at a fraction of its tokens. Measured (bench/routing-ab.ts
 * --kv-events, eviction-pressure, the fixture tokenizer's ~1.8 characters per token, one approximate
 * router, 2 runs each): with the ratio set to 4, 221 of 768 requests went to a worker the tree
 * believed held over half the prompt and missed there; with 1.8, 1. Hit rate 54.1% -> 59.5%, output
 * tokens/s 1.29x, TTFT p90 873 -> 600 ms.
 *
 * Source: `usage.prompt_tokens` of the responses the router already watches (load/timing-dispatcher.ts:
 * the sampled share of streamed responses; vLLM and SGLang send usage in a stream's last chunk when the
 * client asks for it with `stream_options.include_usage`). One sample = (the request's routing-text
 * characters, its prompt tokens): the ratio that converts what the router measures into what the
 * worker stores, chat template included. Whatever else the worker counts and the routing text lacks
 * or spells differently (images, tool definitions the template renders, token-id prompts written as
 * decimal numbers) is folded into the ratio too: it is the average conversion from the tree's
 * characters to the cache's tokens over that model's traffic, which is what sizing a worker's picture
 * needs; a single request's token count can be off by its own share of those. The estimate is the
 * ratio of exponentially decayed sums (long prompts weigh more, as they should: they are what fills
 * caches), used once MIN_SAMPLES samples are in; until then, and for a model never sampled, the
 * configured prior.
 *
 * Pure: no timers, metrics or logging; bounded (MAX_MODELS models, least recently observed dropped).
 */

export interface CharsPerTokenOptions {
  /** The ratio used until a model has MIN_SAMPLES samples (`--chars-per-token`). */
  readonly prior: number;
  /** Weight kept by the previous samples at each new one (0.98: the last ~50 samples). */
  readonly decay?: number;
}

/** Samples a model needs before its learned ratio replaces the prior. */
export const MIN_SAMPLES = 4;
/** Requests whose routing text is shorter than this are not sampled (the template's tokens dominate). */
export const MIN_SAMPLE_CHARS = 64;
/** A sample outside this range of characters per token is discarded as garbage. */
export const SANE_RATIO: readonly [number, number] = [0.25, 64];
/** Models tracked at most; beyond it the least recently observed one is forgotten. */
export const MAX_MODELS = 256;

interface ModelRatio {
  chars: number;
  tokens: number;
  samples: number;
}

/** One model's state as exported (metrics). */
export interface CharsPerTokenView {
  readonly model: string;
  readonly charsPerToken: number;
  readonly samples: number;
}

export class CharsPerToken {
  readonly prior: number;
  private readonly decay: number;
  private readonly models = new Map<string, ModelRatio>();

  constructor(options: CharsPerTokenOptions) {
    const decay = options.decay ?? 0.98;
    if (!(options.prior > 0) || !Number.isFinite(options.prior))
      throw new RangeError(`chars per token prior must be > 0, got ${options.prior}`);
    if (!(decay > 0 && decay <= 1)) throw new RangeError(`decay must be in (0, 1], got ${decay}`);
    this.prior = options.prior;
    this.decay = decay;
  }

  /**
   * Records one response: `chars` of routing text that the worker counted as `promptTokens`. Returns
   * whether the sample was used (a short prompt or an absurd ratio is not).
   */
  observe(model: string, chars: number, promptTokens: number): boolean {
    if (!(chars >= MIN_SAMPLE_CHARS) || !(promptTokens >= 1) || !Number.isFinite(chars)) return false;
    if (!Number.isFinite(promptTokens)) return false;
    const ratio = chars / promptTokens;
    if (ratio < SANE_RATIO[0] || ratio > SANE_RATIO[1]) return false;
    let m = this.models.get(model);
    if (m === undefined) {
      if (this.models.size >= MAX_MODELS) this.models.delete(this.models.keys().next().value as string);
      m = { chars: 0, tokens: 0, samples: 0 };
    } else {
      this.models.delete(model); // re-inserted below: least recently observed first
    }
    this.models.set(model, m);
    m.chars = m.chars * this.decay + chars;
    m.tokens = m.tokens * this.decay + promptTokens;
    m.samples += 1;
    return true;
  }

  /** The model's learned ratio once it has MIN_SAMPLES samples, else the prior. */
  of(model: string): number {
    const m = this.models.get(model);
    return m === undefined || m.samples < MIN_SAMPLES ? this.prior : m.chars / m.tokens;
  }

  /** Every tracked model (including those still on the prior). */
  view(): CharsPerTokenView[] {
    return [...this.models].map(([model, m]) => ({
      model,
      charsPerToken: m.samples < MIN_SAMPLES ? this.prior : m.chars / m.tokens,
      samples: m.samples,
    }));
  }

  /** Forgets every model's samples. */
  clear(): void {
    this.models.clear();
  }
}
