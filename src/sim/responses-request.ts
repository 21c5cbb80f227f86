/**
 * Parses a `POST /v1/responses` body the way vLLM's OpenAI Responses API does, and turns it into the
 * simulator's chat generation (pure): a Responses request is a chat request with another input shape.
 *
 * Input -> chat messages (vLLM `_construct_input_messages`, non-Harmony models):
 * - `instructions` (a non-empty string) -> the first message, role `system`;
 * - `input` a string -> one `user` message;
 * - `input` an array of items:
 *   - `{type?: 'message', role: user|system|developer|assistant, content}`: `content` a string, or parts
 *     where `input_text` / `output_text` become chat `text` parts, `input_image` -> `image_url`,
 *     `input_file` -> `file` and any other part keeps its type (the chat template renders every non-text
 *     part as `<type>`);
 *   - `{type: 'function_call', call_id, name, arguments}` -> an assistant message with one `tool_calls`
 *     entry;
 *   - `{type: 'function_call_output', call_id, output}` -> a `tool` message;
 *   - `{type: 'reasoning'}` -> skipped; any other item type -> 400.
 * - `previous_response_id`: the stored previous turn's conversation, then its output as an assistant
 *   message, then the new input. New `instructions` replace the stored leading system message; without
 *   them the stored one stays (so a chain that repeats its instructions keeps one prefix).
 *
 * The conversation is rendered with the simulator's chat template exactly as a chat request's
 * `messages` are (sim-request.ts), so the same conversation sent either way has the same prompt text,
 * prompt tokens, prefix-cache blocks and KV events.
 *
 * Returns `{ error }` (a user-facing 400 message) instead of throwing.
 */
import { randomUUID } from 'node:crypto';
import type { GenerationRequest } from './sim-request.js';
import { renderChatTemplate } from './sim-tokenizer.js';
import { responsesChatTools } from '../request/responses-input.js';

/** One chat message as the chat template reads it. */
export type ChatMessage = Readonly<Record<string, unknown>>;

/** What a Responses body asks for, before the previous turn (if any) is looked up. */
export interface ResponsesInput {
  /** The response id: the body's `request_id` (a vLLM extra parameter), else `resp_<32 hex>`. */
  readonly id: string;
  readonly instructions: string | undefined;
  /** The new input as chat messages (without the instructions). */
  readonly messages: readonly ChatMessage[];
  readonly previousResponseId: string | undefined;
  readonly store: boolean;
  readonly maxTokens: number;
  readonly stream: boolean;
  readonly model: string | undefined;
  readonly kvTransferParams: Readonly<Record<string, unknown>> | undefined;
  readonly cacheSalt: string | undefined;
  /**
   * The request's function tools as vLLM hands them to the template (request/responses-input.ts); a
   * follow-up's own, not its previous turn's.
   */
  readonly tools: readonly unknown[] | undefined;
}

/** The stored part of an earlier turn that a follow-up continues. */
export interface PreviousTurn {
  /** The conversation that turn was generated from (its instructions first, when it had them). */
  readonly messages: readonly ChatMessage[];
  /** Its generated text. */
  readonly outputText: string;
}

/** A Responses turn, carried by its GenerationRequest (`kind: 'responses'`). */
export interface ResponsesTurn {
  readonly id: string;
  /** The whole conversation the prompt renders, previous turns included. */
  readonly messages: readonly ChatMessage[];
  readonly instructions: string | undefined;
  readonly previousResponseId: string | undefined;
  readonly store: boolean;
  /** The chat body the prompt's token ids come from (KV events): the same ids a chat request gets. */
  readonly chatBody: Readonly<Record<string, unknown>>;
}

export type ResponsesParse = { ok: true; input: ResponsesInput } | { ok: false; error: string };

export function parseResponsesRequest(body: unknown, defaultMaxTokens: number): ResponsesParse {
  if (!isObject(body)) return fail('request body must be a JSON object');
  const messages = inputMessages(body.input);
  if (typeof messages === 'string') return fail(messages);

  const rawMax = body.max_output_tokens;
  let maxTokens = defaultMaxTokens;
  if (rawMax !== undefined && rawMax !== null) {
    if (typeof rawMax !== 'number' || !Number.isInteger(rawMax) || rawMax < 1) {
      return fail('max_output_tokens must be a positive integer');
    }
    maxTokens = rawMax;
  }
  const instructions = optionalString(body.instructions);
  if (instructions === false) return fail('instructions must be a string');
  const previousResponseId = optionalString(body.previous_response_id);
  if (previousResponseId === false) return fail('previous_response_id must be a string');
  const requestId = optionalString(body.request_id);
  if (requestId === false || requestId === '') return fail('request_id must be a non-empty string');
  const store = body.store ?? true;
  if (typeof store !== 'boolean') return fail('store must be a boolean');
  const kv = body.kv_transfer_params;
  if (kv !== undefined && kv !== null && !isObject(kv)) return fail('kv_transfer_params must be an object');
  const salt = body.cache_salt;
  return {
    ok: true,
    input: {
      id: requestId ?? newResponseId(),
      instructions: instructions === '' ? undefined : instructions,
      messages,
      previousResponseId,
      store,
      maxTokens,
      stream: body.stream === true,
      model: typeof body.model === 'string' ? body.model : undefined,
      kvTransferParams: isObject(kv) ? kv : undefined,
      cacheSalt: typeof salt === 'string' && salt.length > 0 ? salt : undefined,
      tools: responsesChatTools(body.tools),
    },
  };
}

/**
 * The chat generation of a parsed Responses request: its conversation (after `previous`, the turn
 * `previous_response_id` names) rendered as the chat path renders `messages`.
 */
export function responsesGeneration(
  input: ResponsesInput,
  previous: PreviousTurn | undefined,
): { ok: true; request: GenerationRequest } | { ok: false; error: string } {
  const messages = conversationOf(input, previous);
  if (messages.length === 0) return fail('input must not be empty');
  const rendered = renderChatTemplate(messages, { addGenerationPrompt: false, tools: input.tools });
  if (!rendered.ok) return fail(rendered.error);
  const chatBody: Record<string, unknown> = { messages };
  if (input.cacheSalt !== undefined) chatBody.cache_salt = input.cacheSalt;
  if (input.tools !== undefined) chatBody.tools = input.tools;
  return {
    ok: true,
    request: {
      kind: 'responses',
      prompts: [rendered.text],
      maxTokens: input.maxTokens,
      stream: input.stream,
      includeUsage: false,
      model: input.model,
      kvTransferParams: input.kvTransferParams,
      turn: {
        id: input.id,
        messages,
        instructions: input.instructions,
        previousResponseId: input.previousResponseId,
        store: input.store,
        chatBody,
      },
    },
  };
}

/** `resp_` + the 32 hex digits of a random uuid (vLLM's default request_id). */
export function newResponseId(): string {
  return `resp_${randomUUID().replaceAll('-', '')}`;
}

/** `msg_` + 32 hex digits: the id of an output message item. */
export function newMessageItemId(): string {
  return `msg_${randomUUID().replaceAll('-', '')}`;
}

function conversationOf(input: ResponsesInput, previous: PreviousTurn | undefined): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (input.instructions !== undefined) out.push({ role: 'system', content: input.instructions });
  if (previous !== undefined) {
    const earlier = previous.messages;
    const skip = input.instructions !== undefined && earlier[0]?.role === 'system' ? 1 : 0;
    for (let i = skip; i < earlier.length; i++) out.push(earlier[i]!);
    out.push({ role: 'assistant', content: previous.outputText });
  }
  for (const m of input.messages) out.push(m);
  return out;
}

const MESSAGE_ROLES = new Set(['user', 'system', 'developer', 'assistant']);

/** Responses content part types renamed to the chat part type vLLM converts them to. */
const CHAT_PART_TYPE: Readonly<Record<string, string>> = {
  input_image: 'image_url',
  input_file: 'file',
};

function inputMessages(input: unknown): ChatMessage[] | string {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  if (input === undefined || input === null) return 'input is required';
  if (!Array.isArray(input)) return 'input must be a string or an array of input items';
  const out: ChatMessage[] = [];
  for (let i = 0; i < input.length; i++) {
    const m = inputItem(input[i]);
    if (typeof m === 'string') return `input[${i}]: ${m}`;
    if (m !== undefined) out.push(m);
  }
  return out;
}

/** One input item as a chat message; undefined for an item that renders nothing (reasoning). */
function inputItem(item: unknown): ChatMessage | undefined | string {
  if (!isObject(item)) return 'an input item must be an object';
  const type = item.type ?? 'message';
  switch (type) {
    case 'message': {
      if (typeof item.role !== 'string' || !MESSAGE_ROLES.has(item.role)) {
        return 'a message needs a role of user, system, developer or assistant';
      }
      const content = messageContent(item.content);
      if (content === undefined) return 'a message needs string content or an array of content parts';
      return { role: item.role, content };
    }
    case 'function_call':
      if (typeof item.call_id !== 'string' || typeof item.name !== 'string') {
        return 'a function_call needs a string call_id and name';
      }
      if (typeof item.arguments !== 'string') return 'a function_call needs string arguments';
      return {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } },
        ],
      };
    case 'function_call_output': {
      if (typeof item.call_id !== 'string') return 'a function_call_output needs a string call_id';
      const content = messageContent(item.output);
      if (content === undefined) return 'a function_call_output needs string output or content parts';
      return { role: 'tool', tool_call_id: item.call_id, content };
    }
    case 'reasoning':
      return undefined;
    default:
      return `unsupported input item type ${JSON.stringify(type)}`;
  }
}

/** A string, or parts converted to chat parts; undefined when neither. */
function messageContent(content: unknown): string | Array<Record<string, unknown>> | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  const parts: Array<Record<string, unknown>> = [];
  for (const part of content) {
    if (!isObject(part) || typeof part.type !== 'string') return undefined;
    if (part.type === 'input_text' || part.type === 'output_text') {
      if (typeof part.text !== 'string') return undefined;
      parts.push({ type: 'text', text: part.text });
    } else parts.push({ ...part, type: CHAT_PART_TYPE[part.type] ?? part.type });
  }
  return parts;
}

/** The string, undefined when absent or null, false when of another type. */
function optionalString(v: unknown): string | undefined | false {
  if (v === undefined || v === null) return undefined;
  return typeof v === 'string' ? v : false;
}

function fail(error: string): { ok: false; error: string } {
  return { ok: false, error };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
