/**
 * What vLLM hands a chat template besides the messages and tools: the request's `chat_template_kwargs`
 * as template variables, then, over them, the request's own `add_generation_prompt`,
 * `continue_final_message`, `documents` (retrieval-augmented templates) and `reasoning_effort`
 * (vllm/entrypoints/openai/chat_completion/protocol.py `build_chat_params`:
 * `merge_kwargs(self.chat_template_kwargs, extra_kwargs)`, where a `None` in extra_kwargs leaves the
 * kwargs' own). So `{"chat_template_kwargs": {"enable_thinking": false}}` reaches the template as the
 * variable `enable_thinking`, while an `add_generation_prompt` given there gives way to the request's
 * own (true unless it says false). Releases before vLLM's renderer (`_preprocess_chat` in
 * serving_engine.py, `_chat_template_kwargs.update(chat_template_kwargs)`, replaced by the requests'
 * `build_chat_params` in early 2026: vllm-project/vllm#30200, #32863) merged the kwargs last, over the
 * flags and documents; the router follows the current order. Templates read such variables
 * anywhere: Qwen3's `enable_thinking` in the generation prompt at the end, others a reasoning switch
 * or documents in the system part at the start, where a router that rendered without them would part
 * from the worker's tokens at the first block.
 *
 * A request's `reasoning_effort` reaches the template too, and, unless chat_template_kwargs names
 * `enable_thinking`, as `enable_thinking` = (effort != "none") (vllm-project/vllm#43401): GLM's
 * templates write the effort into a system line at the start, Qwen3's and Gemma 4's switch thinking
 * at the end. The flags are read as vLLM's pydantic models read them (lax-bool.ts: `"false"` is false).
 *
 * Under all of these, the server's own defaults (vLLM `--default-chat-template-kwargs`, given per model:
 * server-chat-flags.ts): `ChatParams.with_defaults` merges the request's over them, and drops the
 * request's kwargs whose value is null or "auto" (vllm/renderers/params.py `merge_kwargs`, whose
 * `unset_values`), so such a kwarg leaves the server's default, or no variable at all.
 *
 * Not passed as variables: `messages`, `tools` and `conversation` (the router renders the request's
 * own, as vLLM prepares them), `chat_template` (a per-request template; vLLM refuses it unless the
 * server trusts request templates, and this router renders the model's own) and `tokenize`.
 */
import { laxBool } from '../request/lax-bool.js';

export interface ChatTemplateArgs {
  readonly addGenerationPrompt: boolean;
  readonly continueFinalMessage: boolean;
  /** Further template variables: `documents`, the request's chat_template_kwargs, `reasoning_effort`. */
  readonly variables: Readonly<Record<string, unknown>> | undefined;
}

const NOT_VARIABLES = new Set([
  'messages',
  'conversation',
  'tools',
  'chat_template',
  'tokenize',
  'add_generation_prompt',
  'continue_final_message',
]);

export function chatTemplateArgs(
  body: Readonly<Record<string, unknown>>,
  /** The server's `--default-chat-template-kwargs` for the model. */
  serverDefaults?: Readonly<Record<string, unknown>>,
): ChatTemplateArgs {
  const kwargs = plainObject(body.chat_template_kwargs);
  const flag = (key: string, fallback: boolean): boolean => laxBool(body[key]) ?? fallback;
  let variables: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(serverDefaults ?? {})) {
    if (!NOT_VARIABLES.has(k)) (variables ??= {})[k] = v;
  }
  if (kwargs !== undefined) {
    for (const [k, v] of Object.entries(kwargs)) {
      if (NOT_VARIABLES.has(k) || v === null || v === 'auto') continue;
      (variables ??= {})[k] = v;
    }
  }
  if (Array.isArray(body.documents)) (variables ??= {}).documents = body.documents;
  const effort = body.reasoning_effort;
  if (typeof effort === 'string') {
    variables ??= {};
    variables.reasoning_effort = effort;
    if (kwargs === undefined || !('enable_thinking' in kwargs)) variables.enable_thinking = effort !== 'none';
  }
  return {
    addGenerationPrompt: flag('add_generation_prompt', true),
    continueFinalMessage: flag('continue_final_message', false),
    variables,
  };
}

function plainObject(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}
