/**
 * Routes a request to one worker of one pool (regular mode; in P/D mode, the pass-through paths that
 * go to a decode worker unchanged). Synchronous: reconcile, choose, reserve, then hand Envoy the
 * destination header. The guard is released by the session when the response ends.
 */
import type { Dispatch, Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import { DECISION_HEADER } from '../extproc/headers.js';
import { routeHeaders } from './route-headers.js';
import { RouterError } from '../request/router-error.js';
import { bodyModel, type InferenceRequest } from '../request/inference-request.js';
import type { RoutingText } from '../util/piece-text.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { Worker } from '../workers/worker.js';
import { candidates, choose, reserve, type RoutingContext, type RoutingObserver } from './selector.js';
import type { Decision } from './policy.js';
import { describeCost } from './cost-model.js';
import { followedResponseId, holderToken, responseIdFor, withRequestId } from './response-affinity.js';
import { destinationList, fallbackWorkers } from './fallback-endpoints.js';
import { LoadGuard } from '../workers/load-guard.js';
import type { HeaderSet } from '../extproc/mutations.js';

export interface PoolDispatcherOptions {
  readonly pool: WorkerPool;
  readonly observer: RoutingObserver;
  readonly clock: () => number;
  /** Add `x-vllm-router-decision` to responses. */
  readonly decisionHeader: boolean;
  /** Other workers named after the chosen one in the destination list (`--fallback-endpoints`). */
  readonly fallbackEndpoints?: number;
}

export class PoolDispatcher implements Dispatcher {
  /**
   * In-flight requests that name a worker as a fallback endpoint: the gateway may still send them
   * there (a worker put to sleep must wait for them too: admin/worker-sleep.ts).
   */
  private readonly listed = new Map<Worker, number>();

  constructor(private readonly opts: PoolDispatcherOptions) {}

  /** In-flight requests that name `w` as a fallback endpoint. */
  pendingFallbacks(w: Worker): number {
    return this.listed.get(w) ?? 0;
  }

  dispatch(req: RouteRequest): Dispatch {
    const { pool, observer, clock } = this.opts;
    pool.reconcile();
    const ctx = routingContext(req);
    const chosen = choose(pool, ctx);
    if (!chosen) throw req.subset !== undefined ? outsideSubset(pool, req.subset) : noWorkers([pool]);
    // Only the decision and the guard outlive this call: the reservation's input holds the prompt
    // and the parsed body, which must not stay reachable for the whole response (a 220 KB prompt
    // would survive young-generation GCs and wait for a full one).
    const { decision, guard, feedback } = reserve(pool, chosen, observer, clock());
    const body = namedResponseBody(req, decision.worker);
    // A body named for the chosen worker (a stored response's id) is no body for another one: its
    // list names the chosen endpoint alone, once per slot (destinationList).
    const slots = this.opts.fallbackEndpoints ?? 0;
    const fallbacks =
      slots > 0 && body === undefined
        ? fallbackWorkers(candidates(pool, ctx), decision.worker, slots, decision.cost?.runnerUp?.worker)
        : [];
    for (const w of fallbacks) this.listed.set(w, (this.listed.get(w) ?? 0) + 1);
    return {
      worker: decision.worker,
      decision,
      ...(feedback !== undefined ? { cacheFeedback: feedback } : {}),
      setHeaders: routeHeaders(decision.worker, destinationList(decision.worker, fallbacks, slots)),
      ...(body !== undefined ? { body } : {}),
      responseHeaders: this.decisionReply(decision),
      // Routing reads no response chunk: Envoy may skip the body (extproc/response-body-mode.ts).
      watchResponseBody: readsNoBody,
      ...(fallbacks.length === 0
        ? { finish: () => guard.release() }
        : this.listedUntilAnswered(guard, fallbacks)),
    };
  }

  /**
   * The fallback endpoints count as pending until the response starts (the gateway retries another
   * endpoint only before any answer) or the request ends, whichever comes first.
   */
  private listedUntilAnswered(
    guard: LoadGuard,
    fallbacks: readonly Worker[],
  ): Pick<Dispatch, 'onResponseStart' | 'finish'> {
    let listed = true;
    const unlist = (): void => {
      if (!listed) return;
      listed = false;
      this.unlist(fallbacks);
    };
    return {
      onResponseStart: unlist,
      finish: () => {
        guard.release();
        unlist();
      },
    };
  }

  private unlist(fallbacks: readonly Worker[]): void {
    for (const w of fallbacks) {
      const n = (this.listed.get(w) ?? 0) - 1;
      if (n > 0) this.listed.set(w, n);
      else this.listed.delete(w);
    }
  }

  /**
   * The gateway served the request on `endpoint`, not on the worker this dispatcher chose (a
   * fallback endpoint, routing/fallback-endpoints.ts): the request's load moves to that worker for the
   * rest of its response. The policy is not told (it recorded its own choice; a failed worker's
   * prefix entries go when the worker does). Decision branch `failover`.
   */
  adopt(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined {
    const { pool, observer } = this.opts;
    // A data-parallel server's ranks share its endpoint: the request kept the rank header it was
    // sent with (fallbacks never share the chosen endpoint), so it runs on that rank there.
    const rank = from.worker.dpRank;
    const at = pool.workers.filter((w) => w.endpoint === endpoint);
    const worker = at.find((w) => w.dpRank === rank) ?? at[0];
    if (worker === undefined) return undefined;
    const guard = new LoadGuard(worker, req.inference?.sequences);
    const decision: Decision = { worker, branch: FAILOVER };
    observer.decided?.(pool, decision);
    return {
      worker,
      decision,
      setHeaders: {},
      responseHeaders: this.decisionReply(decision),
      watchResponseBody: readsNoBody,
      finish: () => guard.release(),
    };
  }

  private decisionReply(decision: Decision): (() => HeaderSet) | undefined {
    const policy = this.opts.pool.policy.name;
    return this.opts.decisionHeader
      ? () => ({ [DECISION_HEADER]: describeDecision(policy, decision) })
      : undefined;
  }
}

/** The decision branch of a request the gateway served on another endpoint than the one chosen. */
export const FAILOVER = 'failover';

const readsNoBody = (): boolean => false;

/**
 * A /v1/responses body with the response id the router chose for `worker` (routing/response-affinity.ts),
 * or undefined when the request is not one the router names.
 */
export function namedResponseBody(req: RouteRequest, worker: Worker): Buffer | undefined {
  if (req.inference?.namesFreeResponse !== true || req.body === undefined) return undefined;
  return withRequestId(req.body, responseIdFor(worker));
}

/**
 * What the policy and the pool's candidate filter see of a request: an inference request's model and
 * routing text; for any other request with a JSON body, the model it names (request/inference-request.ts
 * bodyModel), so it goes to the workers serving that model; the holder of the response it follows.
 */
export function routingContext(req: RouteRequest): RoutingContext {
  const inf = req.inference;
  const followed = followedResponseId(req.path, inf?.previousResponseId);
  const holder = followed !== undefined ? holderToken(followed) : undefined;
  if (inf) return new InferenceRoutingContext(inf, req.headers, holder, req.subset, req.prefillHere === true);
  const model = req.body !== undefined ? (bodyModel(req.headers['content-type'], req.body) ?? '') : '';
  return {
    model,
    text: '',
    headers: req.headers,
    ...(holder !== undefined ? { holder } : {}),
    ...(req.subset !== undefined ? { subset: req.subset } : {}),
  };
}

/**
 * The body is read only if a policy needs it (a long body's texts are joined on the first read:
 * SelectionInput.body). A class, never a getter in an object literal (see ParsedInferenceRequest).
 */
class InferenceRoutingContext implements RoutingContext {
  readonly model: string;
  readonly text: RoutingText;
  readonly prompts: readonly RoutingText[] | undefined;
  readonly outputTokens: number;
  readonly sequences: number;

  constructor(
    private readonly inf: InferenceRequest,
    readonly headers: Readonly<Record<string, string>>,
    readonly holder: string | undefined,
    readonly subset: ReadonlySet<string> | undefined,
    readonly prefillHere: boolean,
  ) {
    this.model = inf.model;
    this.text = inf.text;
    this.prompts = inf.prompts;
    this.outputTokens = inf.outputTokens ?? 0;
    this.sequences = inf.sequences ?? 1;
  }

  get body(): Readonly<Record<string, unknown>> {
    return this.inf.promptBody;
  }
}

/** 503 for a request none of whose allowed endpoints (the gateway's subset) is a selectable worker. */
export function outsideSubset(pool: WorkerPool, subset: ReadonlySet<string>): RouterError {
  return new RouterError(
    'no_workers',
    503,
    `No workers available: none of the ${pool.candidates().length} selectable ${pool.role} workers is ` +
      `among the ${subset.size} endpoints the gateway allows (x-gateway-destination-endpoint-subset)`,
    'service_unavailable',
  );
}

/** 503 naming every needed pool's size (and how many are selectable, when some are not). */
export function noWorkers(pools: readonly WorkerPool[]): RouterError {
  const parts = pools.map((p) => {
    const healthy = p.candidates().length;
    let asleep = 0;
    let cordoned = 0;
    for (const w of p.workers) {
      if (w.asleep) asleep++;
      if (w.cordoned) cordoned++;
    }
    const held = `${asleep > 0 ? `, ${asleep} asleep` : ''}${cordoned > 0 ? `, ${cordoned} cordoned` : ''}`;
    return `${p.size} ${p.role}${healthy < p.size ? ` (${healthy} healthy${held})` : ''}`;
  });
  return new RouterError(
    'no_workers',
    503,
    `No workers available: ${parts.join(', ')}`,
    'service_unavailable',
  );
}

export function describeDecision(policy: string, d: Decision): string {
  const rate = d.matchRate === undefined ? '' : `; match=${d.matchRate.toFixed(3)}`;
  const cost = d.cost === undefined ? '' : `; ${describeCost(d.cost)}`;
  return `policy=${policy}; branch=${d.branch}${rate}; worker=${d.worker.key}${cost}`;
}
