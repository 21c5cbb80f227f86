/**
 * The prompt token ids vLLM would compute for an OpenAI request, on the router side, or why the
 * router cannot know them (the caller then falls back to the approximate prefix tree).
 *
 * - /v1/completions: `prompt` a string -> encode(prompt, add_special_tokens ?? true); a list of token
 *   ids -> used as is. A batch (a list of several strings, or of several token-id lists) is several
 *   engine requests in vLLM, one per prompt, each with its own prefix: `ids` is the first prompt's
 *   and `batch` every prompt's, in order. A list mixing strings and token-id lists -> `no_prompt`.
 * - /v1/chat/completions: `messages` rendered with the model's chat template (add_generation_prompt
 *   ?? true, continue_final_message, tools, documents and chat_template_kwargs: chat-template-args.ts),
 *   as vLLM hands them to it (tokenize/vllm-chat-input.ts: tools as its models dump them, tool-call
 *   arguments parsed, contents in the template's content format), then
 *   encode(text, add_special_tokens ?? false).
 *   Non-text content parts (images, audio: their tokens depend on the model's processor) ->
 *   `multimodal`; a template error (e.g. tool calls the template cannot render) -> `template_error`.
 * - no tokenizer configured for the model -> `no_tokenizer`.
 *
 * Tokenizers come from `--tokenizer MODEL=PATH` (a directory with tokenizer.json and
 * tokenizer_config.json), loaded once at start-up; a failure to load is a start-up error.
 */
import { HfTokenizer, type HfTokenizerOptions } from './hf-tokenizer.js';
import { vllmChatInput, type ContentFormat } from './vllm-chat-input.js';
import { chatTemplateArgs } from './chat-template-args.js';

export type TokenizeFallback =
  'no_tokenizer' | 'no_prompt' | 'multimodal' | 'no_chat_template' | 'template_error';

export type RequestTokens =
  | {
      ok: true;
      ids: ArrayLike<number>;
      /** A batched completions prompt: every prompt's ids (`ids` is the first's); absent for one prompt. */
      batch?: readonly ArrayLike<number>[];
    }
  | { ok: false; reason: TokenizeFallback };

/** Parses repeatable `MODEL=PATH` specs. Throws a RangeError naming the bad spec. */
export function parseTokenizerSpecs(specs: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (const spec of specs) {
    const eq = spec.lastIndexOf('=');
    if (eq <= 0 || eq === spec.length - 1) {
      throw new RangeError(`--tokenizer: expected MODEL=PATH, got "${spec}"`);
    }
    const model = spec.slice(0, eq);
    if (out.has(model)) throw new RangeError(`--tokenizer: model "${model}" given twice`);
    out.set(model, spec.slice(eq + 1));
  }
  return out;
}

export class RequestTokenizer {
  private readonly byModel = new Map<string, HfTokenizer>();

  /** model -> tokenizer; `load` specs are directories (see HfTokenizer.load). */
  constructor(tokenizers: ReadonlyMap<string, HfTokenizer> = new Map()) {
    for (const [model, t] of tokenizers) this.byModel.set(model, t);
  }

  static load(specs: ReadonlyMap<string, string>): RequestTokenizer {
    return new RequestTokenizer().loadSpecs(specs);
  }

  /**
   * Loads `model -> directory` specs (each directory once, with `opts`: its piece cache's bound);
   * throws a RangeError naming a bad one.
   */
  loadSpecs(specs: ReadonlyMap<string, string>, opts: HfTokenizerOptions = {}): this {
    const loaded = this.byModel;
    const byPath = new Map<string, HfTokenizer>();
    for (const [model, path] of specs) {
      let t = byPath.get(path);
      if (t === undefined) {
        try {
          t = HfTokenizer.load(path, opts);
        } catch (err) {
          throw new RangeError(`--tokenizer ${model}=${path}: ${(err as Error).message}`, { cause: err });
        }
        byPath.set(path, t);
      }
      loaded.set(model, t);
    }
    return this;
  }

  get size(): number {
    return this.byModel.size;
  }

  tokenizerFor(model: string): HfTokenizer | undefined {
    return this.byModel.get(model);
  }

  tokenize(model: string, body: Readonly<Record<string, unknown>> | undefined): RequestTokens {
    const t = this.byModel.get(model);
    if (t === undefined) return { ok: false, reason: 'no_tokenizer' };
    return tokenizeBody(t, body);
  }
}

/** What tokenizeBody needs: HfTokenizer, or the simulator's tokenizers. */
export interface BodyTokenizer {
  encode(text: string, addSpecialTokens?: boolean): number[];
  /** The same ids in a typed array, when the tokenizer has it (HfTokenizer.encodeIds: cheaper when long). */
  encodeIds?(text: string, addSpecialTokens?: boolean): ArrayLike<number>;
  renderChat(
    messages: unknown,
    opts: {
      addGenerationPrompt: boolean;
      continueFinalMessage?: boolean;
      tools?: unknown;
      variables?: Readonly<Record<string, unknown>>;
    },
  ): { ok: true; text: string } | { ok: false; error: string };
  readonly hasChatTemplate?: boolean;
  /** How its template reads a message's content (vLLM's detection); undefined: as the request sent it. */
  readonly contentFormat?: ContentFormat;
}

/** The prompt token ids of one OpenAI body under `t` (see the header comment). */
export function tokenizeBody(
  t: BodyTokenizer,
  body: Readonly<Record<string, unknown>> | undefined,
): RequestTokens {
  if (body === undefined) return { ok: false, reason: 'no_prompt' };
  const encode = (text: string, add: boolean): ArrayLike<number> =>
    t.encodeIds !== undefined ? t.encodeIds(text, add) : t.encode(text, add);
  const addSpecial = typeof body.add_special_tokens === 'boolean' ? body.add_special_tokens : undefined;
  if (body.messages !== undefined) {
    if (t.hasChatTemplate === false) return { ok: false, reason: 'no_chat_template' };
    if (!Array.isArray(body.messages) || body.messages.length === 0)
      return { ok: false, reason: 'no_prompt' };
    if (hasNonTextPart(body.messages)) return { ok: false, reason: 'multimodal' };
    // What vLLM hands the template: tools as its models dump them, tool-call arguments parsed.
    const input = vllmChatInput(body.messages, body.tools, t.contentFormat);
    if (input === undefined) return { ok: false, reason: 'template_error' };
    const args = chatTemplateArgs(body);
    const rendered = t.renderChat(input.messages, {
      addGenerationPrompt: args.addGenerationPrompt,
      continueFinalMessage: args.continueFinalMessage,
      ...(input.tools !== undefined ? { tools: input.tools } : {}),
      ...(args.variables !== undefined ? { variables: args.variables } : {}),
    });
    if (!rendered.ok) return { ok: false, reason: 'template_error' };
    return { ok: true, ids: encode(rendered.text, addSpecial ?? false) };
  }
  const prompt = body.prompt;
  if (typeof prompt === 'string') return { ok: true, ids: encode(prompt, addSpecial ?? true) };
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every(isTokenId)) return { ok: true, ids: prompt as number[] };
    let batch: ArrayLike<number>[];
    if (prompt.every((p) => typeof p === 'string')) {
      batch = (prompt as string[]).map((p) => encode(p, addSpecial ?? true));
    } else if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
      batch = prompt as number[][];
    } else return { ok: false, reason: 'no_prompt' };
    return batch.length === 1 ? { ok: true, ids: batch[0]! } : { ok: true, ids: batch[0]!, batch };
  }
  return { ok: false, reason: 'no_prompt' };
}

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

function hasNonTextPart(messages: readonly unknown[]): boolean {
  for (const m of messages) {
    const content = (m as { content?: unknown } | null)?.content;
    if (!Array.isArray(content)) continue;
    for (const part of content) {
      const type = (part as { type?: unknown } | null)?.type;
      if (type !== 'text') return true;
    }
  }
  return false;
}
