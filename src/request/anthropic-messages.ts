/**
 * The chat messages an Anthropic Messages API body (`POST /v1/messages`) stands for (pure), the way
 * vLLM builds its prompt from one (vllm/entrypoints/anthropic/serving.py: it converts the request to a
 * chat completion request and renders that with the model's chat template):
 *
 *   system (top-level string or text blocks, then every `role: "system"` message's text, in order)
 *                          -> one `system` message, the texts concatenated
 *   a text block of the system that starts with `x-anthropic-billing-header` is left out: Claude Code
 *                          opens its system prompt with one, holding a per-request hash that would
 *                          defeat every prefix cache (vLLM drops it for that reason; so does this)
 *   {role, content: string}                  -> {role, content}
 *   {role, content: blocks}                  -> text blocks as text parts (one alone: a string),
 *       `image`                              -> an `image_url` part
 *       `thinking`                           -> the message's `reasoning`
 *       `tool_use` {id, name, input}         -> a tool call, arguments `input` as Python's json.dumps
 *                                               writes it (python-json.ts): what the template renders
 *       `tool_result` in a user message      -> a `tool` message of its own, before the user message
 *                                               (text parts joined by '\n'; images as a user message
 *                                               of `image_url` parts; tool references as a `tool`
 *                                               message of `tool_reference` parts)
 *       `tool_result` in another message     -> a text part `Tool result: <content>`
 *       `redacted_thinking`, `tool_reference` and unknown blocks -> nothing
 *   a user message left with no content (only tool results) is not sent itself
 *   roles `ctx` and `msg` (sent by recent Claude Code) -> `user`, as vLLM maps them
 *   tools {name, description, input_schema}  -> {type: 'function', function: {name, description,
 *                                               parameters}} (`parameters.type` 'object' by default)
 *   chat_template_kwargs (vLLM's extension)  -> the chat request's `chat_template_kwargs`
 *   output_config.effort                     -> `reasoning_effort` (which also switches thinking:
 *                                               tokenize/chat-template-args.ts)
 *   tool_choice {type: auto|any|none|tool}   -> "auto" | "required" | "none" | a named tool
 *                                               (anthropicChatFields)
 *
 * So a conversation sent through /v1/messages shares its routing text, its prompt tokens and its
 * prefix-cache blocks with the same conversation sent through /v1/chat/completions.
 *
 * Returns undefined when `messages` is missing or of the wrong shape, or `system` is neither a string
 * nor a list of blocks (the caller reports a 400); unknown fields are ignored.
 */
import { PieceText } from '../util/piece-text.js';
import { pythonJsonDumps } from './python-json.js';

type Message = Record<string, unknown>;
type Block = Record<string, unknown>;

/** A string value, or a long one the body parser kept in pieces (request/json-body.ts). */
function isText(v: unknown): v is string | PieceText {
  return typeof v === 'string' || v instanceof PieceText;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const BILLING_HEADER = 'x-anthropic-billing-header';

/** Claude Code's per-request attribution block (compared on its first characters only). */
function isBillingHeader(text: string | PieceText): boolean {
  return text.slice(0, BILLING_HEADER.length) === BILLING_HEADER;
}

const ROLES: Readonly<Record<string, string>> = {
  user: 'user',
  assistant: 'assistant',
  system: 'system',
  ctx: 'user',
  msg: 'user',
};

export function anthropicChatMessages(body: Readonly<Record<string, unknown>>): Message[] | undefined {
  const { messages } = body;
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  const roles: string[] = [];
  for (const m of messages) {
    if (!isObject(m) || typeof m.role !== 'string') return undefined;
    const role = ROLES[m.role];
    if (role === undefined) return undefined;
    if (!isText(m.content) && !isBlockList(m.content)) return undefined;
    roles.push(role);
  }
  const system: (string | PieceText)[] = [];
  const { system: top } = body;
  if (isText(top)) {
    if (top.length > 0) system.push(top);
  } else if (top !== undefined && top !== null) {
    if (!isBlockList(top)) return undefined;
    systemTexts(top, system);
  }
  for (let i = 0; i < messages.length; i++) {
    if (roles[i] !== 'system') continue;
    const content = (messages[i] as Message).content;
    if (isText(content)) system.push(content);
    else systemTexts(content as Block[], system);
  }
  const out: Message[] = [];
  if (system.length > 0) out.push({ role: 'system', content: joined(system) });
  for (let i = 0; i < messages.length; i++) {
    const role = roles[i] as string;
    if (role === 'system') continue;
    const content = (messages[i] as Message).content;
    if (isText(content)) {
      out.push({ role, content });
      continue;
    }
    const message = blocksMessage(role, content as Block[], out);
    if (!(role === 'user' && !('content' in message))) out.push(message);
  }
  return out;
}

/** The body's `tools` as chat completion tools; undefined when there are none (or not a list). */
export function anthropicChatTools(tools: unknown): unknown[] | undefined {
  if (!Array.isArray(tools)) return undefined;
  const out: unknown[] = [];
  for (const tool of tools) {
    if (!isObject(tool) || typeof tool.name !== 'string') continue;
    const schema = isObject(tool.input_schema) ? tool.input_schema : {};
    const parameters = 'type' in schema ? schema : { ...schema, type: 'object' };
    const fn: Record<string, unknown> = { name: tool.name };
    if (typeof tool.description === 'string') fn.description = tool.description;
    fn.parameters = parameters;
    out.push({ type: 'function', function: fn });
  }
  return out;
}

/**
 * The fields of a Messages body that vLLM carries into its chat request and that reach the template
 * (vllm/entrypoints/anthropic/serving.py `_build_base_request`, `_handle_output_config`,
 * `_convert_tool_choice`): without them, a request that asks for an effort or sets template kwargs
 * renders differently on the worker than here.
 */
export function anthropicChatFields(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (isObject(body.chat_template_kwargs)) out.chat_template_kwargs = body.chat_template_kwargs;
  const effort = isObject(body.output_config) ? body.output_config.effort : undefined;
  if (typeof effort === 'string') out.reasoning_effort = effort;
  const choice = isObject(body.tool_choice) ? body.tool_choice : undefined;
  if (choice !== undefined) {
    const type = choice.type;
    if (type === 'auto' || type === 'none') out.tool_choice = type;
    else if (type === 'any') out.tool_choice = 'required';
    else if (type === 'tool') out.tool_choice = { type: 'function', function: { name: choice.name } };
  }
  return out;
}

function isBlockList(v: unknown): v is Block[] {
  return Array.isArray(v) && v.every((b) => isObject(b) && typeof b.type === 'string');
}

function systemTexts(blocks: readonly Block[], into: (string | PieceText)[]): void {
  for (const b of blocks) {
    if (b.type !== 'text' || !isText(b.text) || b.text.length === 0) continue;
    if (!isBillingHeader(b.text)) into.push(b.text);
  }
}

/** Texts concatenated: a string, or a PieceText when one of them is in pieces (a long one). */
function joined(texts: readonly (string | PieceText)[]): string | PieceText {
  if (texts.every((t) => typeof t === 'string')) return texts.join('');
  const pieces: string[] = [];
  for (const t of texts) {
    if (typeof t === 'string') pieces.push(t);
    else pieces.push(...t.pieces);
  }
  return new PieceText(pieces);
}

/**
 * A message whose content is a list of blocks; the tool messages its tool results stand for are
 * pushed onto `out` first (they come before it in the conversation, as in vLLM).
 */
function blocksMessage(role: string, blocks: readonly Block[], out: Message[]): Message {
  const parts: Record<string, unknown>[] = [];
  const toolCalls: unknown[] = [];
  const reasoning: (string | PieceText)[] = [];
  for (const b of blocks) {
    switch (b.type) {
      case 'text':
        if (isText(b.text) && b.text.length > 0) parts.push({ type: 'text', text: b.text });
        break;
      case 'image':
        if (isObject(b.source)) parts.push({ type: 'image_url', image_url: { url: imageUrl(b.source) } });
        break;
      case 'thinking':
        if (isText(b.thinking)) reasoning.push(b.thinking);
        break;
      case 'tool_use':
        toolCalls.push({
          id: typeof b.id === 'string' && b.id.length > 0 ? b.id : 'call',
          type: 'function',
          function: {
            name: typeof b.name === 'string' ? b.name : '',
            arguments: pythonJsonDumps(isObject(b.input) ? b.input : {}),
          },
        });
        break;
      case 'tool_result':
        if (role === 'user') userToolResult(b, out);
        else parts.push({ type: 'text', text: `Tool result: ${resultText(b.content)}` });
        break;
      default:
        break;
    }
  }
  const message: Message = { role };
  if (reasoning.length > 0) message.reasoning = joined(reasoning);
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  if (parts.length === 1 && parts[0]?.type === 'text') message.content = parts[0].text;
  else if (parts.length > 0) message.content = parts;
  return message;
}

function userToolResult(b: Block, out: Message[]): void {
  const callId = typeof b.tool_use_id === 'string' ? b.tool_use_id : '';
  const images: string[] = [];
  const references: unknown[] = [];
  let text: string | PieceText = '';
  if (isText(b.content)) text = b.content;
  else if (Array.isArray(b.content)) {
    const texts: (string | PieceText)[] = [];
    for (const item of b.content) {
      if (!isObject(item)) continue;
      if (item.type === 'text') {
        if (texts.length > 0) texts.push('\n');
        texts.push(isText(item.text) ? item.text : '');
      } else if (item.type === 'image') images.push(imageUrl(isObject(item.source) ? item.source : {}));
      else if (item.type === 'tool_reference') {
        const name = item.tool_name ?? item.name;
        if (typeof name === 'string' && name.length > 0) references.push({ type: 'tool_reference', name });
      }
    }
    text = joined(texts);
  }
  out.push({ role: 'tool', tool_call_id: callId, content: text });
  if (images.length > 0) {
    out.push({ role: 'user', content: images.map((url) => ({ type: 'image_url', image_url: { url } })) });
  }
  if (references.length > 0) out.push({ role: 'tool', tool_call_id: callId, content: references });
}

/** A tool result's content as text, outside a user message (vLLM writes Python's str() of it). */
function resultText(content: unknown): string {
  if (isText(content)) return content.toString();
  if (content === undefined || content === null || content === '') return '';
  return JSON.stringify(content);
}

/** An image source as the URL vLLM gives the chat request: the URL itself, else a data URI. */
function imageUrl(source: Record<string, unknown>): string {
  if (source.type === 'url') return typeof source.url === 'string' ? source.url : '';
  const mediaType = typeof source.media_type === 'string' ? source.media_type : 'image/jpeg';
  const data = isText(source.data) ? source.data.toString() : '';
  return `data:${mediaType};base64,${data}`;
}
