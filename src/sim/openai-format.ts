/**
 * OpenAI / vLLM response shapes produced by the simulator (pure string builders).
 *
 * Streaming chunks are built by concatenating a per-request precomputed JSON prefix with a
 * precomputed JSON-escaped token: one string concat per token instead of a JSON.stringify, which is the
 * simulator's hottest path under benchmark load. Output text cycles through a fixed word list.
 *
 * Shapes follow vLLM: completion chunks `object: "text_completion"`, chat chunks
 * `object: "chat.completion.chunk"` with a first `delta: {role: "assistant", content: ""}` chunk; the
 * last token carries `finish_reason: "length"` (the simulator always generates exactly max_tokens);
 * with `stream_options.include_usage` a final chunk has `choices: []` and `usage`; then `data: [DONE]`.
 * Errors use the OpenAI envelope `{"error": {message, type, param, code}}`.
 */
import type { GenerationKind } from './sim-request.js';

const WORDS = [' the', ' quick', ' brown', ' fox', ' jumps', ' over', ' a', ' lazy', ' dog', '.'];
const WORDS_JSON = WORDS.map((w) => JSON.stringify(w));

export const SSE_DONE = 'data: [DONE]\n\n';

export function tokenText(index: number): string {
  return WORDS[index % WORDS.length]!;
}

/** The JSON string literal of token `index`'s text (precomputed: per-token event builders concat it). */
export function tokenJson(index: number): string {
  return WORDS_JSON[index % WORDS_JSON.length]!;
}

export function outputText(tokens: number): string {
  let out = '';
  for (let i = 0; i < tokens; i++) out += WORDS[i % WORDS.length];
  return out;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** null when nothing was cached: vLLM sets it only `if enable_prompt_tokens_details and num_cached_tokens`. */
  prompt_tokens_details: { cached_tokens: number } | null;
}

export function usageOf(promptTokens: number, completionTokens: number, cachedTokens: number): Usage {
  return {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
    prompt_tokens_details: cachedTokens > 0 ? { cached_tokens: cachedTokens } : null,
  };
}

const ERROR_TYPES: Record<number, string> = {
  400: 'BadRequestError',
  401: 'AuthenticationError',
  403: 'PermissionDeniedError',
  404: 'NotFoundError',
  405: 'MethodNotAllowedError',
  413: 'RequestTooLargeError',
  429: 'RateLimitError',
  503: 'ServiceUnavailableError',
};

/** vLLM's error type for an HTTP status (`BadRequestError`, ...). */
export function errorType(status: number): string {
  return ERROR_TYPES[status] ?? (status >= 500 ? 'InternalServerError' : 'BadRequestError');
}

export function errorBody(status: number, message: string): string {
  return JSON.stringify({ error: { message, type: errorType(status), param: null, code: status } });
}

export interface ResponseIdentity {
  readonly kind: GenerationKind;
  /** Response id, e.g. `cmpl-<request id>`. */
  readonly id: string;
  readonly created: number;
  readonly model: string;
}

export function responseId(kind: GenerationKind, requestId: string): string {
  // A Messages answer keeps the id of the chat completion vLLM made it from.
  return `${kind === 'chat' || kind === 'messages' ? 'chatcmpl' : 'cmpl'}-${requestId}`;
}

/** The non-streaming JSON body (`kvTransferParams` only from a prefill worker). */
export function completionBody(
  ident: ResponseIdentity,
  choices: number,
  completionTokens: number,
  usage: Usage,
  kvTransferParams: Record<string, unknown> | undefined,
): string {
  const text = outputText(completionTokens);
  const list = [];
  for (let index = 0; index < choices; index++) {
    list.push(
      ident.kind === 'chat'
        ? {
            index,
            message: { role: 'assistant', content: text },
            logprobs: null,
            finish_reason: 'length',
          }
        : { index, text, logprobs: null, finish_reason: 'length' },
    );
  }
  const body: Record<string, unknown> = {
    id: ident.id,
    object: ident.kind === 'chat' ? 'chat.completion' : 'text_completion',
    created: ident.created,
    model: ident.model,
    choices: list,
    usage,
  };
  if (kvTransferParams) body.kv_transfer_params = kvTransferParams;
  return JSON.stringify(body);
}

/** Builds the SSE events of one streaming response. */
export class StreamFormatter {
  private readonly head: string;

  constructor(private readonly ident: ResponseIdentity) {
    const object = ident.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    this.head =
      `data: {"id":${JSON.stringify(ident.id)},"object":"${object}","created":${ident.created},` +
      `"model":${JSON.stringify(ident.model)},"choices":[{"index":`;
  }

  /** Chat only: the opening `delta.role` chunk. */
  roleChunk(choice: number): string {
    return `${this.head}${choice},"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n`;
  }

  tokenChunk(choice: number, tokenIndex: number, last: boolean): string {
    const word = WORDS_JSON[tokenIndex % WORDS_JSON.length]!;
    const finish = last ? '"length"' : 'null';
    return this.ident.kind === 'chat'
      ? `${this.head}${choice},"delta":{"content":${word}},"logprobs":null,"finish_reason":${finish}}]}\n\n`
      : `${this.head}${choice},"text":${word},"logprobs":null,"finish_reason":${finish}}]}\n\n`;
  }

  usageChunk(usage: Usage): string {
    const object = this.ident.kind === 'chat' ? 'chat.completion.chunk' : 'text_completion';
    return `data: ${JSON.stringify({
      id: this.ident.id,
      object,
      created: this.ident.created,
      model: this.ident.model,
      choices: [],
      usage,
    })}\n\n`;
  }
}
