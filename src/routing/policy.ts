/**
 * The load-balancing policy contract.
 *
 * A pool calls, in ONE synchronous step (no await in between):
 *   select(input)  -> a pure choice among `input.workers` (no counters, no tree writes, no metrics)
 *   ...the caller takes the load guard on the chosen worker...
 *   routed(decision, input, now) -> the policy records the choice (e.g. inserts the prompt into
 *                                   the cache tree, advances a round-robin cursor)
 *
 * `input.workers` holds only selectable (healthy, breaker-closed) workers of one role, in the
 * pool's stable order; a policy's tie-break index is the index in that array.
 * Membership hooks (addWorker/removeWorker) are driven by pool reconciliation, so a departed or
 * generation-replaced worker leaves no affinity behind.
 */
import type { Worker } from '../workers/worker.js';
import type { CostInputs } from './cost-model.js';
import type { RoutingText } from '../util/piece-text.js';

export interface SelectionInput {
  /** Selectable candidates, never empty when select() is called. */
  readonly workers: readonly Worker[];
  /** Model name from the request ('' when unknown). */
  readonly model: string;
  /** Routing text: what the model sees (see request/prompt-text.ts; a long one in pieces); '' when not parsed. */
  readonly text: RoutingText;
  /**
   * A batched completions request's prompts, one routing text each (at most MAX_SCORED_PROMPTS;
   * request/prompt-text.ts `completionBatchTexts`): vLLM runs each as an engine request with its own
   * prefix, so the approximate tree matches and records each; `text` is their join. Absent for
   * everything else, and in a prefill pool.
   */
  readonly prompts?: readonly RoutingText[];
  /** Lower-cased request headers. */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * Parsed JSON body when there is one (for consistent_hash's `user`, a tokenizer). Read it only when
   * needed: for a long body, the first read joins its long texts (request/inference-request.ts).
   */
  readonly body?: Readonly<Record<string, unknown>>;
  /**
   * The sequences the request makes the chosen worker run (parallel sampling `n`, batched prompts;
   * request/inference-request.ts `requestSequences`): what its load guard weighs. Absent: 1.
   */
  readonly sequences?: number;
  /**
   * The output tokens the request asks for at most (`max_tokens`; 0 when unset), on the worker that
   * decodes it. Absent: unknown, and in a prefill pool (its leg makes one token; the decode is elsewhere).
   */
  readonly outputTokens?: number;
  /**
   * A decode pool's request that its worker prefills itself (no prefill leg: pd/pd-dispatcher.ts
   * `localReason`): scored with its prefill and the worker's prefix cache, as in a regular pool.
   */
  readonly prefillHere?: boolean;
}

export interface Decision {
  readonly worker: Worker;
  /** Why this worker: e.g. round_robin, cache_hit, low_match, imbalance, hash, least_load. */
  readonly branch: string;
  /** cache_aware only: matched chars / text length, in [0, 1]. */
  readonly matchRate?: number;
  /** cache_aware cost mode: the inputs of the decision (predicted wait, uncached tokens, runner-up). */
  readonly cost?: CostInputs;
}

/**
 * What the worker later reported of a routed request's prompt, handed back to the policy that routed
 * it (routed() returns one when it wants the report; load/timing-dispatcher.ts delivers it from the
 * responses it watches). At most one report per request; never called for a response without usage.
 */
export interface CacheFeedback {
  /** The response's `usage.prompt_tokens` and `usage.prompt_tokens_details.cached_tokens`. */
  observe(promptTokens: number, cachedTokens: number): void;
}

export interface Policy {
  readonly name: PolicyName;
  select(input: SelectionInput): Decision;
  /** Records the choice; may return a CacheFeedback to hear what the worker reports of the prompt. */
  routed?(decision: Decision, input: SelectionInput, nowMs: number): CacheFeedback | undefined | void;
  addWorker?(worker: Worker): void;
  removeWorker?(worker: Worker): void;
  /** The worker's KV cache was emptied (vLLM's sleep mode): forget what it was thought to hold. */
  cacheCleared?(worker: Worker): void;
  /** Periodic maintenance (cache eviction); called by the composition root's timer. */
  maintain?(nowMs: number): void;
  /** How often maintain() wants to run (milliseconds); required with maintain(). */
  readonly maintenanceIntervalMs?: number;
}

export const POLICY_NAMES = [
  'round_robin',
  'random',
  'power_of_two',
  'least_load',
  'consistent_hash',
  'cache_aware',
  'kv_aware',
] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];
