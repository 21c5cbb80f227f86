/**
 * Classifies a request by method and path and parses the OpenAI inference bodies the router routes
 * on. Everything the client can get wrong becomes a RouterError (JSON 400) here; nothing throws past
 * this boundary with any other type.
 */
import { badRequest, RouterError } from './router-error.js';
import {
  chatPromptText,
  completionBatchTexts,
  completionEmbedsText,
  completionPromptText,
  saltedText,
} from './prompt-text.js';
import { laxInt } from './lax-int.js';
import { laxBool } from './lax-bool.js';
import { responsesChatBody, responsesMessages } from './responses-input.js';
import { anthropicChatFields, anthropicChatMessages, anthropicChatTools } from './anthropic-messages.js';
import { exceedsDepth } from './json-depth.js';
import { joinLongTexts, parseLongStringBody } from './json-body.js';
import { formBoundary, formField } from './multipart-field.js';
import type { RoutingText } from '../util/piece-text.js';
import type { MediaTally, MediaTokenOptions, MediaTokensFor } from './media-tokens.js';

export { exceedsDepth } from './json-depth.js';

/** `messages`: the Anthropic Messages API vLLM serves (`POST /v1/messages`; anthropic-messages.ts). */
export type InferenceKind = 'completions' | 'chat' | 'responses' | 'messages';

/** Which kind of inference endpoint a path is, or undefined for everything else. */
export function inferenceKind(method: string, path: string): InferenceKind | undefined {
  if (method !== 'POST') return undefined;
  const q = path.indexOf('?');
  const p = q === -1 ? path : path.slice(0, q);
  if (p === '/v1/completions') return 'completions';
  if (p === '/v1/chat/completions') return 'chat';
  if (p === '/v1/responses') return 'responses';
  if (p === '/v1/messages') return 'messages';
  return undefined;
}

/**
 * Whether a path is vLLM's Anthropic Messages API, `/v1/messages` or `/v1/messages/count_tokens`
 * (vllm/entrypoints/anthropic/api_router.py), whose clients (the Anthropic SDKs, Claude Code, which
 * counts tokens before it sends) read errors in Anthropic's shape, as vLLM answers them there.
 */
export function anthropicPath(path: string): boolean {
  const q = path.indexOf('?');
  const p = q === -1 ? path : path.slice(0, q);
  return p === '/v1/messages' || p === '/v1/messages/count_tokens';
}

export interface InferenceRequest {
  readonly kind: InferenceKind;
  readonly model: string;
  readonly stream: boolean;
  /** Routing text (see prompt-text.ts); a long one in pieces. */
  readonly text: RoutingText;
  /**
   * A batched completions request's prompts, one routing text each (prompt-text.ts
   * `completionBatchTexts`; `text` is their join); absent for everything else.
   */
  readonly prompts?: readonly RoutingText[];
  /**
   * The parsed body (callers that rewrite it copy first). Read only where the whole body is needed: a
   * long body's long texts are joined into strings on the first read (json-body.ts).
   */
  readonly json: Readonly<Record<string, unknown>>;
  /**
   * The body as the code that reads the prompt sees it (the tokenizer, request/request-tokens.ts):
   * `json` itself, except for /v1/responses, whose `instructions` and `input` it gives as the chat
   * `messages` vLLM renders them to, with the template arguments vLLM derives from the request
   * (request/responses-input.ts `responsesChatBody`), and /v1/messages, whose `system`,
   * `messages` and `tools` it gives as the chat `messages` and `tools` (request/anthropic-messages.ts).
   */
  readonly promptBody: Readonly<Record<string, unknown>>;
  /** The prompt's media parts and the tokens they weigh (request/media-tokens.ts), when it has any. */
  readonly media?: Readonly<MediaTally>;
  /** /v1/responses: the `previous_response_id` the request continues, when it names one. */
  readonly previousResponseId?: string;
  /**
   * The output tokens it asks for at most: `max_tokens`, else chat's `max_completion_tokens`, else
   * the Responses API's `max_output_tokens`; 0 when none is a non-negative integer (or unknown).
   */
  readonly outputTokens?: number;
  /**
   * /v1/responses whose response the worker stores (`store` not false) and whose `request_id` the
   * client left unset: the router may name the response (routing/response-affinity.ts).
   */
  readonly namesFreeResponse: boolean;
  /**
   * The sequences vLLM runs for it (`requestSequences`): chat's and completions' `n` times the
   * prompts of a batched completions request; 1 for everything else. Absent: 1.
   */
  readonly sequences?: number;
}

/** Most sequences one request counts for: a bound on what a hostile `n` can make a worker look like. */
export const MAX_REQUEST_SEQUENCES = 4096;

/**
 * How many sequences vLLM runs for a request: it splits parallel sampling (`n`) into `n` child
 * requests, and a completions `prompt` that is a list of prompts (strings or token-id lists) into one
 * request per prompt, each with its `n` children (vllm/v1/engine/parallel_sampling.py; its scheduler
 * counts every one of them in `vllm:num_requests_running` and `_waiting`). `n` is read as vLLM's
 * pydantic models read it (lax-int.ts: `"16"` is 16); one that is not a positive integer counts 1
 * (vLLM itself answers it with a 400). The Responses and Messages APIs have
 * no `n`. Capped at MAX_REQUEST_SEQUENCES.
 */
export function requestSequences(kind: InferenceKind, body: Readonly<Record<string, unknown>>): number {
  if (kind !== 'chat' && kind !== 'completions') return 1;
  const n = laxInt(body.n);
  const samples = n !== undefined && n >= 1 ? n : 1;
  const p = body.prompt;
  const prompts =
    kind === 'completions' && Array.isArray(p) && p.length > 0 && typeof p[0] !== 'number' ? p.length : 1;
  return Math.min(MAX_REQUEST_SEQUENCES, samples * prompts);
}

const JSON_CONTENT_TYPE = /^application\/(.+\+)?json\b/i;

/** Maximum nesting accepted before JSON.parse: protects the parser's stack from hostile bodies. */
export const MAX_JSON_DEPTH = 64;

/** How a body's routing text is written (request/prompt-text.ts). */
export interface ParseOptions {
  /** What media weigh in the routing text, per model; default DEFAULT_MEDIA_TOKENS. */
  readonly media?: MediaTokensFor;
  /**
   * Whether the request's tools and tool calls go into the routing text, as the served models' chat
   * templates render them into the prompt (default true).
   */
  readonly tools?: boolean;
}

export function parseInferenceRequest(
  kind: InferenceKind,
  contentType: string | undefined,
  body: Buffer,
  opts: ParseOptions = {},
): InferenceRequest {
  if (contentType !== undefined && !JSON_CONTENT_TYPE.test(contentType.trim())) {
    throw new RouterError(
      'invalid_content_type',
      415,
      `content-type must be application/json, got "${contentType.slice(0, 100)}"`,
    );
  }
  if (body.length === 0) throw badRequest('invalid_body', 'request body is empty');
  const { value: json, pieces } = parseJsonBody(body);
  if (typeof json !== 'object' || json === null || Array.isArray(json)) {
    throw badRequest('invalid_body', 'request body must be a JSON object');
  }
  const obj = json as Record<string, unknown>;
  // vLLM's OpenAI requests take `model: str | None`: none (absent, null or empty) is the server's own
  // model (serving_engine.py `_is_model_supported`), so the request goes to any worker ('': no model
  // to filter by). Its Messages API requires one.
  const model = obj.model ?? '';
  if (typeof model !== 'string' || (kind === 'messages' && model.length === 0)) {
    throw badRequest(
      'missing_model',
      kind === 'messages' ? '"model" must be a non-empty string' : '"model" must be a string',
    );
  }
  // vLLM's request models take `stream: Optional[bool]`: null is no stream, as absent, and pydantic
  // reads it laxly (lax-bool.ts: `"true"` streams).
  const stream = obj.stream == null ? false : laxBool(obj.stream);
  if (stream === undefined) throw badRequest('invalid_body', '"stream" must be a boolean');
  const tally: MediaTally = { sized: 0, unsized: 0, unkeyed: 0, tokens: 0 };
  const { media } = opts;
  const weights = media === undefined ? undefined : () => media(model);
  const prompt = promptText(kind, obj, { media: weights, tally, tools: opts.tools !== false });
  if (prompt === undefined) throw invalidPrompt(kind);
  // vLLM's Messages API takes no `cache_salt` (its chat request is built without one).
  const routingText = kind === 'messages' ? prompt : saltedText(prompt, obj.cache_salt);
  if (
    kind === 'responses' &&
    obj.previous_response_id != null &&
    typeof obj.previous_response_id !== 'string'
  ) {
    throw badRequest('invalid_body', '"previous_response_id" must be a string');
  }
  const parts = tally.sized + tally.unsized + tally.unkeyed > 0 ? tally : undefined;
  return new ParsedInferenceRequest(
    kind,
    model,
    stream,
    routingText,
    obj,
    pieces,
    parts,
    requestSequences(kind, obj),
    kind === 'completions' ? completionBatchTexts(obj.prompt, obj.cache_salt) : undefined,
  );
}

function promptText(
  kind: InferenceKind,
  obj: Record<string, unknown>,
  opts: {
    media: (() => Readonly<MediaTokenOptions>) | undefined;
    tally: MediaTally;
    tools: boolean;
  },
): RoutingText | undefined {
  if (kind === 'completions') {
    // vLLM takes `prompt_embeds` in place of a prompt (--enable-prompt-embeds).
    return obj.prompt == null
      ? completionEmbedsText(obj.prompt_embeds, opts.media, laxInt(obj.truncate_prompt_tokens))
      : completionPromptText(obj.prompt);
  }
  const { media, tally } = opts;
  const text = { media, tally, toolCalls: opts.tools };
  if (kind === 'chat')
    return chatPromptText(obj.messages, { ...text, tools: opts.tools ? obj.tools : undefined });
  if (kind === 'messages') {
    const tools = opts.tools ? anthropicChatTools(obj.tools) : undefined;
    return chatPromptText(anthropicChatMessages(obj), { ...text, tools });
  }
  return chatPromptText(responsesMessages(obj), { ...text, tools: opts.tools ? obj.tools : undefined });
}

function invalidPrompt(kind: InferenceKind): RouterError {
  if (kind === 'completions') {
    return badRequest(
      'invalid_prompt',
      '"prompt" must be a string, an array of strings, or an array of token ids (or of arrays of them); or "prompt_embeds" a base64 tensor (or an array of them)',
    );
  }
  if (kind === 'messages') {
    return badRequest(
      'invalid_messages',
      '"messages" must be a non-empty array of {role: "user" | "assistant", content: string | content blocks}, and "system" a string or text blocks',
    );
  }
  if (kind === 'chat') {
    return badRequest(
      'invalid_messages',
      '"messages" must be a non-empty array of {role: string, content: string | content parts}',
    );
  }
  return badRequest(
    'invalid_input',
    '"input" must be a string or a non-empty array of input items (messages, function calls, function call outputs), and "instructions" a string',
  );
}

/**
 * An InferenceRequest whose body, when it came in pieces, is joined on its first read. A class (a getter
 * on its prototype): a getter in an object literal gives every object a hidden class of its own, kept in
 * V8's old space, and with it the whole parsed body past every young-generation GC.
 */
class ParsedInferenceRequest implements InferenceRequest {
  private asChat: Readonly<Record<string, unknown>> | undefined;

  constructor(
    readonly kind: InferenceKind,
    readonly model: string,
    readonly stream: boolean,
    readonly text: RoutingText,
    private readonly body: Record<string, unknown>,
    private pieces: boolean,
    readonly media: Readonly<MediaTally> | undefined,
    readonly sequences: number,
    readonly prompts: readonly RoutingText[] | undefined,
  ) {}

  get json(): Readonly<Record<string, unknown>> {
    if (this.pieces) {
      joinLongTexts(this.body);
      this.pieces = false;
    }
    return this.body;
  }

  get promptBody(): Readonly<Record<string, unknown>> {
    if (this.kind !== 'responses' && this.kind !== 'messages') return this.json;
    // Built once, on the first read (the policies that tokenize), from the joined body.
    this.asChat ??= this.kind === 'responses' ? responsesChatBody(this.json) : messagesAsChat(this.json);
    return this.asChat;
  }

  get outputTokens(): number {
    const b = this.body;
    for (const v of [b.max_tokens, b.max_completion_tokens, b.max_output_tokens]) {
      const n = laxInt(v); // as vLLM reads it: "64" is 64
      if (n !== undefined && n >= 0) return n;
    }
    return 0;
  }

  get namesFreeResponse(): boolean {
    return (
      this.kind === 'responses' && laxBool(this.body.store) !== false && this.body.request_id === undefined
    );
  }

  get previousResponseId(): string | undefined {
    if (this.kind !== 'responses') return undefined;
    const id = this.body.previous_response_id;
    return typeof id === 'string' && id.length > 0 ? id : undefined;
  }
}

/**
 * An Anthropic Messages body as the chat body vLLM turns it into: its messages, its tools when it has
 * some, and the fields that reach the template (anthropicChatFields: `chat_template_kwargs`, the
 * effort, the tool choice). Nothing else: vLLM carries no other field that shapes the prompt (no
 * `cache_salt`, no `add_generation_prompt`) into that chat request.
 */
function messagesAsChat(json: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const chat: Record<string, unknown> = {
    messages: anthropicChatMessages(json),
    ...anthropicChatFields(json),
  };
  const tools = anthropicChatTools(json.tools);
  if (tools !== undefined) chat.tools = tools;
  return chat;
}

/**
 * The `model` a JSON request body names, for the endpoints the router does not parse otherwise
 * (`/v1/embeddings`, `/v1/rerank`, `/pooling`, `/tokenize`, ...), or the `model` field of a
 * `multipart/form-data` body (vLLM's `/v1/audio/transcriptions` and `/v1/audio/translations`;
 * multipart-field.ts), so a fleet that mixes models sends them to the workers serving it too.
 * Undefined for a body that names none: such a request goes on unparsed (the worker answers it), never
 * rejected here.
 */
export function bodyModel(contentType: string | undefined, body: Buffer): string | undefined {
  if (body.length === 0) return undefined;
  const boundary = formBoundary(contentType);
  if (boundary !== undefined) {
    const model = formField(body, boundary, 'model');
    return model !== undefined && model.length > 0 ? model : undefined;
  }
  if (contentType !== undefined && !JSON_CONTENT_TYPE.test(contentType.trim())) return undefined;
  let value: unknown;
  try {
    value = parseJsonBody(body).value;
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const model = (value as { model?: unknown }).model;
  return typeof model === 'string' && model.length > 0 ? model : undefined;
}

/**
 * The body as JSON: a large body with long string values without a body-sized string (json-body.ts;
 * `pieces`: its long texts are PieceTexts), anything else (and every malformed body, for its exact
 * error) decoded and parsed whole.
 */
function parseJsonBody(body: Buffer): { value: unknown; pieces: boolean } {
  const long = parseLongStringBody(body, MAX_JSON_DEPTH);
  if (long !== undefined) return { value: long.value, pieces: true };
  const text = decodeUtf8(body);
  if (exceedsDepth(text, MAX_JSON_DEPTH)) {
    throw badRequest('invalid_json', `request body nests deeper than ${MAX_JSON_DEPTH} levels`);
  }
  try {
    return { value: JSON.parse(text), pieces: false };
  } catch (err) {
    throw badRequest(
      'invalid_json',
      `request body is not valid JSON: ${(err as Error).message.slice(0, 200)}`,
    );
  }
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function decodeUtf8(body: Buffer): string {
  try {
    return utf8.decode(body);
  } catch {
    throw badRequest('invalid_body', 'request body is not valid UTF-8');
  }
}
