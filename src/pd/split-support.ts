/**
 * Requests vLLM cannot serve split into a prefill leg and a decode leg, whatever the connector: the
 * P/D dispatcher sends them whole to a decode worker, which prefills the prompt itself (pure).
 *
 *   beam_search      `use_beam_search` (chat, completions): vLLM's beam search builds the sampling
 *                    parameters of every step itself, without the request's `kv_transfer_params`
 *                    (BeamSearchParams has none): the prefill leg keeps no KV cache for a decode
 *                    worker and answers without params, and the decode worker prefills again anyway.
 *   prompt_logprobs  the prompt's own logprobs: `prompt_logprobs`, a completions `echo` with
 *                    `logprobs`, a chat `echo` (vLLM asks then for `top_logprobs` prompt logprobs, 0
 *                    by default). They need the prompt's logits, and a decode worker that received the
 *                    prompt's KV cache never ran the prompt: vLLM's decode engine then crashes
 *                    (OverflowError in _get_prompt_logprobs_dict, vllm-project/vllm#50792; earlier
 *                    an assertion, #27449). The reference router merges the prefill's prompt logprobs
 *                    into a non-streamed answer; a decode worker that prefills the prompt itself
 *                    computes them, streamed or not.
 *
 * The flags are read as vLLM's pydantic models read them (request/lax-bool.ts: `"true"` is true).
 */
import type { InferenceKind } from '../request/inference-request.js';
import { laxBool } from '../request/lax-bool.js';

export type WholeOnDecode = 'beam_search' | 'prompt_logprobs';

export function unsplittable(
  kind: InferenceKind,
  body: Readonly<Record<string, unknown>>,
): WholeOnDecode | undefined {
  if (kind !== 'chat' && kind !== 'completions') return undefined;
  if (laxBool(body.use_beam_search) === true) return 'beam_search';
  if (body.prompt_logprobs != null) return 'prompt_logprobs';
  if (laxBool(body.echo) !== true) return undefined;
  // vLLM: `prompt_logprobs = self.logprobs` (completions) / `self.top_logprobs` (chat, default 0).
  const asked = kind === 'completions' ? body.logprobs : 'top_logprobs' in body ? body.top_logprobs : 0;
  return asked != null ? 'prompt_logprobs' : undefined;
}
