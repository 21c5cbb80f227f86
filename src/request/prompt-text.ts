/**
 * Routing text: what the model will actually see, rendered deterministically, so requests that
 * share a prompt prefix share a text prefix regardless of JSON key order, sampling parameters or the
 * `stream` flag.
 *
 *  - /v1/completions: `prompt` as a string; an array of strings joined by '\n'; token ids rendered as
 *    space-separated decimal numbers (an array of arrays is joined by '\n'); `prompt_embeds` as a key
 *    of each tensor and filler for its tokens (completionEmbedsText).
 *  - /v1/chat/completions: each message in order as `<role>\n<text>\n`, where text is a string
 *    content or the concatenation of its `text` parts; a non-text part contributes its type and a key
 *    of its media (request/media-key.ts: its `uuid`, else a hash of its URL or data), so requests with
 *    different images diverge at the image, and the same image sent again matches, as in vLLM's cache.
 *    A keyed media part is followed by filler characters for each prompt token vLLM spends on it
 *    (request/media-tokens.ts: ~1,000 for a photo), at the model's characters per token (default
 *    `MEDIA_CHARS_PER_TOKEN`), so the prefix tree, the cost model and every count of prompt tokens
 *    weigh the image as the prefill it is; at most `MAX_MEDIA_FILL_CHARS` per request (a body of many
 *    tiny images claiming huge sizes gets no more).
 *    The request's `tools` (function definitions, which chat templates render into the prompt, most
 *    of them inside its opening system block: thousands of tokens for a coding agent) come after the
 *    leading system or developer message, or first when there is none, as `tools\n` and one JSON
 *    line per tool; an assistant message's `tool_calls` follow its content as `<tool_call>NAME\n`
 *    and the call's arguments. So two agents with different tools diverge where their tools do, and
 *    the cost model weighs the tools and the calls as the prefill they are.
 *
 * A long text stays in pieces (util/piece-text.ts): a long value the body parser returned as a
 * PieceText keeps its pieces, and a chat text longer than PIECE_CHARS is built in pieces of about that
 * size, so no routing text is ever one string above V8's large-object size.
 *
 * A request with a `cache_salt` (vLLM's per-tenant prefix-cache isolation: the salt enters the hash of
 * the prompt's first block, so no block is shared with a request of another salt, or of none) gets
 * its text opened by a short marker of the salt (`saltedText`), so the prefix tree shares nothing
 * between salts either, and a tenant's prefix is neither predicted where another tenant's identical
 * prompt is cached nor dropped when that other tenant's request reports a miss there.
 *
 * Returns undefined when the field is missing or of the wrong type (the caller reports a 400).
 */
import { hash32 } from '../util/hash32.js';
import { mediaKey, mediaPayload, mediaStringKey } from './media-key.js';
import { promptEmbedsTokens } from './prompt-embeds-tokens.js';
import {
  DEFAULT_MEDIA_TOKENS,
  mediaTokens,
  type MediaTally,
  type MediaTokenOptions,
} from './media-tokens.js';
import { PieceText, RoutingTextBuilder, type RoutingText } from '../util/piece-text.js';

/** Size of the pieces a long chat text is built in (UTF-16 code units; 64 KB even as two-byte text). */
export const PIECE_CHARS = 32 * 1024;

export function completionPromptText(prompt: unknown): RoutingText | undefined {
  if (typeof prompt === 'string' || prompt instanceof PieceText) return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return undefined;
  if (prompt.every((p) => typeof p === 'string')) return prompt.join('\n');
  if (prompt.every(isTokenId)) return prompt.join(' ');
  if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
    return (prompt as number[][]).map((ids) => ids.join(' ')).join('\n');
  }
  return undefined;
}

/**
 * A completions request's `prompt_embeds` (vLLM `--enable-prompt-embeds`: a base64 tensor, or a list of
 * them, sent without `prompt`) as a routing text: a key of each tensor (media-key.ts), one per line,
 * each followed by filler characters for the prompt tokens the tensor holds (its first dimension,
 * prompt-embeds-tokens.ts) at the model's characters per token, as a media part's (`media`), within
 * the same budget; a tensor whose shape cannot be read gets its key alone. vLLM keys such a prompt's
 * cache blocks by a hash of its embeddings, so the same tensor sent again is a hit and any other
 * shares nothing. The request's `truncate_prompt_tokens` k (>= 1) applies to the tensor as to token ids
 * (vllm/renderers/params.py `_token_truncation` runs on `prompt_embeds` too: its last k rows): a
 * longer tensor weighs k tokens, and its key names k (the rows kept are other embeddings than the
 * whole tensor's). Undefined for anything else.
 */
export function completionEmbedsText(
  embeds: unknown,
  media: Readonly<MediaTokenOptions> | (() => Readonly<MediaTokenOptions>) = DEFAULT_MEDIA_TOKENS,
  /** The request's truncate_prompt_tokens, when >= 1. */
  keep?: number,
): RoutingText | undefined {
  // A long base64 string may come parsed into pieces (request/json-body.ts).
  const isTensor = (e: unknown): e is string | PieceText =>
    (typeof e === 'string' || e instanceof PieceText) && e.length > 0;
  const list = isTensor(embeds) ? [embeds] : embeds;
  if (!Array.isArray(list) || list.length === 0 || !list.every(isTensor)) return undefined;
  const out = new RoutingTextBuilder(PIECE_CHARS);
  let fillLeft = MAX_MEDIA_FILL_CHARS;
  for (let i = 0; i < list.length; i++) {
    const tensor = list[i] as string | PieceText;
    const rows = promptEmbedsTokens(tensor);
    const cut = keep !== undefined && keep >= 1 && (rows === undefined || rows > keep);
    out.append(`${i > 0 ? '\n' : ''}${EMBEDS_MARK}${mediaStringKey(tensor)}${cut ? `@${keep}` : ''}`);
    if (rows === undefined) continue;
    const tokens = cut ? keep : rows;
    if (typeof media === 'function') media = media();
    const chars = Math.min(fillLeft, Math.round(tokens * (media.charsPerToken ?? MEDIA_CHARS_PER_TOKEN)));
    fillLeft -= chars;
    appendFiller(out, chars);
  }
  return out.build();
}

/** `chars` filler characters, in pieces of at most PIECE_CHARS. */
function appendFiller(out: RoutingTextBuilder, chars: number): void {
  for (let left = chars; left > 0; left -= PIECE_CHARS) out.append(FILL.repeat(Math.min(left, PIECE_CHARS)));
}

/** Opens each prompt_embeds key in a routing text (a control character no prompt text is likely to hold). */
const EMBEDS_MARK = '\u001bembeds:';

/**
 * Most prompts of a batched completions request the prefix sources look up (the approximate tree here,
 * KV events in kv-events/kv-prefix-source.ts), and the tree records: a lookup costs per prompt and
 * candidate. The rest count in the prompt's tokens as uncached everywhere.
 */
export const MAX_SCORED_PROMPTS = 64;

/**
 * A batched completions `prompt` (a list of two or more strings, or of two or more token-id lists),
 * one routing text per prompt, each as `completionPromptText` writes it and opened by the salt's
 * marker (`saltedText`: vLLM salts every prompt's first block); at most MAX_SCORED_PROMPTS of them.
 * vLLM runs each prompt as an engine request of its own, with its own prefix in the cache, so the
 * approximate tree matches and records each apart (routing/prefix-source.ts, routing/cache-aware.ts)
 * instead of their join, whose prefix is the first prompt's alone. Undefined for anything else.
 */
export function completionBatchTexts(prompt: unknown, salt: unknown): RoutingText[] | undefined {
  if (!Array.isArray(prompt) || prompt.length < 2) return undefined;
  const scored = prompt.length > MAX_SCORED_PROMPTS ? prompt.slice(0, MAX_SCORED_PROMPTS) : prompt;
  if (prompt.every((p) => typeof p === 'string')) {
    return (scored as string[]).map((p) => saltedText(p, salt));
  }
  if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
    return (scored as number[][]).map((ids) => saltedText(ids.join(' '), salt));
  }
  return undefined;
}

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** Filler characters per media token by default: the cost model's default characters per token. */
export const MEDIA_CHARS_PER_TOKEN = 4;
/** Most filler characters one request's media get (1 M characters: ~256 K tokens, past any context). */
export const MAX_MEDIA_FILL_CHARS = 1 << 20;
/** The filler (a control character no text part is likely to repeat). */
const FILL = '\u001a';

/** What a chat routing text is built with besides its messages. */
export interface ChatTextOptions {
  /** The request's `tools` (chat completion tools; the Responses API's and Anthropic's, converted). */
  readonly tools?: unknown;
  /** Whether the assistant messages' `tool_calls` are written (default true). */
  readonly toolCalls?: boolean;
  /** The media weights, or how to get them (asked once, at the first media part). */
  readonly media?: Readonly<MediaTokenOptions> | (() => Readonly<MediaTokenOptions>);
  /** Counts the media parts and the tokens they weigh, when given. */
  readonly tally?: MediaTally;
}

export function chatPromptText(messages: unknown, opts: ChatTextOptions = {}): RoutingText | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  const out = new ChatTextBuilder(opts.media ?? DEFAULT_MEDIA_TOKENS, opts.tally);
  // Templates render the tools inside their opening system block, else before the first message.
  let toolsAfter = -1;
  const first: unknown = messages[0];
  if (isRecord(first) && (first.role === 'system' || first.role === 'developer')) toolsAfter = 0;
  else appendTools(out, opts.tools);
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (!isRecord(m)) return undefined;
    const { role, content } = m;
    if (typeof role !== 'string') return undefined;
    out.append(`${role}\n`);
    if (!appendContent(out, content)) return undefined;
    if (opts.toolCalls !== false) appendToolCalls(out, m.tool_calls);
    out.append('\n');
    if (i === toolsAfter) appendTools(out, opts.tools);
  }
  return out.build();
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * `tools\n`, then each tool as one line of JSON (the templates write `tool | tojson`); nothing when
 * the request has none. A malformed list is vLLM's to refuse: whatever it holds is written.
 */
function appendTools(out: RoutingTextBuilder, tools: unknown): void {
  if (!Array.isArray(tools) || tools.length === 0) return;
  out.append('tools\n');
  for (const tool of tools) out.append(`${JSON.stringify(tool) ?? 'null'}\n`);
}

/** Each of an assistant message's tool calls: `<tool_call>NAME\n` and its arguments. */
function appendToolCalls(out: RoutingTextBuilder, calls: unknown): void {
  if (!Array.isArray(calls)) return;
  for (const call of calls) {
    const fn = isRecord(call) && isRecord(call.function) ? call.function : undefined;
    const name = typeof fn?.name === 'string' ? fn.name : '';
    out.append(`<tool_call>${name}\n`);
    const args = fn?.arguments;
    if (typeof args === 'string' || args instanceof PieceText) out.append(args);
    else if (args !== undefined) out.append(JSON.stringify(args) ?? '');
  }
}

/** The routing text builder with the request's media weights, filler budget and tally. */
class ChatTextBuilder extends RoutingTextBuilder {
  private fillLeft = MAX_MEDIA_FILL_CHARS;

  constructor(
    private media: Readonly<MediaTokenOptions> | (() => Readonly<MediaTokenOptions>),
    private readonly tally: MediaTally | undefined,
  ) {
    super(PIECE_CHARS);
  }

  /**
   * A media part of `type`: its type and a key of what it carries (media-key.ts), as vLLM hashes the
   * media, then the filler of the tokens it weighs (media-tokens.ts), within the request's budget.
   */
  appendMedia(part: Readonly<Record<string, unknown>>, type: string): void {
    const payload = mediaPayload(part, type);
    const key = mediaKey(part, type, payload);
    const t = this.tally;
    if (key === undefined) {
      this.append(`<${type}>`);
      if (t !== undefined) t.unkeyed += 1;
      return;
    }
    this.append(`<${type}:${key}>`);
    if (typeof this.media === 'function') this.media = this.media();
    const weight = mediaTokens(type, payload, this.media);
    if (t !== undefined) {
      if (weight.sized) t.sized += 1;
      else t.unsized += 1;
    }
    const perToken = this.media.charsPerToken ?? MEDIA_CHARS_PER_TOKEN;
    const chars = Math.min(this.fillLeft, Math.round(Math.max(0, Math.floor(weight.tokens)) * perToken));
    if (chars === 0) return;
    if (t !== undefined) t.tokens += Math.round(chars / perToken);
    this.fillLeft -= chars;
    appendFiller(this, chars);
  }
}

/** Appends a message's content text; false when the content has the wrong type. */
function appendContent(out: ChatTextBuilder, content: unknown): boolean {
  if (typeof content === 'string' || content instanceof PieceText) {
    out.append(content);
    return true;
  }
  // Assistant messages with tool calls may carry null content.
  if (content === null || content === undefined) return true;
  if (!Array.isArray(content)) return false;
  for (const part of content) {
    if (typeof part !== 'object' || part === null) return false;
    const { type, text } = part as { type?: unknown; text?: unknown };
    if (type === 'text' && (typeof text === 'string' || text instanceof PieceText)) out.append(text);
    else if (typeof type === 'string') out.appendMedia(part as Record<string, unknown>, type);
    else return false;
  }
  return true;
}

/**
 * `text` opened by a marker of `salt` (64 bits of hash: a salt of up to 1 KB costs a few characters);
 * `text` itself when there is no salt (absent, empty or not a string, as vLLM ignores).
 */
export function saltedText(text: RoutingText, salt: unknown): RoutingText {
  if (typeof salt !== 'string' || salt.length === 0) return text;
  const marker = `\u0000salt:${hash32(salt).toString(36)}.${hash32(`\u0001${salt}`).toString(36)}\u0000`;
  return typeof text === 'string' ? marker + text : new PieceText([marker, ...text.pieces]);
}
