/**
 * vLLM's runtime LoRA endpoints (served when `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`):
 * `POST /v1/load_lora_adapter {"lora_name", "lora_path"}` adds an adapter to the worker's list (and to
 * GET /v1/models), `POST /v1/unload_lora_adapter {"lora_name"}` removes it. Answers as vLLM's:
 * 200 with a plain-text success line, 400 for an adapter already loaded or a body without the names,
 * 404 for unloading one that is not there. The simulator loads nothing: the name is what it serves.
 */
import { errorBody } from './openai-format.js';

export const LOAD_LORA_PATH = '/v1/load_lora_adapter';
export const UNLOAD_LORA_PATH = '/v1/unload_lora_adapter';

export function isLoraAdapterPath(path: string): boolean {
  return path === LOAD_LORA_PATH || path === UNLOAD_LORA_PATH;
}

export interface LoraAnswer {
  readonly status: number;
  readonly contentType: 'text/plain' | 'application/json';
  readonly body: string;
}

/** Applies one load or unload to `adapters` (the worker's adapter names) and says what vLLM says. */
export function answerLoraAdapter(path: string, raw: Buffer, adapters: Set<string>): LoraAnswer {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    return json(400, 'invalid JSON body');
  }
  const b = typeof body === 'object' && body !== null ? (body as Record<string, unknown>) : {};
  const name = b.lora_name;
  if (typeof name !== 'string' || name === '') return json(400, 'lora_name must be provided.');
  if (path === LOAD_LORA_PATH) {
    if (typeof b.lora_path !== 'string' || b.lora_path === '') {
      return json(400, 'Both lora_name and lora_path must be provided.');
    }
    if (adapters.has(name)) return json(400, `The lora adapter '${name}' has already been loaded.`);
    adapters.add(name);
    return text(`Success: LoRA adapter '${name}' added successfully.`);
  }
  if (!adapters.delete(name)) return json(404, `The lora adapter '${name}' cannot be found.`);
  return text(`Success: LoRA adapter '${name}' removed successfully.`);
}

function json(status: number, message: string): LoraAnswer {
  return { status, contentType: 'application/json', body: errorBody(status, message) };
}

function text(message: string): LoraAnswer {
  return { status: 200, contentType: 'text/plain', body: message };
}
