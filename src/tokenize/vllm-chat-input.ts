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
 *   a `function` object (the Responses API's flat function tools) is left as it is.
 * - an assistant message's `tool_calls`: an empty list is dropped (the template takes the plain
 *   assistant path); each call's `arguments` JSON string is parsed into the object tool-use templates
 *   expect (`arguments | tojson`, `arguments | items`); missing or empty arguments become {}.
 * - an assistant message's reasoning: `reasoning` and `reasoning_content` both carry it, whichever the
 *   client sent (vLLM passes it on for interleaved thinking; the template decides what to render).
 *
 * Copies only what it changes. Returns undefined when a call's arguments are not JSON (vLLM answers
 * 400; the caller falls back). What a JavaScript value cannot say stays approximate, as in
 * request/python-json.ts: `1.0` parses to 1.
 */
export interface ChatTemplateInput {
  readonly messages: readonly unknown[];
  readonly tools: unknown;
}

export function vllmChatInput(messages: readonly unknown[], tools: unknown): ChatTemplateInput | undefined {
  let out: unknown[] | undefined;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!isRecord(m) || m.role !== 'assistant') continue;
    const next = assistantInput(m);
    if (next === undefined) return undefined;
    if (next !== m) (out ??= messages.slice())[i] = next;
  }
  return { messages: out ?? messages, tools: Array.isArray(tools) ? tools.map(toolDump) : tools };
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
