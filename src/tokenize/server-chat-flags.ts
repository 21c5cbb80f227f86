/**
 * The vLLM server flags that change how a model renders every chat request, per model, as the router
 * is told them (`MODEL=VALUE`, the flag names of `vllm serve`): the router cannot see a worker's
 * command line, and a worker started with one of these renders each request of the model differently
 * from the model's own template, so without the same flag here every block key the router computes
 * differs from the worker's and the exact hit rate silently reads 0.
 *
 * - `--chat-template MODEL=FILE`: the server's template renders every request of the model, those
 *   with tools too (vllm/renderers/hf.py `resolve_chat_template`: a given template comes first, before
 *   the model's and its named `tool_use` one), and its content format is detected from it.
 * - `--default-chat-template-kwargs MODEL=JSON`: template variables under the request's own
 *   chat_template_kwargs and flags (vllm/renderers/params.py `ChatParams.with_defaults`:
 *   `merge_kwargs(server defaults, the request's)`), e.g. `{"enable_thinking": false}` for Qwen3.
 * - `--chat-template-content-format MODEL=string|openai`: how message contents reach the template,
 *   in place of vLLM's detection (`auto`, the default, detects).
 * - `--exclude-tools-when-tool-choice-none MODEL`: a request whose `tool_choice` is "none" renders
 *   without its tools (vllm/renderers/online_renderer.py `render_chat`, responses/utils.py
 *   `construct_tool_dicts`).
 *
 * `parseServerChatFlags` checks the specs (config.ts, at start-up); `loadServerChatFlags` reads and
 * compiles the template files. Both throw a RangeError naming the bad spec.
 */
import { readFileSync } from 'node:fs';
import { chatTemplate, type ChatTemplate } from './hf-tokenizer.js';
import type { ContentFormat } from './vllm-chat-input.js';

/** One model's flags, loaded. */
export interface ServerChatFlags {
  readonly template?: ChatTemplate;
  readonly defaultKwargs?: Readonly<Record<string, unknown>>;
  readonly contentFormat?: ContentFormat;
  readonly excludeToolsWhenToolChoiceNone?: boolean;
}

/** The options as the config holds them (config-schema.ts). */
export interface ServerChatFlagSettings {
  readonly chatTemplate?: readonly string[];
  readonly defaultChatTemplateKwargs?: readonly string[];
  readonly chatTemplateContentFormat?: readonly string[];
  readonly excludeToolsWhenToolChoiceNone?: readonly string[];
}

/** Parsed specs: per model, a template file to read and the other flags. */
export interface ServerChatFlagSpecs {
  readonly templateFiles: ReadonlyMap<string, string>;
  readonly flags: ReadonlyMap<string, Omit<ServerChatFlags, 'template'>>;
}

const FORMATS = ['string', 'openai', 'auto'];

export function parseServerChatFlags(c: ServerChatFlagSettings): ServerChatFlagSpecs {
  const templateFiles = new Map<string, string>();
  const flags = new Map<
    string,
    { -readonly [K in keyof Omit<ServerChatFlags, 'template'>]: ServerChatFlags[K] }
  >();
  const of = (model: string) => {
    let f = flags.get(model);
    if (f === undefined) flags.set(model, (f = {}));
    return f;
  };
  for (const spec of c.chatTemplate ?? []) {
    const [model, file] = modelValue('--chat-template', spec, 'MODEL=FILE');
    if (templateFiles.has(model)) throw new RangeError(`--chat-template: model "${model}" given twice`);
    templateFiles.set(model, file);
  }
  for (const spec of c.defaultChatTemplateKwargs ?? []) {
    const [model, json] = modelValue('--default-chat-template-kwargs', spec, 'MODEL=JSON');
    let value: unknown;
    try {
      value = JSON.parse(json);
    } catch {
      value = undefined;
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new RangeError(`--default-chat-template-kwargs: expected MODEL=a JSON object, got "${spec}"`);
    }
    if (of(model).defaultKwargs !== undefined)
      throw new RangeError(`--default-chat-template-kwargs: model "${model}" given twice`);
    of(model).defaultKwargs = value as Record<string, unknown>;
  }
  for (const spec of c.chatTemplateContentFormat ?? []) {
    const [model, format] = modelValue('--chat-template-content-format', spec, 'MODEL=string|openai|auto');
    if (!FORMATS.includes(format)) {
      throw new RangeError(
        `--chat-template-content-format: expected MODEL=string|openai|auto, got "${spec}"`,
      );
    }
    if (format !== 'auto') of(model).contentFormat = format as ContentFormat;
  }
  for (const model of c.excludeToolsWhenToolChoiceNone ?? []) of(model).excludeToolsWhenToolChoiceNone = true;
  return { templateFiles, flags };
}

/** The specs with their template files read and compiled, per model. */
export function loadServerChatFlags(specs: ServerChatFlagSpecs): Map<string, ServerChatFlags> {
  const out = new Map<string, ServerChatFlags>();
  for (const [model, f] of specs.flags) out.set(model, f);
  for (const [model, file] of specs.templateFiles) {
    let template: ChatTemplate;
    try {
      template = chatTemplate(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new RangeError(`--chat-template ${model}=${file}: ${(err as Error).message}`, { cause: err });
    }
    out.set(model, { ...out.get(model), template });
  }
  return out;
}

/** `MODEL=VALUE` split at its first '=' (a JSON value may hold more). */
function modelValue(flag: string, spec: string, shape: string): [string, string] {
  const eq = spec.indexOf('=');
  if (eq <= 0 || eq === spec.length - 1) throw new RangeError(`${flag}: expected ${shape}, got "${spec}"`);
  return [spec.slice(0, eq), spec.slice(eq + 1)];
}
