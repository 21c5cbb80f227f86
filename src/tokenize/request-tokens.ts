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
 *   `multimodal`; a template error (e.g. tool calls the template cannot render) -> `template_error`;
 *   a request's own `chat_template` (or one in `chat_template_kwargs`: vLLM renders it when the server
 *   trusts request templates; the router renders only the model's) -> `request_chat_template`; a
 *   tokenizer directory in Mistral's format (`tekken.json`, `tokenizer.model.v*`: vLLM's default
 *   tokenizer mode renders such a model's chats with mistral_common, whose placement of the system
 *   prompt and tools no Jinja template beside it reproduces) -> `mistral_tokenizer`; a gpt-oss model
 *   (`config.json` model_type `gpt_oss`: vLLM renders its chats with openai_harmony) -> `harmony`; a
 *   model vLLM gives a renderer of its own by default (DeepSeek V3.2/V4, Grok-2, Kimi K3, Kimi-Audio,
 *   Qwen-VL: tokenize/vllm-renderer.ts) -> `model_renderer`. A multimodal model's processor template
 *   (`chat_template.json`) renders its requests without tools, as vLLM's do.
 * - `truncate_prompt_tokens` k (both endpoints): vLLM keeps the prompt's LAST k tokens (its generate
 *   tokenizers truncate on the left; `truncation_side: "right"` keeps the first k). A text encoded
 *   with special tokens keeps them: the Hugging Face tokenizer truncates the text's own ids to k minus
 *   the specials, then adds them (BOS + the last k-1 ids); token-id prompts and chat renders (no added
 *   specials by default) are sliced. Every block key depends on where the kept run starts, so a
 *   prompt longer than k keyed untruncated matches nothing a worker stored. -1 (truncate to the
 *   model's context, which the router does not know) -> `truncation`.
 * - no tokenizer configured for the model -> `no_tokenizer`.
 * - the vLLM server's own chat flags for the model (server-chat-flags.ts: `--chat-template`,
 *   `--default-chat-template-kwargs`, `--chat-template-content-format`,
 *   `--exclude-tools-when-tool-choice-none`) shape every chat render of it, as on the worker.
 *
 * Tokenizers come from `--tokenizer MODEL=PATH` (a directory with tokenizer.json and
 * tokenizer_config.json), loaded once at start-up; a failure to load is a start-up error.
 */
import { HfTokenizer, type ChatTemplate, type HfTokenizerOptions } from './hf-tokenizer.js';
import { loadServerChatFlags, type ServerChatFlags, type ServerChatFlagSpecs } from './server-chat-flags.js';
import { vllmChatInput, type ContentFormat } from './vllm-chat-input.js';
import { chatTemplateArgs } from './chat-template-args.js';
import type { OwnRenderer } from './vllm-renderer.js';
import { laxInt } from '../request/lax-int.js';
import { laxBool } from '../request/lax-bool.js';

export type TokenizeFallback =
  | 'no_tokenizer'
  | 'no_prompt'
  | 'multimodal'
  | 'no_chat_template'
  | 'template_error'
  | 'request_chat_template'
  | 'mistral_tokenizer'
  | 'harmony'
  | 'model_renderer'
  | 'truncation';

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
  private readonly flagsByModel = new Map<string, ServerChatFlags>();

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

  /**
   * Loads the vLLM server chat flags of the models (server-chat-flags.ts); throws a RangeError naming
   * a bad one, or one for a model without a tokenizer (it would change nothing).
   */
  loadChatFlags(specs: ServerChatFlagSpecs): this {
    for (const [model, flags] of loadServerChatFlags(specs)) {
      if (!this.byModel.has(model)) {
        throw new RangeError(`chat template flags for "${model}", which has no --tokenizer`);
      }
      this.flagsByModel.set(model, flags);
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
    return tokenizeBody(t, body, this.flagsByModel.get(model));
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
      /** The server's template (`--chat-template`), over the tokenizer's own. */
      template?: ChatTemplate;
      tools?: unknown;
      variables?: Readonly<Record<string, unknown>>;
    },
  ): { ok: true; text: string } | { ok: false; error: string };
  readonly hasChatTemplate?: boolean;
  /**
   * How many ids `encode(text, true)` adds before and after the text's own (BOS; EOS of an
   * add_eos_token tokenizer); undefined when unknown (a truncated prompt with specials falls back).
   */
  readonly specialCounts?: readonly [number, number];
  /** How its template reads a message's content (vLLM's detection); undefined: as the request sent it. */
  readonly contentFormat?: ContentFormat;
  /** The same for the template a request with `tools` renders with (a named `tool_use` template's). */
  contentFormatFor?(tools: unknown): ContentFormat | undefined;
  /** vLLM renders this model's chats with mistral_common, not a template (HfTokenizer.mistralCommon). */
  readonly mistralCommon?: boolean;
  /** vLLM renders this model's chats with harmony or a renderer of its own (HfTokenizer.ownRenderer). */
  readonly ownRenderer?: OwnRenderer;
}

/** The prompt token ids of one OpenAI body under `t` and the server's chat flags (see the header comment). */
export function tokenizeBody(
  t: BodyTokenizer,
  body: Readonly<Record<string, unknown>> | undefined,
  server: ServerChatFlags = {},
): RequestTokens {
  if (body === undefined) return { ok: false, reason: 'no_prompt' };
  const cut = truncation(body);
  if (cut === 'unknown') return { ok: false, reason: 'truncation' };
  const raw = (text: string, add: boolean): ArrayLike<number> =>
    t.encodeIds !== undefined ? t.encodeIds(text, add) : t.encode(text, add);
  // Undefined: truncated with special tokens the tokenizer does not say it adds.
  const encode = (text: string, add: boolean): ArrayLike<number> | undefined =>
    cut === undefined ? raw(text, add) : truncated(raw(text, add), cut, add ? t.specialCounts : [0, 0]);
  const addSpecial = laxBool(body.add_special_tokens);
  if (body.messages !== undefined) {
    if (t.mistralCommon === true) return { ok: false, reason: 'mistral_tokenizer' };
    if (t.ownRenderer !== undefined) return { ok: false, reason: t.ownRenderer };
    if (t.hasChatTemplate === false && server.template === undefined)
      return { ok: false, reason: 'no_chat_template' };
    if (!Array.isArray(body.messages) || body.messages.length === 0)
      return { ok: false, reason: 'no_prompt' };
    if (hasRequestTemplate(body)) return { ok: false, reason: 'request_chat_template' };
    if (hasNonTextPart(body.messages)) return { ok: false, reason: 'multimodal' };
    const tools =
      server.excludeToolsWhenToolChoiceNone === true && body.tool_choice === 'none' ? undefined : body.tools;
    // What vLLM hands the template: tools as its models dump them, tool-call arguments parsed.
    const format =
      server.contentFormat ??
      server.template?.contentFormat ??
      (t.contentFormatFor !== undefined ? t.contentFormatFor(tools) : t.contentFormat);
    const input = vllmChatInput(body.messages, tools, format);
    if (input === undefined) return { ok: false, reason: 'template_error' };
    const args = chatTemplateArgs(body, server.defaultKwargs);
    const rendered = t.renderChat(input.messages, {
      addGenerationPrompt: args.addGenerationPrompt,
      continueFinalMessage: args.continueFinalMessage,
      ...(server.template !== undefined ? { template: server.template } : {}),
      ...(input.tools !== undefined ? { tools: input.tools } : {}),
      ...(args.variables !== undefined ? { variables: args.variables } : {}),
    });
    if (!rendered.ok) return { ok: false, reason: 'template_error' };
    const ids = encode(rendered.text, addSpecial ?? false);
    return ids === undefined ? { ok: false, reason: 'truncation' } : { ok: true, ids };
  }
  const prompt = body.prompt;
  if (typeof prompt === 'string') {
    const ids = encode(prompt, addSpecial ?? true);
    return ids === undefined ? { ok: false, reason: 'truncation' } : { ok: true, ids };
  }
  if (Array.isArray(prompt) && prompt.length > 0) {
    const given = (ids: readonly number[]): ArrayLike<number> =>
      cut === undefined ? ids : truncated(ids, cut, [0, 0])!;
    if (prompt.every(isTokenId)) return { ok: true, ids: given(prompt as number[]) };
    let batch: ArrayLike<number>[];
    if (prompt.every((p) => typeof p === 'string')) {
      const encoded = (prompt as string[]).map((p) => encode(p, addSpecial ?? true));
      if (encoded.includes(undefined)) return { ok: false, reason: 'truncation' };
      batch = encoded as ArrayLike<number>[];
    } else if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
      batch = (prompt as number[][]).map(given);
    } else return { ok: false, reason: 'no_prompt' };
    return batch.length === 1 ? { ok: true, ids: batch[0]! } : { ok: true, ids: batch[0]!, batch };
  }
  return { ok: false, reason: 'no_prompt' };
}

interface Truncation {
  /** Tokens kept. */
  readonly keep: number;
  /** Whether the last `keep` are kept (vLLM's default for generate models), else the first. */
  readonly left: boolean;
}

/** The request's `truncate_prompt_tokens` (see the header comment); 'unknown' for -1 or 0. */
function truncation(body: Readonly<Record<string, unknown>>): Truncation | 'unknown' | undefined {
  const v = body.truncate_prompt_tokens;
  if (v === undefined || v === null) return undefined;
  const keep = laxInt(v);
  if (keep === undefined || keep < 1) return 'unknown';
  return { keep, left: body.truncation_side !== 'right' };
}

/**
 * `ids` cut to `cut.keep` as the Hugging Face tokenizer truncates an encoding with `specials` [before,
 * after] added around the text's own ids: those are kept and the text's ids cut to the rest.
 * Undefined when the specials are unknown or leave no room (the tokenizer refuses that).
 */
function truncated(
  ids: ArrayLike<number>,
  cut: Truncation,
  specials: readonly [number, number] | undefined,
): ArrayLike<number> | undefined {
  if (ids.length <= cut.keep) return ids;
  if (specials === undefined) return undefined;
  const [before, after] = specials;
  const room = cut.keep - before - after;
  if (room <= 0) return undefined;
  const all = Array.from(ids);
  const own = all.slice(before, all.length - after);
  const kept = cut.left ? own.slice(own.length - room) : own.slice(0, room);
  return [...all.slice(0, before), ...kept, ...all.slice(all.length - after)];
}

/** A template of the request's own: `chat_template`, or one given in `chat_template_kwargs`. */
function hasRequestTemplate(body: Readonly<Record<string, unknown>>): boolean {
  const kwargs = body.chat_template_kwargs;
  const inKwargs =
    typeof kwargs === 'object' && kwargs !== null && (kwargs as { chat_template?: unknown }).chat_template;
  return (
    (typeof body.chat_template === 'string' && body.chat_template.length > 0) || typeof inKwargs === 'string'
  );
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
