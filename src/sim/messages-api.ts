/**
 * The Anthropic Messages API (`POST /v1/messages`) as vLLM serves it (vllm/entrypoints/anthropic), for
 * the simulator: the request parsed into a chat generation, the answers built as vLLM writes them
 * (pure).
 *
 * - Request: `model`, `messages` (non-empty), `max_tokens` (required, positive) as vLLM validates them;
 *   the conversation becomes chat messages the way vLLM converts it (request/anthropic-messages.ts: the
 *   router's own reading of it, so both sides agree on what a prompt is) and is rendered with the
 *   simulator's chat template as a chat request's messages are (sim-request.ts): the same
 *   conversation sent either way is the same prompt. The prefix cache keys it as that chat body,
 *   tools included (`chatBody`). `stream`, `kv_transfer_params` as for chat. No
 *   `priority` and no `cache_salt`: vLLM's Messages request has neither.
 * - JSON answer: `{id, type: 'message', role: 'assistant', content: [{type: 'text', text}], model,
 *   stop_reason: 'max_tokens', usage: {input_tokens, output_tokens}}`, plus `kv_transfer_params` from a
 *   prefill worker.
 * - Stream: NAMED SSE events, `event: <type>\ndata: <json>\n\n`: `message_start` (usage with the
 *   input tokens), `content_block_start` (an empty text block), one `content_block_delta`
 *   (`text_delta`) per token, `content_block_stop`, `message_delta` (stop reason and usage),
 *   `message_stop`. No `data: [DONE]`.
 * - Errors: `{type: 'error', error: {type, message}}`, vLLM's OpenAI error type carried over.
 */
import { anthropicChatMessages, anthropicChatTools } from '../request/anthropic-messages.js';
import { errorType, tokenJson } from './openai-format.js';
import type { ParseResult } from './sim-request.js';
import { renderChatTemplate } from './sim-tokenizer.js';

export const MESSAGES_PATH = '/v1/messages';

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export function parseMessagesRequest(body: unknown): ParseResult {
  if (!isObject(body)) return { ok: false, error: 'request body must be a JSON object' };
  if (typeof body.model !== 'string' || body.model.length === 0) {
    return { ok: false, error: 'model: Model is required' };
  }
  const max = body.max_tokens;
  if (typeof max !== 'number' || !Number.isInteger(max) || max < 1) {
    return { ok: false, error: 'max_tokens: must be a positive integer' };
  }
  const messages = anthropicChatMessages(body);
  if (messages === undefined) return { ok: false, error: 'messages: invalid or empty' };
  const tools = anthropicChatTools(body.tools);
  const rendered = renderChatTemplate(messages, { addGenerationPrompt: false, tools });
  if (!rendered.ok) return { ok: false, error: rendered.error };
  const kv = body.kv_transfer_params;
  if (kv !== undefined && kv !== null && !isObject(kv)) {
    return { ok: false, error: 'kv_transfer_params must be an object' };
  }
  const stream = body.stream === true;
  return {
    ok: true,
    request: {
      kind: 'messages',
      prompts: [rendered.text],
      maxTokens: max,
      stream,
      includeUsage: stream,
      model: body.model,
      kvTransferParams: isObject(kv) ? kv : undefined,
      chatBody: chatBody(messages, tools),
    },
  };
}

/** The chat body vLLM renders (tools included: the template may render them). */
function chatBody(messages: unknown[], tools: unknown[] | undefined): Record<string, unknown> {
  return tools === undefined ? { messages } : { messages, tools };
}

export interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
}

/** The JSON answer (`kvTransferParams` only from a prefill worker). */
export function messagesBody(
  id: string,
  model: string,
  text: string,
  usage: MessagesUsage,
  kvTransferParams: Record<string, unknown> | undefined,
): string {
  const body: Record<string, unknown> = {
    id,
    type: 'message',
    role: 'assistant',
    content: [{ type: 'text', text }],
    model,
    stop_reason: 'max_tokens',
    usage,
  };
  if (kvTransferParams) body.kv_transfer_params = kvTransferParams;
  return JSON.stringify(body);
}

export function messagesErrorBody(status: number, message: string): string {
  return JSON.stringify({ type: 'error', error: { type: errorType(status), message } });
}

function event(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

/** The events of one streamed answer; the per-token delta is a precomputed prefix + the token's JSON. */
export class MessagesStreamFormatter {
  private static readonly DELTA =
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":';

  constructor(
    private readonly id: string,
    private readonly model: string,
  ) {}

  /** message_start and the opening of the text block, sent with the first token. */
  opening(inputTokens: number): string[] {
    const message = {
      id: this.id,
      type: 'message',
      role: 'assistant',
      content: [],
      model: this.model,
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: inputTokens, output_tokens: 0 },
    };
    return [
      event('message_start', { type: 'message_start', message }),
      event('content_block_start', {
        type: 'content_block_start',
        index: 0,
        content_block: { type: 'text', text: '' },
      }),
    ];
  }

  delta(tokenIndex: number): string {
    return `${MessagesStreamFormatter.DELTA}${tokenJson(tokenIndex)}}}\n\n`;
  }

  /** The block's end, the stop reason with the usage, and message_stop. */
  closing(usage: MessagesUsage): string[] {
    return [
      event('content_block_stop', { type: 'content_block_stop', index: 0 }),
      event('message_delta', { type: 'message_delta', delta: { stop_reason: 'max_tokens' }, usage }),
      event('message_stop', { type: 'message_stop' }),
    ];
  }
}
