/**
 * Reconcile -> select -> reserve -> routed, in ONE synchronous step per role (the design's
 * "serialized snapshot and reconciliation"). Nothing in this file awaits; callers must not await
 * between reconcile() and reserve() either. See workers/worker-pool.ts for the invariant.
 */
import { LoadGuard } from '../workers/load-guard.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { CacheFeedback, Decision, SelectionInput } from './policy.js';
import type { Worker } from '../workers/worker.js';
import type { RoutingText } from '../util/piece-text.js';
import { holderAmong } from './response-affinity.js';

export interface RoutingContext {
  readonly model: string;
  readonly text: RoutingText;
  /** A batched completions request's prompts (InferenceRequest `prompts`). */
  readonly prompts?: readonly RoutingText[];
  readonly headers: Readonly<Record<string, string>>;
  readonly body?: Readonly<Record<string, unknown>>;
  /**
   * The token of the worker holding the response this request follows (routing/response-affinity.ts):
   * when that worker is a candidate, it is the only one, and the decision's branch says so.
   */
  readonly holder?: string;
  /**
   * The endpoints the gateway allows (RouteRequest.subset): regular and decode workers outside it are
   * not candidates. A prefill leg is the router's own request, not the gateway's: prefill pools ignore it.
   */
  readonly subset?: ReadonlySet<string>;
  /**
   * An inference request's `max_tokens` (0 when unset): with the routing text's length, what it needs
   * of a worker's context length (worker-pool.ts). Undefined for other requests (no fit applied).
   */
  readonly outputTokens?: number;
  /**
   * The sequences the request makes a worker run (InferenceRequest `sequences`: parallel sampling,
   * batched prompts); absent: 1. A prefill leg runs one (pd/kv-transfer.ts).
   */
  readonly sequences?: number;
  /** The decode worker chosen prefills the request itself (RouteRequest `prefillHere`). */
  readonly prefillHere?: boolean;
}

export interface RoutingObserver {
  /** After the guard is taken: record the decision (metrics, logs). */
  decided?(pool: WorkerPool, decision: Decision): void;
}

export interface Reservation {
  readonly pool: WorkerPool;
  readonly decision: Decision;
  readonly guard: LoadGuard;
  readonly input: SelectionInput;
  /** The policy asked to hear what the worker reports of the prompt (policy.ts CacheFeedback). */
  readonly feedback: CacheFeedback | undefined;
}

/** The selection half: pure choice over the reconciled pool's candidates (undefined if none). */
export function choose(
  pool: WorkerPool,
  ctx: RoutingContext,
  exclude?: ReadonlySet<Worker>,
): Chosen | undefined {
  const workers = candidates(pool, ctx, exclude, true);
  if (workers.length === 0) return undefined;
  const holder = ctx.holder !== undefined ? holderAmong(workers, ctx.holder) : undefined;
  if (holder !== undefined) {
    // The policy still sees the choice (its tree learns the prompt, its counters move).
    const input = new Selection([holder], ctx, pool.role);
    return { decision: { ...pool.policy.select(input), branch: RESPONSE_AFFINITY }, input };
  }
  const input = new Selection(workers, ctx, pool.role);
  return { decision: pool.policy.select(input), input };
}

/**
 * The workers a request may go to in this pool: serving its model, long enough for it, healthy,
 * allowed, not excluded. `report`: the selection's own call (counts a context-length fit).
 */
export function candidates(
  pool: WorkerPool,
  ctx: RoutingContext,
  exclude?: ReadonlySet<Worker>,
  report = false,
): readonly Worker[] {
  // A prefill leg asks for one token (pd/kv-transfer.ts), whatever the request's max_tokens.
  const out =
    ctx.outputTokens === undefined || pool.role !== 'prefill'
      ? ctx.outputTokens
      : Math.min(1, ctx.outputTokens);
  const need = out !== undefined ? { chars: ctx.text.length, outputTokens: out } : undefined;
  let workers = pool.candidatesFor(ctx.model, need, report);
  if (exclude && exclude.size > 0) workers = workers.filter((w) => !exclude.has(w));
  const subset = ctx.subset;
  if (subset !== undefined && pool.role !== 'prefill')
    workers = workers.filter((w) => subset.has(w.endpoint));
  return workers;
}

/** The decision branch of a request sent to the worker holding the response it follows. */
export const RESPONSE_AFFINITY = 'response_affinity';

/**
 * The body is read only by the policies that need it (SelectionInput.body). A class: a getter in an
 * object literal gives every object a hidden class of its own, kept in V8's old space.
 */
class Selection implements SelectionInput {
  readonly model: string;
  readonly text: RoutingText;
  readonly prompts: readonly RoutingText[] | undefined;
  readonly headers: Readonly<Record<string, string>>;
  readonly sequences: number;
  readonly outputTokens: number | undefined;
  readonly prefillHere: boolean;

  constructor(
    readonly workers: readonly Worker[],
    private readonly ctx: RoutingContext,
    role: WorkerPool['role'],
  ) {
    this.model = ctx.model;
    this.text = ctx.text;
    this.prompts = role === 'prefill' ? undefined : ctx.prompts;
    this.headers = ctx.headers;
    this.sequences = role === 'prefill' ? 1 : (ctx.sequences ?? 1);
    this.outputTokens = role === 'prefill' ? undefined : ctx.outputTokens;
    this.prefillHere = role === 'decode' && ctx.prefillHere === true;
  }

  get body(): Readonly<Record<string, unknown>> | undefined {
    return this.ctx.body;
  }
}

export type Chosen = { decision: Decision; input: SelectionInput };

/** Takes the load guard on a chosen worker and lets the policy record the choice. */
export function reserve(
  pool: WorkerPool,
  chosen: Chosen,
  observer: RoutingObserver,
  nowMs: number,
): Reservation {
  const guard = new LoadGuard(chosen.decision.worker, chosen.input.sequences);
  const feedback = commit(pool, chosen, observer, nowMs);
  return { pool, decision: chosen.decision, guard, input: chosen.input, feedback };
}

/**
 * Records a choice whose guard is taken later (the decode worker of a sequential P/D request is
 * chosen with the prefill worker, but only loaded once the prefill leg has ended).
 */
export function commit(
  pool: WorkerPool,
  chosen: Chosen,
  observer: RoutingObserver,
  nowMs: number,
): CacheFeedback | undefined {
  const feedback = pool.policy.routed?.(chosen.decision, chosen.input, nowMs) ?? undefined;
  observer.decided?.(pool, chosen.decision);
  return feedback;
}
