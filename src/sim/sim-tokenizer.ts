/**
 * The simulator's tokenizer: what `POST /tokenize` and `POST /detokenize` answer with, behind a small
 * interface so a real tokenizer (e.g. a Hugging Face tokenizer.json) can replace the default through
 * `SimulatorOptions.tokenizer`.
 *
 * Default: `CharTokenizer`, consistent with the simulator's prefix-cache approximation of
 * `charsPerToken` (4) characters per token (prefix-cache.ts):
 * - ASCII text is cut greedily from the start into chunks of `charsPerToken` characters (the last chunk
 *   may be shorter); every chunk is one token, so an ASCII prompt of n characters has exactly
 *   ceil(n / charsPerToken) tokens, the count the simulator's `usage.prompt_tokens` reports.
 * - A non-ASCII code point ends the current chunk and is a token of its own (as byte-level BPE spends
 *   more tokens on non-Latin text).
 * - Ids are the chunk itself, packed 7 bits per character, in one id range per chunk length
 *   (`[base(L), base(L) + 128^L)`, base(1) = 0, base(L + 1) = base(L) + 128^L), followed by the range of
 *   single code points. So ids are a pure function of the text (every simulator of a fleet gives the
 *   same ids for the same text, as replicas of one model do), `decode(encode(t)) === t` for every
 *   string, and the tokens of a prefix that ends on a chunk boundary are a prefix of the full text's
 *   tokens (what prefix caching by token blocks relies on). With 4 characters per token every id is
 *   below 2^29; `charsPerToken` is limited to 7 so ids stay exact integers.
 * - There are no special tokens (like a model without BOS), so `add_special_tokens` changes nothing.
 *
 * Chat rendering (`renderChat`) is the simulator's chat-template-like format, the same one the
 * generation path renders (sim-request.ts): `<|role|>\ncontent\n` per message (text parts
 * concatenated, other parts as `<type:key>` with the key of their media, request/media-key.ts, so that
 * as in vLLM, whose block keys hash the media, two different images share no cache past the image and
 * the same image sent again does, followed by one filler token per placeholder token a Qwen2-VL-like
 * processor gives the media: request/media-tokens.ts with its defaults, ~1,000 for a photo, so an
 * image costs prefill and cache as in vLLM), plus `<|assistant|>\n` when a generation prompt is asked for.
 * The request's `tools` are rendered as most models' templates render them, in the opening system
 * block (after the first message when it is a system or developer message, else before it):
 * `<|tools|>\n` and one JSON line per tool; an assistant message's `tool_calls` follow its content as
 * `<tool_call>NAME\n` and the call's arguments. So a coding agent's tools cost prefill and cache.
 *
 * Pure: no timers, no I/O.
 */
import { mediaKey, mediaPayload } from '../request/media-key.js';
import { DEFAULT_MEDIA_TOKENS, mediaTokens } from '../request/media-tokens.js';

/** Filler of a media part's placeholder tokens (ASCII, so `CharTokenizer` counts 4 per token). */
const MEDIA_FILL = '\u001a';
/** The simulator's default characters per token (prefix-cache.ts, `CharTokenizer`). */
const SIM_CHARS_PER_TOKEN = 4;

export interface ChatRenderOptions {
  /** Append the assistant header that opens the reply (vLLM's `add_generation_prompt`). */
  readonly addGenerationPrompt: boolean;
  /** Leave the final message open for the model to continue (vLLM's `continue_final_message`). */
  readonly continueFinalMessage?: boolean;
  /** The request's `tools`, which the template renders (see the header comment). */
  readonly tools?: unknown;
  /** Further template variables (documents, chat_template_kwargs): a model's Jinja template reads them; this format has none. */
  readonly variables?: Readonly<Record<string, unknown>>;
}

export type ChatRenderResult = { ok: true; text: string } | { ok: false; error: string };

export interface SimTokenizer {
  /** Shown in errors and logs. */
  readonly name: string;
  /** Token ids of `text`; `addSpecialTokens` adds what the model's tokenizer adds (e.g. BOS). */
  encode(text: string, addSpecialTokens?: boolean): number[];
  /** Text of `ids`. Throws a RangeError naming the first id outside the vocabulary. */
  decode(ids: readonly number[]): string;
  /** The vocabulary string of one id (vLLM's `token_strs`). Throws a RangeError when out of vocabulary. */
  tokenString(id: number): string;
  /** Renders chat messages through the model's chat template; an error is a user-facing 400 message. */
  renderChat(messages: unknown, opts: ChatRenderOptions): ChatRenderResult;
}

const MAX_CHARS_PER_TOKEN = 7;

export class CharTokenizer implements SimTokenizer {
  readonly name: string;
  /** No special ids around a text's (request-tokens.ts truncation). */
  readonly specialCounts = [0, 0] as const;
  /** bases[L] = first id of chunks of length L (1..charsPerToken); bases[charsPerToken + 1] = code points. */
  private readonly bases: number[];

  constructor(readonly charsPerToken = 4) {
    if (!Number.isInteger(charsPerToken) || charsPerToken < 1 || charsPerToken > MAX_CHARS_PER_TOKEN) {
      throw new RangeError(`charsPerToken must be an integer in [1, ${MAX_CHARS_PER_TOKEN}]`);
    }
    this.name = `chars-per-token-${charsPerToken}`;
    this.bases = [0, 0];
    for (let len = 1; len <= charsPerToken; len++) this.bases.push(this.bases[len]! + 128 ** len);
  }

  /** One past the largest id (code points run up to U+10FFFF). */
  get vocabSize(): number {
    return this.bases[this.charsPerToken + 1]! + 0x110000;
  }

  encode(text: string): number[] {
    const ids: number[] = [];
    const cpt = this.charsPerToken;
    let i = 0;
    while (i < text.length) {
      const c = text.codePointAt(i)!;
      if (c >= 0x80) {
        ids.push(this.bases[cpt + 1]! + c);
        i += c > 0xffff ? 2 : 1;
        continue;
      }
      let packed = 0;
      let len = 0;
      while (len < cpt && i < text.length) {
        const a = text.charCodeAt(i);
        if (a >= 0x80) break;
        packed = packed * 128 + a;
        len++;
        i++;
      }
      ids.push(this.bases[len]! + packed);
    }
    return ids;
  }

  decode(ids: readonly number[]): string {
    let out = '';
    for (const id of ids) out += this.tokenString(id);
    return out;
  }

  tokenString(id: number): string {
    const cpt = this.charsPerToken;
    if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
      throw new RangeError(`token id ${String(id)} is out of vocabulary (0..${this.vocabSize - 1})`);
    }
    const cpBase = this.bases[cpt + 1]!;
    if (id >= cpBase) return String.fromCodePoint(id - cpBase);
    let len = cpt;
    while (id < this.bases[len]!) len--;
    let packed = id - this.bases[len]!;
    const chars = new Array<number>(len);
    for (let k = len - 1; k >= 0; k--) {
      chars[k] = packed % 128;
      packed = Math.floor(packed / 128);
    }
    return String.fromCharCode(...chars);
  }

  renderChat(messages: unknown, opts: ChatRenderOptions): ChatRenderResult {
    return renderChatTemplate(messages, opts);
  }
}

/** The simulator's chat template (see the header comment). */
export function renderChatTemplate(messages: unknown, opts: ChatRenderOptions): ChatRenderResult {
  if (!Array.isArray(messages) || messages.length === 0) {
    return { ok: false, error: 'messages must be a non-empty array' };
  }
  if (opts.addGenerationPrompt && opts.continueFinalMessage) {
    return {
      ok: false,
      error: 'Cannot set both `continue_final_message` and `add_generation_prompt` to True.',
    };
  }
  let out = '';
  const first: unknown = messages[0];
  const toolsAfterFirst = isObject(first) && (first.role === 'system' || first.role === 'developer');
  if (!toolsAfterFirst) out += toolsBlock(opts.tools);
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isObject(m) || typeof m.role !== 'string')
      return { ok: false, error: 'each message needs a string role' };
    const content = m.content;
    let text = '';
    if (typeof content === 'string') text = content;
    else if (Array.isArray(content)) {
      for (const part of content) {
        if (!isObject(part) || typeof part.type !== 'string') {
          return { ok: false, error: 'invalid message content part' };
        }
        if (part.type === 'text' && typeof part.text === 'string') text += part.text;
        else {
          const payload = mediaPayload(part, part.type);
          const key = mediaKey(part, part.type, payload);
          if (key === undefined) text += `<${part.type}>`;
          else {
            // The placeholder tokens the model's processor puts in the image's place (media-tokens.ts).
            const { tokens } = mediaTokens(part.type, payload, DEFAULT_MEDIA_TOKENS);
            text += `<${part.type}:${key}>${MEDIA_FILL.repeat(tokens * SIM_CHARS_PER_TOKEN)}`;
          }
        }
      }
    } else if (content !== null && content !== undefined)
      return { ok: false, error: 'invalid message content' };
    text += toolCallsText(m.tool_calls);
    const open = opts.continueFinalMessage === true && i === messages.length - 1;
    out += open ? `<|${m.role}|>\n${text}` : `<|${m.role}|>\n${text}\n`;
    if (i === 0 && toolsAfterFirst) out += toolsBlock(opts.tools);
  }
  if (opts.addGenerationPrompt) out += '<|assistant|>\n';
  return { ok: true, text: out };
}

/** The tools, as most templates render them inside their opening system block: one JSON line each. */
function toolsBlock(tools: unknown): string {
  if (!Array.isArray(tools) || tools.length === 0) return '';
  return `<|tools|>\n${tools.map((t) => JSON.stringify(t) ?? 'null').join('\n')}\n`;
}

/** An assistant message's tool calls, after its content: `<tool_call>NAME\n` and the arguments each. */
function toolCallsText(calls: unknown): string {
  if (!Array.isArray(calls)) return '';
  let out = '';
  for (const call of calls) {
    const fn = isObject(call) && isObject(call.function) ? call.function : undefined;
    const args = fn?.arguments;
    const argsText = typeof args === 'string' ? args : args === undefined ? '' : (JSON.stringify(args) ?? '');
    out += `<tool_call>${typeof fn?.name === 'string' ? fn.name : ''}\n${argsText}`;
  }
  return out;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
