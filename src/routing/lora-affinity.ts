/**
 * LoRA affinity: where a request for a LoRA adapter can start without waiting for the adapter.
 *
 * vLLM serves several LoRA adapters on one base model (`--enable-lora --max-loras N`); a request
 * names the adapter as its `model`. An engine batch holds at most `max_loras` distinct adapters: a
 * request whose adapter is already in the batch (running or waiting there) joins it for nothing; one
 * whose adapter is not has it loaded into a free slot first (a copy from the CPU cache, or a read
 * from disk the first time); and when every slot is taken by adapters with requests running, it
 * waits in the queue until one of them drains (vLLM's scheduler skips it until then). A router that
 * ignores this spreads each adapter over the whole fleet: every worker loads every adapter, and with
 * more adapters than slots, requests queue behind other adapters' while a worker that runs theirs
 * idles. The inference extension's endpoint picker has the same rule (active adapter first, then a
 * worker with room).
 *
 * State of adapter `model` on one worker, from the worker's latest fresh `/metrics` sample
 * (`vllm:lora_requests_info`: `max_lora`, running and waiting adapters; metrics-parse.ts) and the
 * models of this router's requests in flight there (requests it sent since the sample count at once,
 * so a burst for a new adapter gathers where its first request went instead of loading it
 * everywhere before the next scrape):
 *   active     the adapter is running there, or this router has a request for it there, or it is
 *              waiting there while a slot is free (it is about to run)
 *   free_slot  it is not, and fewer than `max_lora` distinct adapters run (loading it costs time)
 *   full       every slot is taken by other adapters (the request would wait for one to drain),
 *              including when the adapter itself is waiting there for a slot: the endpoint picker
 *              counts a waiting adapter as active, which piles requests behind a starved one
 *   undefined  no opinion: no fresh sample with LoRA info (LoRA off, a non-vLLM worker), no
 *              `max_lora`, the request names one of the worker's base model names (its /v1/models
 *              list, else the samples' `model_name`: workers/served-models.ts), or the base model is
 *              unknown and the adapter is not active there (an adapter cannot be told from an alias
 *              of the base then)
 * The cost model (cost-model.ts) adds `loraLoadMs` to a free slot's prediction and skips full workers
 * while any candidate is not full; it never refuses a request because every worker is full.
 *
 * A second `--served-model-name` of the base model is known only from the worker's /v1/models list
 * (vLLM labels its metrics with the FIRST name): with the list off (`--models-interval-ms 0`), a
 * request naming a second name on a LoRA-enabled worker is taken for an adapter that is not loaded:
 * it pays `loraLoadMs` in the prediction and avoids workers whose slots are full (never refused; the
 * same everywhere on a fleet of identical workers).
 *
 * Pure: no timers, metrics or logging.
 */
import type { LoraInfo } from '../load/metrics-parse.js';

export type AdapterState = 'active' | 'free_slot' | 'full';

export interface AdapterFacts {
  /** The worker's latest fresh LoRA sample (absent: no LoRA info). */
  readonly lora?: LoraInfo;
  /** The worker's base model names (served-models.ts), when known. */
  readonly baseModels?: readonly string[];
  /** Models of this router's requests in flight on the worker, with their counts. */
  readonly inFlight?: ReadonlyMap<string, number>;
}

export function adapterState(model: string, facts: AdapterFacts): AdapterState | undefined {
  const lora = facts.lora;
  const max = lora?.maxLora;
  if (lora === undefined || max === undefined || max <= 0 || model === '') return undefined;
  const base = facts.baseModels;
  if (base !== undefined && base.includes(model)) return undefined;
  if (lora.running.includes(model) || (facts.inFlight?.get(model) ?? 0) > 0) return 'active';
  // Slots taken: the adapters running there, and those of this router's requests in flight there
  // (when the base model is known, so its own requests are not taken for one).
  const running = new Set<string>(lora.running);
  if (base !== undefined && facts.inFlight !== undefined) {
    for (const [m, n] of facts.inFlight) if (n > 0 && m !== '' && !base.includes(m)) running.add(m);
  }
  if (lora.waiting.includes(model)) return running.size < max ? 'active' : 'full';
  if (base === undefined) return undefined;
  // Adapters waiting for a slot take one as soon as it frees, ahead of this request.
  const used = new Set<string>(running);
  for (const a of lora.waiting) used.add(a);
  return used.size < max ? 'free_slot' : 'full';
}
