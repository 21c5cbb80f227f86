/**
 * What vLLM hands a chat template besides the messages and tools (vllm/entrypoints/openai
 * serving_engine.py `_preprocess_chat`): `add_generation_prompt` and `continue_final_message` from the
 * request, `documents` (retrieval-augmented templates), then the request's `chat_template_kwargs`
 * merged over all of them, so `{"chat_template_kwargs": {"enable_thinking": false}}` reaches the
 * template as the variable `enable_thinking`, and an `add_generation_prompt` given there wins over the
 * request's own. Templates read such variables anywhere: Qwen3's `enable_thinking` in the generation
 * prompt at the end, others a reasoning switch or documents in the system part at the start, where
 * a router that rendered without them would part from the worker's tokens at the first block.
 *
 * A request's `reasoning_effort` reaches the template too (vLLM's ChatCompletionRequest
 * build_chat_params, over chat_template_kwargs' own), and, unless chat_template_kwargs names
 * `enable_thinking`, as `enable_thinking` = (effort != "none") (vllm-project/vllm#43401): GLM's
 * templates write the effort into a system line at the start, Qwen3's and Gemma 4's switch thinking
 * at the end.
 *
 * Not passed as variables: `messages`, `tools` and `conversation` (the router renders the request's
 * own, as vLLM prepares them), `chat_template` (a per-request template; vLLM refuses it unless the
 * server trusts request templates, and this router renders the model's own) and `tokenize`.
 */
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

export function chatTemplateArgs(body: Readonly<Record<string, unknown>>): ChatTemplateArgs {
  const kwargs = plainObject(body.chat_template_kwargs);
  const flag = (key: string, fallback: boolean): boolean => {
    const own = kwargs?.[key];
    if (typeof own === 'boolean') return own;
    const v = body[key];
    return typeof v === 'boolean' ? v : fallback;
  };
  let variables: Record<string, unknown> | undefined;
  if (Array.isArray(body.documents)) variables = { documents: body.documents };
  if (kwargs !== undefined) {
    for (const [k, v] of Object.entries(kwargs)) {
      if (NOT_VARIABLES.has(k)) continue;
      (variables ??= {})[k] = v;
    }
  }
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
