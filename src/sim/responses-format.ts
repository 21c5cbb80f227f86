/**
 * The OpenAI Responses API shapes the simulator answers `/v1/responses` with, as vLLM writes them
 * (pure builders).
 *
 * - The response object: `{id, object: 'response', created_at, model, status, output, usage, ...}` with
 *   one output item, an assistant `message` holding one `output_text` part (the generated text).
 *   `usage` is `{input_tokens, input_tokens_details: {cached_tokens}, output_tokens,
 *   output_tokens_details: {reasoning_tokens: 0}, total_tokens}`.
 * - A stream is a sequence of NAMED SSE events (`event: <type>\ndata: <json>\n\n`), each carrying its
 *   type and a `sequence_number` counting from 0: `response.created`, `response.in_progress` (both
 *   with the response `in_progress`, no output yet), `response.output_item.added`,
 *   `response.content_part.added`, one `response.output_text.delta` per token,
 *   `response.output_text.done`, `response.content_part.done`, `response.output_item.done`,
 *   `response.completed` (the full response, usage included). There is no `data: [DONE]`.
 *
 * The per-token delta event is a precomputed prefix + the sequence number + a fixed middle + the
 * token's precomputed JSON text (openai-format.ts), the same trick as the chat chunks: no
 * JSON.stringify on the per-token path.
 */
import { tokenJson } from './openai-format.js';

/** What every shape of one response repeats. */
export interface ResponseHead {
  readonly id: string;
  /** Unix seconds. */
  readonly createdAt: number;
  readonly model: string;
  readonly previousResponseId: string | undefined;
  readonly store: boolean;
  readonly instructions: string | undefined;
  readonly maxOutputTokens: number;
}

export interface ResponsesUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export function responsesUsage(
  inputTokens: number,
  outputTokens: number,
  cachedTokens: number,
): ResponsesUsage {
  return {
    input_tokens: inputTokens,
    input_tokens_details: { cached_tokens: cachedTokens },
    output_tokens: outputTokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: inputTokens + outputTokens,
  };
}

type Status = 'in_progress' | 'completed';

/** The response object (`kvTransferParams` only from a prefill worker). */
export function responseObject(
  head: ResponseHead,
  status: Status,
  output: readonly unknown[],
  usage: ResponsesUsage | null,
  kvTransferParams?: Record<string, unknown>,
): Record<string, unknown> {
  const body: Record<string, unknown> = {
    id: head.id,
    object: 'response',
    created_at: head.createdAt,
    model: head.model,
    status,
    output,
    usage,
    previous_response_id: head.previousResponseId ?? null,
    store: head.store,
    instructions: head.instructions ?? null,
    max_output_tokens: head.maxOutputTokens,
    incomplete_details: null,
  };
  if (kvTransferParams) body.kv_transfer_params = kvTransferParams;
  return body;
}

/** The completed response: one assistant message with `text`. */
export function completedResponse(
  head: ResponseHead,
  itemId: string,
  text: string,
  usage: ResponsesUsage,
  kvTransferParams?: Record<string, unknown>,
): Record<string, unknown> {
  return responseObject(head, 'completed', [messageItem(itemId, 'completed', text)], usage, kvTransferParams);
}

function textPart(text: string): Record<string, unknown> {
  return { type: 'output_text', text, annotations: [] };
}

function messageItem(itemId: string, status: Status, text: string | undefined): Record<string, unknown> {
  return {
    id: itemId,
    type: 'message',
    role: 'assistant',
    status,
    content: text === undefined ? [] : [textPart(text)],
  };
}

/** Builds the named SSE events of one streamed response, numbering them in the order they are built. */
export class ResponsesStreamFormatter {
  private seq = 0;
  private readonly deltaHead =
    'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":';
  private readonly deltaMid: string;

  constructor(
    private readonly head: ResponseHead,
    private readonly itemId: string,
  ) {
    this.deltaMid = `,"item_id":${JSON.stringify(itemId)},"output_index":0,"content_index":0,"delta":`;
  }

  /** Events built so far (the next sequence number). */
  get sequence(): number {
    return this.seq;
  }

  /** `response.created` and `response.in_progress`: what vLLM sends before the first token. */
  opening(): string[] {
    const response = responseObject(this.head, 'in_progress', [], null);
    return [this.event('response.created', { response }), this.event('response.in_progress', { response })];
  }

  /** `response.output_item.added` and `response.content_part.added`, before the first delta. */
  itemOpening(): string[] {
    return [
      this.event('response.output_item.added', {
        output_index: 0,
        item: messageItem(this.itemId, 'in_progress', undefined),
      }),
      this.event('response.content_part.added', {
        item_id: this.itemId,
        output_index: 0,
        content_index: 0,
        part: textPart(''),
      }),
    ];
  }

  /** `response.output_text.delta` of token `index`. */
  delta(index: number): string {
    return `${this.deltaHead}${this.seq++}${this.deltaMid}${tokenJson(index)},"logprobs":[]}\n\n`;
  }

  /** The completed response object this stream ends with. */
  completed(text: string, usage: ResponsesUsage): Record<string, unknown> {
    return completedResponse(this.head, this.itemId, text, usage);
  }

  /** The closing events; `response` is the completed response object (`completed`). */
  closing(text: string, response: Record<string, unknown>): string[] {
    const at = { item_id: this.itemId, output_index: 0, content_index: 0 };
    return [
      this.event('response.output_text.done', { ...at, text, logprobs: [] }),
      this.event('response.content_part.done', { ...at, part: textPart(text) }),
      this.event('response.output_item.done', {
        output_index: 0,
        item: messageItem(this.itemId, 'completed', text),
      }),
      this.event('response.completed', { response }),
    ];
  }

  private event(type: string, payload: Record<string, unknown>): string {
    const data = JSON.stringify({ type, sequence_number: this.seq++, ...payload });
    return `event: ${type}\ndata: ${data}\n\n`;
  }
}
