/**
 * What vLLM renders a model's chats with, told from the files of its directory, where that is not
 * the tokenizer's Jinja chat template (hf-tokenizer.ts renders that one):
 *
 * - `config.json` `model_type: "gpt_oss"`: the OpenAI server renders chats with openai_harmony
 *   (`use_harmony`: its own system message, channels, tool namespaces), never with the template
 *   -> `harmony`.
 * - `config.json` `architectures` naming a model vLLM gives its own tokenizer mode by default
 *   (vllm/config/model.py: tokenizer_mode "auto" -> grok2, deepseek_v32, deepseek_v4, kimi_audio,
 *   kimi_k3, qwen_vl): those modes' renderers (vllm/renderers/, vllm/tokenizers/) encode the chat with
 *   Python encoders (DeepSeek V3.2/V4, Kimi K3) or a tiktoken vocabulary (Grok-2's tokenizer.tok.json,
 *   Qwen-VL, Kimi-Audio) the router does not reproduce -> `model_renderer`.
 * - A processor's chat template (a multimodal model's directory: `processor_config.json` or
 *   `preprocessor_config.json`): vLLM's resolve_chat_template prefers the AutoProcessor's template
 *   over the tokenizer's for a request without tools. transformers (5.x processing_utils
 *   `get_processor_dict`) takes it from `processor_config.json`'s `chat_template`, else the legacy
 *   `chat_template.json`'s, else `chat_template.jinja` (which the tokenizer reads too).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export type OwnRenderer = 'harmony' | 'model_renderer';

/** Architectures vLLM's tokenizer mode "auto" gives a renderer of their own (config/model.py). */
const OWN_RENDERER_ARCHITECTURES: ReadonlySet<string> = new Set([
  'Grok1ForCausalLM',
  'DeepseekV32ForCausalLM',
  'DeepseekV4ForCausalLM',
  'MoonshotKimiaForCausalLM',
  'KimiK3ForConditionalGeneration',
  'QwenVLForConditionalGeneration',
]);

/** The renderer vLLM uses instead of the Jinja template for the model whose `config.json` this is. */
export function ownRendererOf(files: readonly string[], dir: string): OwnRenderer | undefined {
  if (!files.includes('config.json')) return undefined;
  const config = readJson(join(dir, 'config.json'));
  if (config === undefined) return undefined;
  if (config.model_type === 'gpt_oss') return 'harmony';
  const archs = Array.isArray(config.architectures) ? (config.architectures as unknown[]) : [];
  return archs.some((a) => typeof a === 'string' && OWN_RENDERER_ARCHITECTURES.has(a))
    ? 'model_renderer'
    : undefined;
}

/**
 * The processor's own chat template of a multimodal model's directory (see the header), when it has
 * one the tokenizer does not read (`chat_template.jinja` is the tokenizer's too).
 */
export function processorChatTemplate(files: readonly string[], dir: string): string | undefined {
  const processorFile = files.includes('processor_config.json');
  if (!processorFile && !files.includes('preprocessor_config.json')) return undefined;
  const fromConfig = processorFile ? readJson(join(dir, 'processor_config.json'))?.chat_template : undefined;
  if (typeof fromConfig === 'string') return fromConfig;
  if (!files.includes('chat_template.json')) return undefined;
  const legacy = readJson(join(dir, 'chat_template.json'))?.chat_template;
  return typeof legacy === 'string' ? legacy : undefined;
}

function readJson(path: string): Record<string, unknown> | undefined {
  const v = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  return typeof v === 'object' && v !== null && !Array.isArray(v)
    ? (v as Record<string, unknown>)
    : undefined;
}
