/**
 * The chat messages a `POST /v1/responses` body stands for (pure), the way vLLM builds its prompt
 * from one (vllm/entrypoints/openai/responses): `instructions` first, as a `system` message, then
 * `input`, which is a string (one `user` message) or a list of items:
 *
 *   {type?: 'message', role, content}        content a string, or parts: `input_text` / `output_text`
 *                                             become text parts, any other part (`input_image`,
 *                                             `input_file`, ...) stays as it is, a non-text part
 *   {type: 'function_call', call_id, name, arguments}   an assistant message with one tool call
 *   {type: 'function_call_output', call_id, output}     a `tool` message; `output` a string, or
 *                                             content parts as a message's (the SDK's
 *                                             `ResponseFunctionCallOutputItemList`: a tool's text,
 *                                             images, files), which vLLM passes on as the content
 *   {type: 'reasoning' | 'item_reference' | ...}        left out (no prompt text of its own here)
 *
 * vLLM renders these messages with the model's chat template, as it renders /v1/chat/completions, so a
 * conversation sent either way shares its prompt prefix, its prefix-cache blocks and its routing text.
 * What `previous_response_id` adds (the stored earlier turns) lives on the worker that stored it and
 * is not part of this: such a request is routed to that worker (routing/response-affinity.ts).
 *
 * Returns undefined when `input` is missing or of the wrong shape (the caller reports a 400).
 */
import { PieceText } from '../util/piece-text.js';

type Message = Record<string, unknown>;

/** A string value, or a long one the body parser kept in pieces (request/json-body.ts). */
function isText(v: unknown): v is string | PieceText {
  return typeof v === 'string' || v instanceof PieceText;
}

export function responsesMessages(body: Readonly<Record<string, unknown>>): Message[] | undefined {
  const { instructions, input } = body;
  if (instructions !== undefined && instructions !== null && !isText(instructions)) return undefined;
  const out: Message[] = [];
  if (isText(instructions) && instructions.length > 0) {
    out.push({ role: 'system', content: instructions });
  }
  if (isText(input)) {
    out.push({ role: 'user', content: input });
    return out;
  }
  if (!Array.isArray(input) || input.length === 0) return undefined;
  for (const item of input) {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return undefined;
    const message = itemMessage(item as Record<string, unknown>);
    if (message === undefined) return undefined;
    if (message !== SKIP) out.push(message);
  }
  return out.length > 0 ? out : undefined;
}

const SKIP: Message = Object.freeze({});

/** One input item as a chat message, SKIP when it has no prompt text, undefined when malformed. */
function itemMessage(item: Record<string, unknown>): Message | undefined {
  const type = item.type ?? 'message';
  if (type === 'message') {
    if (typeof item.role !== 'string') return undefined;
    const content = messageContent(item.content);
    return content === undefined ? undefined : { role: item.role, content };
  }
  if (type === 'function_call') {
    if (typeof item.name !== 'string' || !isText(item.arguments)) return undefined;
    const call = {
      id: item.call_id,
      type: 'function',
      function: { name: item.name, arguments: item.arguments },
    };
    return { role: 'assistant', content: null, tool_calls: [call] };
  }
  if (type === 'function_call_output') {
    const content = messageContent(item.output);
    return content === undefined ? undefined : { role: 'tool', tool_call_id: item.call_id, content };
  }
  return typeof type === 'string' ? SKIP : undefined;
}

function messageContent(content: unknown): unknown {
  if (isText(content)) return content;
  if (!Array.isArray(content)) return undefined;
  const parts: unknown[] = [];
  for (const part of content) {
    if (typeof part !== 'object' || part === null) return undefined;
    const { type, text } = part as { type?: unknown; text?: unknown };
    if (typeof type !== 'string') return undefined;
    if (type === 'input_text' || type === 'output_text' || type === 'text') {
      if (!isText(text)) return undefined;
      parts.push({ type: 'text', text });
    } else {
      // A media part keeps its payload: the routing text keys it (request/media-key.ts).
      parts.push(part);
    }
  }
  return parts;
}

/**
 * Chat completion fields that shape a prompt and that vLLM's ResponsesRequest does not have: a
 * /v1/responses body that carries them renders without them there (pydantic drops unknown fields).
 */
const CHAT_ONLY = [
  'add_generation_prompt',
  'continue_final_message',
  'documents',
  'add_special_tokens',
  'chat_template',
  'reasoning_effort',
  'truncate_prompt_tokens',
  'truncation_side',
] as const;

/**
 * The /v1/responses body as the chat request the tokenizer reads (request-tokens.ts), the way vLLM
 * renders a Responses request (vllm/entrypoints/openai/responses/protocol.py `build_chat_params`):
 * its messages, the request's `chat_template_kwargs`, and over them `reasoning_effort` from
 * `reasoning.effort` (which chat-template-args.ts also turns into `enable_thinking`, as
 * vllm-project/vllm#43401 does for both APIs), and `continue_final_message` (with no generation
 * prompt) when the last input item is a message still `in_progress` or `incomplete` (responses/utils.py
 * `should_continue_final_message`: a partial assistant message to continue). Every other member is
 * kept (a policy may key on `user` or `prompt_cache_key`), but not the chat-only ones (CHAT_ONLY);
 * `tools` become the chat tools vLLM renders (responsesChatTools), and `add_special_tokens` is true.
 */
export function responsesChatBody(body: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const chat: Record<string, unknown> = { ...body, messages: responsesMessages(body) };
  for (const key of CHAT_ONLY) delete chat[key];
  const tools = responsesChatTools(body.tools);
  if (tools === undefined) delete chat.tools;
  else chat.tools = tools;
  const reasoning = body.reasoning;
  const effort =
    typeof reasoning === 'object' && reasoning !== null
      ? (reasoning as { effort?: unknown }).effort
      : undefined;
  if (typeof effort === 'string') chat.reasoning_effort = effort;
  // vLLM encodes the rendered text with the tokenizer's special tokens (ResponsesRequest.build_tok_params
  // leaves add_special_tokens at TokenizeParams' default, true, where the chat request's is false): a
  // BOS-adding tokenizer prepends one to the template's own.
  chat.add_special_tokens = true;
  const continues = continuesFinalItem(body.input);
  chat.add_generation_prompt = !continues;
  chat.continue_final_message = continues;
  return chat;
}

/**
 * The Responses `tools` as the chat tools vLLM hands the template (responses/utils.py
 * `construct_tool_dicts`, tool_parsers/utils.py `iter_response_function_tool_dicts`): each flat
 * function tool `{type: "function", name, ...}`, and each function of a `namespace` tool (named
 * `namespace__name`), as the SDK model dumps it (`FunctionTool`, `NamespaceTool`'s `ToolFunction`:
 * every field, null when absent, in the model's order, then the client's extra fields), without
 * `type`, as `{type: "function", function}`; vllm-chat-input.ts then dumps that as vLLM's chat tool
 * (name, description, parameters, then the rest in this order). Other tools (built-in, MCP, custom)
 * are not rendered; function tools are whatever `tool_choice` says (vLLM drops them for "none" only
 * when asked to). Undefined when the request has none.
 */
export function responsesChatTools(tools: unknown): unknown[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  const out: unknown[] = [];
  for (const tool of tools) {
    if (!isRecord(tool)) continue;
    if (tool.type === 'function') out.push(functionTool(tool, tool.name, FUNCTION_TOOL));
    else if (tool.type === 'namespace' && Array.isArray(tool.tools)) {
      for (const fn of tool.tools as unknown[]) {
        if (isRecord(fn) && fn.type === 'function')
          out.push(functionTool(fn, `${String(tool.name)}__${String(fn.name)}`, NAMESPACE_FUNCTION));
      }
    }
  }
  return out;
}

/** The SDK models' fields, in their order: `FunctionTool`, and a namespace's `ToolFunction`. */
const FUNCTION_TOOL = ['name', 'parameters', 'strict', 'type', 'defer_loading', 'description'];
const NAMESPACE_FUNCTION = ['name', 'type', 'defer_loading', 'description', 'parameters', 'strict'];

function functionTool(
  tool: Record<string, unknown>,
  name: unknown,
  fields: readonly string[],
): Record<string, unknown> {
  const fn: Record<string, unknown> = {};
  for (const k of fields) if (k !== 'type') fn[k] = k === 'name' ? name : (tool[k] ?? null);
  for (const [k, v] of Object.entries(tool)) if (!fields.includes(k)) fn[k] = v;
  return { type: 'function', function: fn };
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Whether the last input item is a message (or reasoning) vLLM continues rather than answers. */
function continuesFinalItem(input: unknown): boolean {
  if (!Array.isArray(input) || input.length === 0) return false;
  const last: unknown = input[input.length - 1];
  if (typeof last !== 'object' || last === null) return false;
  const { type = 'message', status } = last as { type?: unknown; status?: unknown };
  return (
    (type === 'message' || type === 'reasoning') && (status === 'in_progress' || status === 'incomplete')
  );
}
