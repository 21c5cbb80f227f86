/**
 * Parses an OpenAI-style generation request the way the simulated vLLM sees it (pure).
 *
 * - `/v1/completions`: `prompt` is a string, an array of strings, an array of token ids or an array of
 *   token-id arrays. Every element of an array is a separate prompt (vLLM answers one choice per prompt).
 *   Token ids are rendered as exactly `charsPerToken` characters each (the id's two 16-bit halves, then
 *   spaces), so the prefix cache's character approximation counts one token per id.
 * - `/v1/chat/completions`: `messages` rendered through the simulator's chat template (sim-tokenizer.ts):
 *   `<|role|>\ncontent\n` per message (text parts concatenated, other parts as `<type>`), so the
 *   template adds a few tokens per message like a real one does.
 * - Output length: `max_completion_tokens` (chat), else `max_tokens`, else the simulator default; it must
 *   be a positive integer when present.
 * - Parallel sampling: `n` (default 1) choices per prompt, each a sequence of its own in the engine
 *   (vLLM splits the request into `n` child requests that share the prompt's cached blocks). It must
 *   be a positive integer when present, a string of digits read as vLLM reads it (vLLM: "n must be at
 *   least 1").
 *
 * Returns `{ error }` (a user-facing 400 message) instead of throwing.
 */
import type { ResponsesTurn } from './responses-request.js';
import { renderChatTemplate } from './sim-tokenizer.js';
import { laxInt } from '../request/lax-int.js';

/**
 * `responses`: a chat generation asked for through the Responses API (responses-request.ts);
 * `messages`: one asked for through the Anthropic Messages API (messages-api.ts).
 */
export type GenerationKind = 'completion' | 'chat' | 'responses' | 'messages';

export interface GenerationRequest {
  readonly kind: GenerationKind;
  /** Model-visible text of each prompt (`n` choices per prompt). */
  readonly prompts: readonly string[];
  /** Choices per prompt (`n`), >= 1; absent: 1. */
  readonly n?: number;
  readonly maxTokens: number;
  readonly stream: boolean;
  readonly includeUsage: boolean;
  readonly model: string | undefined;
  readonly kvTransferParams: Readonly<Record<string, unknown>> | undefined;
  /** Kind `responses` only: the turn's conversation, id and storage. */
  readonly turn?: ResponsesTurn;
  /** Kind `messages` only: the chat body the request stands for (what the prefix cache keys). */
  readonly chatBody?: Readonly<Record<string, unknown>>;
}

/**
 * The choices a request answers, each a sequence of its own: `n` per prompt (vLLM numbers a batched
 * completions request's choices prompt by prompt: index = prompt * n + sample).
 */
export function choiceCount(request: Pick<GenerationRequest, 'prompts' | 'n'>): number {
  return request.prompts.length * (request.n ?? 1);
}

export type ParseResult = { ok: true; request: GenerationRequest } | { ok: false; error: string };

export function parseGenerationRequest(
  kind: 'completion' | 'chat',
  body: unknown,
  defaultMaxTokens: number,
  charsPerToken: number,
): ParseResult {
  if (!isObject(body)) return fail('request body must be a JSON object');
  const prompts =
    kind === 'chat' ? chatPrompts(body.messages, body.tools) : completionPrompts(body.prompt, charsPerToken);
  if (typeof prompts === 'string') return fail(prompts);

  const rawMax = kind === 'chat' ? (body.max_completion_tokens ?? body.max_tokens) : body.max_tokens;
  let maxTokens = defaultMaxTokens;
  if (rawMax !== undefined && rawMax !== null) {
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < 1) {
      return fail('max_tokens must be a positive integer');
    }
    maxTokens = rawMax;
  }
  let n = 1;
  if (body.n !== undefined && body.n !== null) {
    // As vLLM's pydantic model reads it: "4" is 4 (lax-int.ts).
    const read = laxInt(body.n);
    if (read === undefined || read < 1) return fail(`n must be at least 1, got ${JSON.stringify(body.n)}.`);
    n = read;
  }
  const stream = body.stream === true;
  const options = body.stream_options;
  const includeUsage = stream && isObject(options) && options.include_usage === true;
  const kv = body.kv_transfer_params;
  if (kv !== undefined && kv !== null && !isObject(kv)) return fail('kv_transfer_params must be an object');
  return {
    ok: true,
    request: {
      kind,
      prompts,
      ...(n === 1 ? {} : { n }),
      maxTokens,
      stream,
      includeUsage,
      model: typeof body.model === 'string' ? body.model : undefined,
      kvTransferParams: isObject(kv) ? kv : undefined,
    },
  };
}

function fail(error: string): ParseResult {
  return { ok: false, error };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** One token id as exactly `charsPerToken` characters. */
export function tokenIdsText(ids: readonly number[], charsPerToken: number): string {
  const pad = ' '.repeat(Math.max(0, charsPerToken - 2));
  let out = '';
  for (const id of ids) {
    const two = String.fromCharCode(id & 0xffff, Math.floor(id / 65536) & 0xffff);
    out += charsPerToken >= 2 ? two + pad : two.slice(0, charsPerToken);
  }
  return out;
}

function completionPrompts(prompt: unknown, charsPerToken: number): string[] | string {
  const bad = 'prompt must be a string, an array of strings, or token ids';
  if (typeof prompt === 'string') return [prompt];
  if (!Array.isArray(prompt) || prompt.length === 0) return bad;
  if (prompt.every((p) => typeof p === 'string')) return prompt as string[];
  if (prompt.every(isTokenId)) return [tokenIdsText(prompt, charsPerToken)];
  if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
    return (prompt as number[][]).map((ids) => tokenIdsText(ids, charsPerToken));
  }
  return bad;
}

function chatPrompts(messages: unknown, tools: unknown): string[] | string {
  const r = renderChatTemplate(messages, { addGenerationPrompt: false, tools });
  return r.ok ? [r.text] : r.error;
}
