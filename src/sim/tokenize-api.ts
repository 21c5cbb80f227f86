/**
 * vLLM's `POST /tokenize` and `POST /detokenize` (its OpenAI server's tokenization endpoints), as pure
 * functions from the parsed JSON body to a status and a JSON body. The simulator serves them so routers
 * that tokenize through their workers (the reference vllm-router's cache_aware does) work against it.
 *
 * Request / response shapes (vLLM `TokenizeCompletionRequest`, `TokenizeChatRequest`,
 * `TokenizeResponse`, `DetokenizeRequest`, `DetokenizeResponse`):
 * - `/tokenize` with `prompt` (string): `add_special_tokens` (default true), `return_token_strs`
 *   (default false).
 * - `/tokenize` with `messages` (the chat form, chosen whenever `messages` is present): rendered through
 *   the chat template first; `add_generation_prompt` (default true), `continue_final_message` (default
 *   false; not together with add_generation_prompt), `add_special_tokens` (default false: the template
 *   already holds them), `return_token_strs`, `tools` (rendered as the template renders them,
 *   sim-tokenizer.ts), `documents` and `chat_template_kwargs` (template variables, as vLLM passes them:
 *   tokenize/chat-template-args.ts). Other template extras vLLM accepts (`chat_template`,
 *   `mm_processor_kwargs`) are accepted and ignored.
 * - Answer: `{count, max_model_len, tokens, token_strs}` (`token_strs` null unless asked for, as
 *   vLLM's model_dump() writes it).
 * - `/detokenize`: `{tokens: int[]}` -> `{prompt}`.
 * - `model` is optional and not checked (the simulator serves any model name, as on its generation
 *   endpoints).
 * Errors are 400 with the OpenAI error envelope (openai-format.ts), like vLLM's validation errors.
 *
 * `tokenizeResponse` / `detokenizeResponse` are pure; `serveTokenization` is the node:http glue (reads
 * the body up to a limit, 413 past it, 400 on invalid JSON).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { errorBody } from './openai-format.js';
import { readBody } from './read-body.js';
import type { SimTokenizer } from './sim-tokenizer.js';
import { chatTemplateArgs } from '../tokenize/chat-template-args.js';

export interface TokenizeApiResult {
  readonly status: number;
  /** JSON text. */
  readonly body: string;
}

function bad(message: string): TokenizeApiResult {
  return { status: 400, body: errorBody(400, message) };
}

function optionalBool(body: Record<string, unknown>, key: string, dflt: boolean): boolean | string {
  const v = body[key];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') return `${key} must be a boolean`;
  return v;
}

export function tokenizeResponse(
  body: unknown,
  tokenizer: SimTokenizer,
  maxModelLen: number,
): TokenizeApiResult {
  if (!isObject(body)) return bad('request body must be a JSON object');
  const chat = body.messages !== undefined;
  const strs = optionalBool(body, 'return_token_strs', false);
  if (typeof strs === 'string') return bad(strs);
  const special = optionalBool(body, 'add_special_tokens', !chat);
  if (typeof special === 'string') return bad(special);
  let text: string;
  if (chat) {
    const gen = optionalBool(body, 'add_generation_prompt', true);
    if (typeof gen === 'string') return bad(gen);
    const cont = optionalBool(body, 'continue_final_message', false);
    if (typeof cont === 'string') return bad(cont);
    // The flags above are validated only (400 on a non-boolean); chatTemplateArgs reads them again over
    // chat_template_kwargs' own, as vLLM hands them to the template.
    const args = chatTemplateArgs(body);
    const r = tokenizer.renderChat(body.messages, {
      addGenerationPrompt: args.addGenerationPrompt,
      continueFinalMessage: args.continueFinalMessage,
      tools: body.tools,
      ...(args.variables !== undefined ? { variables: args.variables } : {}),
    });
    if (!r.ok) return bad(r.error);
    text = r.text;
  } else {
    if (typeof body.prompt !== 'string') return bad('prompt must be a string (or send messages)');
    text = body.prompt;
  }
  const tokens = tokenizer.encode(text, special);
  return {
    status: 200,
    body: JSON.stringify({
      count: tokens.length,
      max_model_len: maxModelLen,
      tokens,
      token_strs: strs ? tokens.map((id) => tokenizer.tokenString(id)) : null,
    }),
  };
}

export function detokenizeResponse(body: unknown, tokenizer: SimTokenizer): TokenizeApiResult {
  if (!isObject(body)) return bad('request body must be a JSON object');
  const tokens = body.tokens;
  if (!Array.isArray(tokens) || !tokens.every((t) => typeof t === 'number' && Number.isInteger(t))) {
    return bad('tokens must be an array of integers');
  }
  try {
    return { status: 200, body: JSON.stringify({ prompt: tokenizer.decode(tokens as number[]) }) };
  } catch (err) {
    if (err instanceof RangeError) return bad(err.message);
    throw err;
  }
}

export function isTokenizationPath(path: string): boolean {
  return path === '/tokenize' || path === '/detokenize';
}

/** Reads the request body and answers `path` (/tokenize or /detokenize). */
export function serveTokenization(
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
  tokenizer: SimTokenizer,
  maxModelLen: number,
  maxBodyBytes: number,
): void {
  readBody(req, maxBodyBytes, (raw) => {
    if (res.destroyed) return;
    let result: TokenizeApiResult;
    if (raw === undefined) result = { status: 413, body: errorBody(413, 'request body too large') };
    else {
      let body: unknown;
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        result = bad('invalid JSON body');
      }
      result ??=
        path === '/tokenize'
          ? tokenizeResponse(body, tokenizer, maxModelLen)
          : detokenizeResponse(body, tokenizer);
    }
    res.writeHead(result.status, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(result.body),
    });
    res.end(result.body);
  });
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
