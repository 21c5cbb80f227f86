/**
 * The messages and tools vLLM hands a chat template, where they differ from the request's JSON
 * (vllm/entrypoints/chat_utils.py `_postprocess_messages`, the chat protocol's pydantic models). The
 * router's exact tokenization must render what the worker renders, byte for byte: its token ids part
 * from the worker's at the first difference, and every block after it reads as uncached.
 *
 * - `tools`: each chat tool as its pydantic model dumps it (`tool.model_dump()`): `type` (default
 *   "function"), then `function` with `name`, `description` and `parameters` in that order, null when
 *   absent, then any other field the client sent (the models keep extras, after the declared fields);
 *   then the tool's own extra fields. A template's `tool | tojson` writes exactly that. A tool without
 *   a `function` object is left as it is (a Responses request's flat function tools arrive wrapped:
 *   request/responses-input.ts).
 * - an assistant message's `tool_calls`: an empty list is dropped (the template takes the plain
 *   assistant path); each call's `arguments` JSON string is parsed into the object tool-use templates
 *   expect (`arguments | tojson`, `arguments | items`); missing or empty arguments become {}.
 * - an assistant message's reasoning: `reasoning` and `reasoning_content` both carry it, whichever the
 *   client sent (vLLM passes it on for interleaved thinking; the template decides what to render).
 * - every message's `content`, in the template's content format (`detectContentFormat`, vLLM's "auto"):
 *   for a template that reads `content` as a string, text parts joined by "\n" (null: ""); for one
 *   that iterates it (the OpenAI format), a list of `{type: "text", text}` parts (a string: one part;
 *   null: none). Only text parts reach here (a request with media falls back before).
 *
 * Copies only what it changes. Returns undefined when a call's arguments are not JSON (vLLM answers
 * 400; the caller falls back). What a JavaScript value cannot say stays approximate, as in
 * request/python-json.ts: `1.0` parses to 1.
 */
export interface ChatTemplateInput {
  readonly messages: readonly unknown[];
  readonly tools: unknown;
}

/** How a template reads a message's `content`: as a string, or as a list of parts (vLLM's names). */
export type ContentFormat = 'string' | 'openai';

/**
 * vLLM's "auto" content format: "openai" when the template loops over a message's content
 * (`{% for part in message['content'] %}`, `message.content`, through a filter or not), else
 * "string". vLLM walks the template's syntax tree for such a loop; this looks for it in the text.
 */
export function detectContentFormat(template: string): ContentFormat {
  return /\{%-?\s*for\s+\w+(?:\s*,\s*\w+)?\s+in\s+\w+\s*(?:\.\s*content\b|\[\s*['"]content['"]\s*\])/.test(
    template,
  )
    ? 'openai'
    : 'string';
}

export function vllmChatInput(
  messages: readonly unknown[],
  tools: unknown,
  /** The template's content format; undefined leaves contents as they are. */
  format?: ContentFormat,
): ChatTemplateInput | undefined {
  let out: unknown[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!isRecord(m)) continue;
    let next: Record<string, unknown> | undefined = m;
    if (m.role === 'assistant') next = assistantInput(m);
    if (next === undefined) return undefined;
    if (format !== undefined) next = withContent(next, format);
    if (next !== m) (out ??= messages.slice())[i] = next;
  }
  return { messages: out ?? messages, tools: Array.isArray(tools) ? tools.map(toolDump) : tools };
}

/** `m` with its content as a template of `format` reads it (the same object when it already is). */
function withContent(m: Record<string, unknown>, format: ContentFormat): Record<string, unknown> {
  const c = m.content;
  if (format === 'string') {
    if (typeof c === 'string') return m;
    if (c === null || c === undefined) return { ...m, content: '' };
    if (!Array.isArray(c)) return m;
    return {
      ...m,
      content: c.map((p) => (isRecord(p) && typeof p.text === 'string' ? p.text : '')).join('\n'),
    };
  }
  if (typeof c === 'string') return { ...m, content: [{ type: 'text', text: c }] };
  if (c === null || c === undefined) return { ...m, content: [] };
  if (!Array.isArray(c)) return m;
  return { ...m, content: c.map((p) => ({ type: 'text', text: isRecord(p) ? p.text : undefined })) };
}

function assistantInput(m: Record<string, unknown>): Record<string, unknown> | undefined {
  const calls = m.tool_calls;
  const reasoning = m.reasoning ?? m.reasoning_content;
  const hasReasoning = reasoning !== undefined && reasoning !== null;
  const callsChange = Array.isArray(calls) && (calls.length === 0 || calls.some(needsParsing));
  if (!callsChange && (!hasReasoning || (m.reasoning === reasoning && m.reasoning_content === reasoning)))
    return m;
  const copy: Record<string, unknown> = { ...m };
  if (Array.isArray(calls) && calls.length === 0) delete copy.tool_calls;
  else if (callsChange) {
    const parsed = (calls as unknown[]).map(parsedCall);
    if (parsed.includes(undefined)) return undefined;
    copy.tool_calls = parsed;
  }
  if (hasReasoning) {
    copy.reasoning = reasoning;
    copy.reasoning_content = reasoning;
  }
  return copy;
}

function needsParsing(call: unknown): boolean {
  if (!isRecord(call) || !isRecord(call.function)) return false;
  const args = call.function.arguments;
  return !(typeof args === 'object' && args !== null);
}

/** A tool call with its arguments as the object they encode; undefined when they are not JSON. */
function parsedCall(call: unknown): unknown {
  if (!needsParsing(call)) return call;
  const c = call as Record<string, unknown> & { function: Record<string, unknown> };
  const args = c.function.arguments;
  let value: unknown = {};
  if (args !== undefined && args !== null && args !== '' && args !== 0 && args !== false) {
    if (typeof args !== 'string') return undefined;
    try {
      value = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  return { ...c, function: { ...c.function, arguments: value } };
}

const TOOL_FIELDS = ['type', 'function'];
const FUNCTION_FIELDS = ['name', 'description', 'parameters'];

/** One chat tool as `ChatCompletionToolsParam.model_dump()` writes it (see the header comment). */
function toolDump(tool: unknown): unknown {
  if (!isRecord(tool) || !isRecord(tool.function)) return tool;
  const fn = tool.function;
  const dumpedFn: Record<string, unknown> = {
    name: fn.name,
    description: fn.description ?? null,
    parameters: fn.parameters ?? null,
  };
  for (const [k, v] of Object.entries(fn)) if (!FUNCTION_FIELDS.includes(k)) dumpedFn[k] = v;
  const dumped: Record<string, unknown> = { type: tool.type ?? 'function', function: dumpedFn };
  for (const [k, v] of Object.entries(tool)) if (!TOOL_FIELDS.includes(k)) dumped[k] = v;
  return dumped;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
