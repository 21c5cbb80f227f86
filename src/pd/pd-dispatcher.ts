/**
 * Prefill/decode disaggregation (design sections 5-7).
 *
 * For /v1/completions, /v1/chat/completions, /v1/responses and /v1/messages: reconcile and choose BOTH roles in
 * one synchronous step before any network I/O (an empty role -> 503 naming the counts, nothing
 * created). Then, by dispatch mode:
 *
 *   sequential  prefill guard taken; the router POSTs the prefill leg itself; the guard is released
 *               when that call ends in any way (a failed leg is retried on another prefill worker up to
 *               --prefill-retries); only then is the decode guard taken and the request handed to Envoy
 *               with the decode body, X-Request-Id and destination (a decode worker that left the
 *               fleet during the leg is chosen again: decodeAfterPrefill). Decode load lives until the
 *               response body ends, errors, or the client goes away.
 *   concurrent  both guards at dispatch; the prefill leg runs in the background while Envoy streams the
 *               decode; each guard ends with its own phase. A failed prefill rejects `failure`, which the
 *               session turns into a client-visible error (or a reset mid-stream); it does not touch the
 *               decode guard. A request that ends while its prefill leg still runs (the client left, the
 *               stream was reset, or the decode answered an error: a `max_tokens` too large for the
 *               context is refused by the decode worker alone) aborts the leg (cutsLeg): vLLM aborts a
 *               request whose connection closes, and frees its KV blocks at once instead of holding
 *               them for a decode that never comes.
 *   overlapped  (Mooncake under `auto`, as vLLM's Mooncake proxy runs the legs) the prefill leg is
 *               started on a DP rank of a prefill instance whose bootstrap server answered
 *               (mooncake-bootstrap.ts; `X-data-parallel-rank` header, that rank's engine id in the
 *               decode leg, transfer_id `xfer-<request id>` on both) and the decode leg is handed to Envoy
 *               as soon as the prefill request is on a connected socket, without waiting for the
 *               prefill response: the decode worker pulls the KV when it is ready. A prefill leg that
 *               fails before it reached the worker (refused, unreachable: a killed instance) is retried
 *               on another prefill instance like a sequential one, since no decode leg exists yet; once
 *               it reached the worker, a failure is the concurrent case below. Prefill load lasts the
 *               prefill leg; decode load starts at dispatch, as in concurrent mode (the decode leg follows
 *               within a connect: a burst whose prefill connections are still opening spreads over the
 *               decode workers instead of all seeing them idle), and ends with the request.
 *   sidecar     (llm-d) both workers chosen, both guards taken, x-prefiller-host-port names the prefill
 *               worker and Envoy routes to decode, where a sidecar runs the prefill; the prefill guard is
 *               released at the first response byte, the decode guard at end of stream.
 *
 * A /v1/responses prefill leg asks for `max_output_tokens` 1 and is not stored (kv-transfer.ts
 * prefillBody); the decode leg names the response after its worker (routing/response-affinity.ts),
 * or with P2P NCCL and MoRI-IO after the P/D request id both legs carry in their bodies
 * (kv-transfer.ts idInBody), whose tail names that worker too (response-affinity.ts pdIdTail).
 * Other paths, and a /v1/responses request that continues a stored response, go to a decode worker
 * unchanged (the pass-through dispatcher).
 */
import type { Cancellation, Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../extproc/dispatch.js';
import { DECISION_HEADER, DP_RANK_HEADER, PREFILLER_HEADER, REQUEST_ID_HEADER } from '../extproc/headers.js';
import { RouterError } from '../request/router-error.js';
import {
  describeDecision,
  namedResponseBody,
  noWorkers,
  outsideSubset,
  routingContext,
} from '../routing/pool-dispatcher.js';
import { routeHeaders } from '../routing/route-headers.js';
import { destinationList } from '../routing/fallback-endpoints.js';
import { pdIdTail, responseIdFor } from '../routing/response-affinity.js';
import {
  choose,
  commit,
  reserve,
  type Chosen,
  type Reservation,
  type RoutingObserver,
} from '../routing/selector.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { Worker } from '../workers/worker.js';
import { guardWeight, LoadGuard } from '../workers/load-guard.js';
import type { Decision } from '../routing/policy.js';
import {
  decodeBody,
  decodeKvParams,
  idInBody,
  newTransferId,
  pdRequestId,
  prefillBody,
  prefillKvParams,
  readsPrefillParams,
  type Json,
  type KvConnector,
  type LegContext,
  type PdDispatchMode,
} from './kv-transfer.js';
import {
  PrefillError,
  type PrefillClient,
  type PrefillLegOptions,
  type PrefillResult,
} from './prefill-client.js';
import type { BootstrapDirectory } from './mooncake-bootstrap.js';
import { JsonUsageRewriter, SseUsageRewriter } from './usage-rewriter.js';
import { unsplittable, type WholeOnDecode } from './split-support.js';

export interface PdObserver {
  /**
   * A prefill leg ended. `durationMs`: how long the router's own call took; undefined when the router
   * did not run the leg (sidecar: the decode host's sidecar did, unseen). `status`: the prefill
   * worker's HTTP status, when it answered (a 4xx is the client's fault).
   */
  prefillEnded?(
    worker: Worker,
    outcome: 'ok' | PrefillError['kind'],
    durationMs: number | undefined,
    status?: number,
  ): void;
  /**
   * A prefill leg the router ran failed (not one the request's end cut short), retried or not: for
   * the log (prefill-failure-log.ts). `requestId`: the request's x-request-id as Envoy sent it;
   * `prefillRequestId`: the P/D request id the leg carried to the prefill worker.
   */
  prefillFailed?(
    worker: Worker,
    error: PrefillError,
    ids: { readonly requestId: string | undefined; readonly prefillRequestId: string },
  ): void;
  /**
   * A prefill leg the router runs itself starts on `worker`, chosen by `decision`; the returned
   * function (if any) is called once when it ends, with whether it succeeded and how long it took
   * (the prefill worker's time to its first token: what the cost model learns and queues).
   */
  prefillStarted?(
    worker: Worker,
    decision: Decision,
    /** The request's model ('' when unknown): a LoRA adapter counts on the prefill worker while its leg runs. */
    model: string,
  ): ((ok: boolean, durationMs: number) => void) | undefined;
  decodeRouted?(worker: Worker): void;
  /**
   * A request went whole to a decode worker, without a prefill leg: its prompt was short enough
   * (`localPrefill`), it runs several sequences (parallel sampling, batched prompts), or vLLM cannot
   * serve it split (a beam search, prompt logprobs: split-support.ts).
   */
  localPrefill?(reason: LocalPrefillReason): void;
  /** A decode worker was chosen (and committed) but the request failed before reaching it. */
  decodeAbandoned?(worker: Worker): void;
  error?(type: string): void;
}

/** Why a request skipped its prefill leg (PdDispatcher `localReason`). */
export type LocalPrefillReason = 'short_prompt' | 'parallel_sampling' | 'decode_only_model' | WholeOnDecode;

export interface PdDispatcherOptions {
  readonly prefillPool: WorkerPool;
  readonly decodePool: WorkerPool;
  readonly passthrough: Dispatcher;
  readonly observer: RoutingObserver;
  readonly pd?: PdObserver;
  readonly client: PrefillClient;
  readonly clock: () => number;
  readonly connector: KvConnector;
  readonly dispatch: 'auto' | PdDispatchMode;
  readonly prefillTimeoutMs: number;
  readonly prefillRetries: number;
  readonly decisionHeader: boolean;
  /** `--fallback-endpoints`: the decode destination list repeats the decode endpoint this often more. */
  readonly fallbackSlots?: number;
  /** Mooncake: engine ids per prefill instance; instances not ready are never selected. */
  readonly bootstrap?: BootstrapDirectory;
  /**
   * Selective disaggregation (`--pd-local-prefill-tokens`): a request whose prompt is at most
   * `maxTokens` (by `tokensOf`, an estimate from its routing text) goes whole to a decode worker.
   */
  readonly localPrefill?: {
    readonly maxTokens: number;
    tokensOf(chars: number, model: string): number;
  };
}

/** One prefill attempt's identity: request id, connector context, extra headers, DP-rank release. */
interface Leg {
  readonly ctx: LegContext;
  readonly requestId: string;
  readonly headers?: Record<string, string>;
  release(): void;
}

const NOTHING = (): void => undefined;

export class PdDispatcher implements Dispatcher {
  /** MoRI-IO: next DP rank per prefill instance with dp_size > 1 (vLLM's proxy rotates). */
  private readonly moriRank = new WeakMap<Worker, number>();

  constructor(private readonly opts: PdDispatcherOptions) {}

  /**
   * The gateway served a request on another decode worker than the one chosen (its own load
   * balancer, or a fallback endpoint of a pass-through request): the decode pool's dispatcher moves
   * the load there. The prefill leg, if any, has ended already.
   */
  adopt(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined {
    return this.opts.passthrough.adopt?.(req, from, endpoint);
  }

  dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
    // No prefill leg (needsPrefill): not an inference request, a stored response's follow-up (only
    // the decode worker stored it; prefill legs are not stored), a request running several sequences
    // or a prompt short enough to prefill on the decode worker (these two counted).
    const inf = req.inference;
    if (inf !== undefined && inf.previousResponseId === undefined && !this.servable(inf.model)) {
      this.opts.pd?.error?.('decode_only_model');
      throw decodeOnlyModel(inf.model);
    }
    const reason = this.localReason(req);
    if (inf === undefined || inf.previousResponseId !== undefined || reason !== undefined) {
      if (reason !== undefined) this.opts.pd?.localPrefill?.(reason);
      return this.opts.passthrough.dispatch(inf ? { ...req, prefillHere: true } : req, cancel);
    }
    const { prefillPool, decodePool } = this.opts;
    // --- one synchronous step: reconcile both roles, choose both, before any I/O ---
    prefillPool.reconcile();
    decodePool.reconcile();
    const ctx = routingContext(req);
    const p = choose(prefillPool, ctx, this.notReady());
    const d = choose(decodePool, ctx);
    if (!p || !d) {
      this.opts.pd?.error?.('no_workers');
      if (p && req.subset !== undefined) throw outsideSubset(decodePool, req.subset);
      throw noWorkers([prefillPool, decodePool]);
    }
    const mode = this.modeFor(p.decision.worker);
    if (mode === 'sidecar') return this.sidecar(req, p, d);
    if (mode === 'concurrent') return this.concurrent(req, p, d);
    if (mode === 'overlapped') return this.overlapped(req, p, d, cancel.signal);
    return this.sequential(req, p, d, cancel.signal);
  }

  /**
   * Whether the request gets a prefill leg: an inference request, except one that continues a stored
   * response (only its decode worker stored it, so that worker serves it alone:
   * routing/response-affinity.ts) and, with `localPrefill`, one whose prompt is short enough that its
   * decode worker prefills it for less than a KV transfer and a second hop costs. Admission reads it
   * too, so it weighs only the pools a request will use.
   */
  needsPrefill(req: RouteRequest): boolean {
    const inf = req.inference;
    return (
      inf !== undefined &&
      inf.previousResponseId === undefined &&
      this.localReason(req) === undefined &&
      this.servable(inf.model) // else refused at once (dispatch)
    );
  }

  /**
   * Whether `model` is served by the decode workers alone: some decode worker's `/v1/models` list
   * names it, and every prefill worker's list is read and none does (WorkerPool `served`), so a prefill
   * leg would only get the prefill worker's 404. Such a request goes whole to its decode worker (a model
   * colocated on the decode side, as llm-d serves a request without a prefill pod), except with P2P
   * NCCL, whose decode workers cannot prefill (see localReason): `servable`.
   */
  private decodeOnly(model: string): boolean {
    const { prefillPool, decodePool } = this.opts;
    prefillPool.reconcile();
    decodePool.reconcile();
    return prefillPool.served(model) === 'unserved' && decodePool.served(model) === 'served';
  }

  /**
   * Whether a request for `model` can be served (the fleet's model list, routing/model-list.ts, lists
   * the decode workers' models that are): false only for a model the decode workers alone serve while
   * they cannot serve a request whole (P2P NCCL); it gets a JSON 404 saying so.
   */
  servable(model: string): boolean {
    return this.opts.connector !== 'p2pnccl' || !this.decodeOnly(model);
  }

  /**
   * Why an inference request is served by its decode worker alone, or undefined when it gets a prefill
   * leg (or is not one the choice applies to: a stored response's follow-up).
   *
   * `parallel_sampling`: a request for several sequences (`n` > 1, or a batched completions prompt).
   * vLLM splits it into one engine request per sequence, each with a copy of its
   * `kv_transfer_params`: a prefill worker keeps every child's KV blocks for a remote decode but
   * answers with one child's parameters, so the others stay held until the connector's timeout
   * (NIXL: VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s), and the decode worker's children all name that
   * one child's blocks and request (vLLM PR #38900: "P/D did not support parallel sampling"; its
   * list-valued parameters are not in every release). On its decode worker alone the prompt is
   * prefilled once and its children share the cached blocks, on any vLLM version and connector.
   * Except P2P NCCL: it ties the legs by request id alone, and vLLM names each child after its
   * request's id on both legs (`<index>_<id>`; a batched prompt `<id>-<index>`), so every child's KV
   * reaches its own counterpart; while a P2P NCCL decode instance cannot prefill a request itself
   * (its connector waits for the pushed KV of every prompt, without end).
   *
   * `beam_search`, `prompt_logprobs`: what vLLM cannot serve split in two legs (split-support.ts).
   *
   * `decode_only_model`: no prefill worker serves its model, its decode workers do (decodeOnly).
   */
  private localReason(req: RouteRequest): LocalPrefillReason | undefined {
    const inf = req.inference;
    if (inf === undefined || inf.previousResponseId !== undefined) return undefined;
    if (this.opts.connector !== 'p2pnccl' && this.decodeOnly(inf.model)) return 'decode_only_model';
    if ((inf.sequences ?? 1) > 1 && this.opts.connector !== 'p2pnccl') return 'parallel_sampling';
    const whole = unsplittable(inf.kind, inf.json);
    if (whole !== undefined) return whole;
    const local = this.opts.localPrefill;
    return local !== undefined && local.tokensOf(inf.text.length, inf.model) <= local.maxTokens
      ? 'short_prompt'
      : undefined;
  }

  /** Mooncake: prefill instances whose bootstrap server has not answered (selection exclusion). */
  private notReady(): ReadonlySet<Worker> | undefined {
    return this.opts.connector === 'mooncake' ? this.opts.bootstrap?.notReady : undefined;
  }

  /** The identity of one prefill attempt; undefined when a Mooncake instance has no engine ids. */
  private leg(prefill: Worker, decode: Worker, mode: PdDispatchMode): Leg | undefined {
    const { connector } = this.opts;
    // Its tail names the decode worker: with idInBody it is the id of the response that worker stores.
    const requestId = pdRequestId(prefill, decode, pdIdTail(decode));
    if (connector === 'mooncake') {
      const lease = this.opts.bootstrap?.acquireRank(prefill);
      if (!lease) return undefined;
      return {
        ctx: {
          connector,
          mode,
          prefill,
          decode,
          transferId: newTransferId(connector, requestId),
          bootstrap: { addr: lease.addr, engineId: lease.engineId, rank: lease.rank },
        },
        requestId,
        headers: { [DP_RANK_HEADER]: String(lease.rank) },
        release: lease.release,
      };
    }
    // A prefill Worker that stands for one data-parallel rank is pinned to it (workers/data-parallel.ts).
    let dpRank: number | undefined = prefill.dpRank;
    const dpSize = prefill.metadata.dp_size;
    if (dpRank === undefined && connector === 'moriio' && typeof dpSize === 'number' && dpSize > 1) {
      dpRank = (this.moriRank.get(prefill) ?? 0) % dpSize;
      this.moriRank.set(prefill, dpRank + 1);
    }
    return {
      ctx: { connector, mode, prefill, decode, transferId: newTransferId(connector), dpRank },
      requestId,
      headers: dpRank !== undefined ? { [DP_RANK_HEADER]: String(dpRank) } : undefined,
      release: NOTHING,
    };
  }

  private modeFor(prefill: Worker): PdDispatchMode | 'overlapped' {
    if (this.opts.dispatch !== 'auto') return this.opts.dispatch;
    if (this.opts.connector === 'mooncake') return 'overlapped';
    if (this.opts.connector === 'moriio' && prefill.metadata.transfer_mode === 'WRITE') return 'concurrent';
    return 'sequential';
  }

  private async sequential(req: RouteRequest, p: Chosen, d: Chosen, signal: AbortSignal): Promise<Dispatch> {
    const { opts } = this;
    const now = opts.clock();
    const prefill = reserve(opts.prefillPool, p, opts.observer, now);
    commit(opts.decodePool, d, opts.observer, now);
    const decodeWorker = d.decision.worker;
    // Until its guard is taken, the decode counts for the decode pool's selection (Worker `pending`),
    // not as load: the requests chosen meanwhile do not all see its worker idle. It weighs what the
    // decode guard will: the decode leg's sequences (P2P NCCL splits parallel sampling too).
    const weight = guardWeight(req.inference?.sequences);
    decodeWorker.pending += weight;
    try {
      let leg: Awaited<ReturnType<PdDispatcher['prefillWithRetries']>>;
      try {
        leg = await this.prefillWithRetries(req, prefill, decodeWorker, signal);
      } catch (err) {
        // The decode worker was chosen but will never see this request.
        opts.pd?.decodeAbandoned?.(decodeWorker);
        throw err;
      }
      const { result, ctx, requestId, decision: prefillDecision } = leg;
      // No KV cache kept for a decode worker (vLLM keeps it only for a prefill capped at its one
      // token): the decode worker prefills the prompt itself, as vLLM's NIXL proxy sends it. A
      // request its one token ended (EOS, a stop) is vLLM's way; a capped one without params is a
      // prefill worker whose connector is not configured.
      const kvless = result.kvTransferParams === undefined && readsPrefillParams(ctx);
      if (kvless && !result.stopped) opts.pd?.error?.('prefill_no_kv_transfer_params');
      const kv = kvless ? undefined : decodeKvParams(ctx, result.kvTransferParams);
      if (kv && 'error' in kv) {
        opts.pd?.error?.('prefill_invalid_response');
        opts.pd?.decodeAbandoned?.(decodeWorker);
        throw new RouterError(
          'prefill_failed',
          502,
          `prefill worker ${ctx.prefill.url}: ${kv.error as string}`,
          'bad_gateway',
        );
      }
      // Without KV to pull, or with NIXL (the decode worker pulls the blocks the prefill worker
      // named, wherever it is), any decode worker can take the decode leg.
      const decode = this.decodeAfterPrefill(req, d, kvless || ctx.connector === 'nixl');
      // Weighs every sequence the decode leg runs (P2P NCCL splits parallel sampling too: localReason).
      const decodeGuard = new LoadGuard(decode.decision.worker, req.inference?.sequences);
      opts.pd?.decodeRouted?.(decode.decision.worker);
      const cached = result.cachedTokens;
      return this.decodeDispatch(
        req,
        decode,
        decodeGuard,
        requestId,
        decodeBody(req.inference?.json ?? {}, kv),
        // A decode worker that prefilled the prompt itself reports its own cached tokens honestly.
        kvless ? { prefill: prefillDecision } : { cachedTokens: () => cached, prefill: prefillDecision },
      );
    } finally {
      // After the decode guard is taken (the return above is evaluated first), or on failure.
      decodeWorker.pending -= weight;
    }
  }

  /**
   * The decode worker of a sequential request whose prefill leg has ended: the one chosen with the
   * prefill worker while it is still a member of its pool (one synchronous reconcile). One that left
   * during the leg (deregistered, expired, or another process at its URL: a new generation) gets no
   * request: when the decode leg can go to any decode worker (`anyDecode`: it prefills the prompt
   * itself, or pulls the KV the prefill worker named), another one is chosen now; else (the KV went
   * toward the one that left) the request fails with 503, as when no decode worker is there.
   */
  private decodeAfterPrefill(req: RouteRequest, d: Chosen, anyDecode: boolean): Chosen {
    const { decodePool, observer, clock } = this.opts;
    decodePool.reconcile();
    if (decodePool.holds(d.decision.worker)) return d;
    const again = anyDecode ? choose(decodePool, routingContext(req)) : undefined;
    if (again === undefined) {
      this.opts.pd?.error?.('no_workers');
      throw noWorkers([decodePool]);
    }
    commit(decodePool, again, observer, clock());
    return again;
  }

  /**
   * Requests whose decode leg will go to `worker` once their prefill leg ends (sequential dispatch
   * chooses the decode worker first and takes its guard later): a worker being drained for sleep
   * (admin/worker-sleep.ts) must wait for them as for its load.
   */
  pendingDecodes(worker: Worker): number {
    return worker.pending;
  }

  private concurrent(req: RouteRequest, p: Chosen, d: Chosen): Dispatch {
    const { opts } = this;
    const now = opts.clock();
    const prefill = reserve(opts.prefillPool, p, opts.observer, now);
    const decode = reserve(opts.decodePool, d, opts.observer, now);
    opts.pd?.decodeRouted?.(decode.decision.worker);
    const attempt = this.leg(prefill.decision.worker, decode.decision.worker, 'concurrent');
    if (!attempt) {
      // Only a forced `concurrent` Mooncake dispatch can get here, with the instance's engine ids gone.
      prefill.guard.release();
      decode.guard.release();
      opts.pd?.decodeAbandoned?.(decode.decision.worker);
      throw noWorkers([opts.prefillPool, opts.decodePool]);
    }
    const { ctx, requestId } = attempt;
    // The leg has its own abort: it is cancelled when the request ends before its response did (cutsLeg).
    const legAbort = new AbortController();
    let cached: number | undefined;
    const leg = this.runPrefill(req, ctx, requestId, prefill, legAbort.signal, {
      headers: attempt.headers,
    })
      .finally(attempt.release)
      .then(
        (r) => {
          cached = r.cachedTokens;
        },
        (err: PrefillError) => {
          throw err.kind === 'aborted'
            ? new RouterError('client_cancelled', 499, 'request ended')
            : prefillFailure(err, ctx.prefill);
        },
      );
    leg.catch(() => undefined); // observed by the session through `failure`
    const kv = decodeKvParams(ctx, undefined) as Json | undefined;
    return this.decodeDispatch(req, d, decode.guard, requestId, decodeBody(req.inference?.json ?? {}, kv), {
      cachedTokens: () => cached,
      prefilled: leg.then(NOTHING, NOTHING),
      prefill: prefill.decision,
      failure: leg,
      onFinish: (end) => {
        if (cutsLeg(end)) legAbort.abort();
      },
    });
  }

  private sidecar(req: RouteRequest, p: Chosen, d: Chosen): Dispatch {
    const { opts } = this;
    const now = opts.clock();
    // The closures keep the prefill's guard and worker, not its reservation (whose input holds the prompt).
    const { guard: prefillGuard, decision: prefillDecision } = reserve(
      opts.prefillPool,
      p,
      opts.observer,
      now,
    );
    const prefillWorker = prefillDecision.worker;
    const decode = reserve(opts.decodePool, d, opts.observer, now);
    opts.pd?.decodeRouted?.(decode.decision.worker);
    const dispatch = this.decodeDispatch(req, d, decode.guard, undefined, undefined, {
      prefill: prefillDecision,
      onFinish: () => {
        // Ended before the decode host answered: the sidecar's prefill (if it ran) was cut short.
        if (prefillGuard.release()) opts.pd?.prefillEnded?.(prefillWorker, 'aborted', undefined);
      },
    });
    return {
      ...dispatch,
      setHeaders: { ...dispatch.setHeaders, [PREFILLER_HEADER]: prefillWorker.endpoint },
      onResponseStart: (status) => {
        // The sidecar's prefill is over once the decode host answers.
        // Its duration is not measured here (the sidecar ran it): none is recorded.
        if (prefillGuard.release()) {
          opts.pd?.prefillEnded?.(prefillWorker, status >= 500 ? 'status' : 'ok', undefined, status);
        }
      },
    };
  }

  /** Sequential prefill: on failure, retry on another selectable prefill worker (bounded). */
  private async prefillWithRetries(
    req: RouteRequest,
    first: Reservation,
    decodeWorker: Worker,
    signal: AbortSignal,
  ): Promise<{ result: PrefillResult; ctx: LegContext; requestId: string; decision: Decision }> {
    const { opts } = this;
    const tried = new Set<Worker>();
    let prefill = first;
    // --prefill-timeout-ms bounds the whole prefill phase, retries included: Envoy's message_timeout
    // (90 s for a 60 s prefill timeout in the shipped configs) waits for this one reply, so a retry
    // with a fresh timeout of its own would let Envoy's bare 504 fire before the router's JSON error.
    // Counted from the request's arrival: the time flow control held it was that reply's wait too.
    const deadline = (req.arrivedAt ?? opts.clock()) + opts.prefillTimeoutMs;
    for (let attempt = 0; ; attempt++) {
      const worker = prefill.decision.worker;
      tried.add(worker);
      // The request id names the prefill peer (and Mooncake's transfer id the request id), so each
      // attempt gets its own.
      const leg = this.leg(worker, decodeWorker, 'sequential');
      try {
        if (!leg) {
          prefill.guard.release(); // runPrefill, which releases it, never runs for this attempt
          throw new PrefillError('transport', `prefill worker ${worker.url}: no bootstrap engine id`);
        }
        const result = await this.runPrefill(
          req,
          leg.ctx,
          leg.requestId,
          prefill,
          signal,
          { headers: leg.headers },
          Math.max(1, Math.ceil(deadline - opts.clock())),
        );
        return { result, ctx: leg.ctx, requestId: leg.requestId, decision: prefill.decision };
      } catch (err) {
        const e = err as PrefillError;
        if (e.kind === 'aborted')
          throw new RouterError('client_cancelled', 499, 'client went away during prefill');
        if (e.kind === 'transport') opts.bootstrap?.invalidate(worker);
        const next =
          attempt < opts.prefillRetries && !clientFault(e) && opts.clock() < deadline
            ? this.retryTarget(req, tried)
            : undefined;
        if (!next) throw prefillFailure(e, worker);
        opts.pd?.error?.('prefill_retry');
        prefill = reserve(opts.prefillPool, next, opts.observer, opts.clock());
      } finally {
        leg?.release();
      }
    }
  }

  /**
   * Mooncake legs the way vLLM's proxy runs them (see the module comment): the decode leg is handed to
   * Envoy once the prefill request is on a connected socket. Failures before that are retried.
   */
  private async overlapped(req: RouteRequest, p: Chosen, d: Chosen, signal: AbortSignal): Promise<Dispatch> {
    const { opts } = this;
    let prefill = reserve(opts.prefillPool, p, opts.observer, opts.clock());
    // The decode leg follows the prefill request within a connect: its load counts from now, so the
    // requests chosen meanwhile see it.
    const decodeGuard = reserve(opts.decodePool, d, opts.observer, opts.clock()).guard;
    const decodeWorker = d.decision.worker;
    // The leg's own abort: the client leaving before the handover, or the request ending without a
    // response after it.
    const legAbort = new AbortController();
    const onClientGone = (): void => legAbort.abort();
    signal.addEventListener('abort', onClientGone, { once: true });
    const tried = new Set<Worker>();
    try {
      for (let attempt = 0; ; attempt++) {
        const worker = prefill.decision.worker;
        tried.add(worker);
        const leg = this.leg(worker, decodeWorker, 'concurrent');
        let failed: PrefillError;
        if (leg) {
          let markSent!: () => void;
          const sent = new Promise<void>((resolve) => (markSent = resolve));
          const run = this.runPrefill(req, leg.ctx, leg.requestId, prefill, legAbort.signal, {
            headers: leg.headers,
            onSent: () => markSent(),
          }).finally(leg.release);
          const early = await Promise.race([sent, run.then(NOTHING, (e: PrefillError) => e)]);
          if (early === undefined) {
            return this.overlappedDecode(req, d, decodeGuard, leg, prefill.decision, run, legAbort);
          }
          failed = early;
        } else {
          prefill.guard.release();
          failed = new PrefillError('transport', `prefill worker ${worker.url}: no bootstrap engine id`);
        }
        if (failed.kind === 'aborted') {
          throw new RouterError('client_cancelled', 499, 'client went away during prefill');
        }
        if (failed.kind === 'transport') opts.bootstrap?.invalidate(worker);
        const next =
          attempt < opts.prefillRetries && !clientFault(failed) ? this.retryTarget(req, tried) : undefined;
        if (!next) throw prefillFailure(failed, worker);
        opts.pd?.error?.('prefill_retry');
        prefill = reserve(opts.prefillPool, next, opts.observer, opts.clock());
      }
    } catch (err) {
      decodeGuard.release();
      opts.pd?.decodeAbandoned?.(decodeWorker);
      throw err;
    } finally {
      signal.removeEventListener('abort', onClientGone);
    }
  }

  /** The decode half of an overlapped request, with the prefill leg `run` still in flight. */
  private overlappedDecode(
    req: RouteRequest,
    d: Chosen,
    decodeGuard: LoadGuard,
    leg: Leg,
    prefillDecision: Decision,
    run: Promise<PrefillResult>,
    legAbort: AbortController,
  ): Dispatch {
    const { opts } = this;
    const prefillWorker = leg.ctx.prefill;
    let cached: number | undefined;
    const failure = run.then(
      (r) => {
        cached = r.cachedTokens;
      },
      (err: PrefillError) => {
        if (err.kind === 'transport') opts.bootstrap?.invalidate(prefillWorker);
        throw err.kind === 'aborted'
          ? new RouterError('client_cancelled', 499, 'request ended')
          : prefillFailure(err, prefillWorker);
      },
    );
    failure.catch(() => undefined); // observed by the session through `failure`
    opts.pd?.decodeRouted?.(d.decision.worker);
    const kv = decodeKvParams(leg.ctx, undefined) as Json;
    return this.decodeDispatch(
      req,
      d,
      decodeGuard,
      leg.requestId,
      decodeBody(req.inference?.json ?? {}, kv),
      {
        cachedTokens: () => cached,
        prefilled: failure.then(NOTHING, NOTHING),
        prefill: prefillDecision,
        failure,
        onFinish: (end) => {
          if (cutsLeg(end)) legAbort.abort();
          // A failed decode may mean stale engine ids (a restarted prefill instance): ask again.
          if (end.kind === 'response' && end.status >= 500) opts.bootstrap?.recheck(prefillWorker);
        },
      },
    );
  }

  /** Runs one prefill leg; its guard is released when the call ends, whatever the outcome. */
  private async runPrefill(
    req: RouteRequest,
    ctx: LegContext,
    requestId: string,
    reservation: Reservation,
    signal: AbortSignal,
    leg: PrefillLegOptions = {},
    timeoutMs: number = this.opts.prefillTimeoutMs,
  ): Promise<PrefillResult> {
    const guard = reservation.guard;
    const inf = req.inference;
    const responses = inf?.kind === 'responses';
    const json = prefillBody(inf?.json ?? {}, prefillKvParams(ctx), responses);
    if (idInBody(ctx.connector, responses)) json.request_id = requestId;
    const body = Buffer.from(JSON.stringify(json));
    const started = performance.now();
    // Nothing between here and the try can throw: every started leg is ended exactly once.
    const ended = this.opts.pd?.prefillStarted?.(
      ctx.prefill,
      reservation.decision,
      req.inference?.model ?? '',
    );
    try {
      const r = await this.opts.client.send(
        ctx.prefill,
        req.path,
        body,
        req.headers,
        requestId,
        signal,
        timeoutMs,
        leg,
      );
      guard.release();
      const ms = performance.now() - started;
      ended?.(true, ms);
      this.opts.pd?.prefillEnded?.(ctx.prefill, 'ok', ms);
      return r;
    } catch (err) {
      const e = err instanceof PrefillError ? err : new PrefillError('transport', (err as Error).message);
      guard.release();
      const ms = performance.now() - started;
      ended?.(false, ms);
      this.opts.pd?.prefillEnded?.(ctx.prefill, e.kind, ms, e.status);
      if (e.kind !== 'aborted') {
        this.opts.pd?.error?.(`prefill_${e.kind}`);
        this.opts.pd?.prefillFailed?.(ctx.prefill, e, {
          requestId: req.headers[REQUEST_ID_HEADER],
          prefillRequestId: requestId,
        });
      }
      throw e;
    }
  }

  /** Another selectable prefill worker for a retry (synchronous reconcile + choose), if any. */
  private retryTarget(req: RouteRequest, tried: ReadonlySet<Worker>): Chosen | undefined {
    this.opts.prefillPool.reconcile();
    const notReady = this.notReady();
    const exclude = notReady && notReady.size > 0 ? new Set([...tried, ...notReady]) : tried;
    return choose(this.opts.prefillPool, routingContext(req), exclude);
  }

  private decodeDispatch(
    req: RouteRequest,
    d: Chosen,
    guard: LoadGuard,
    requestId: string | undefined,
    body: Json | undefined,
    extra: {
      cachedTokens?: () => number | undefined;
      /**
       * Settles when `cachedTokens` is final (the prefill leg running beside the decode ended, either
       * way); absent: it is final already.
       */
      prefilled?: Promise<void>;
      prefill: Decision;
      failure?: Promise<unknown>;
      onFinish?: (end: RequestEnd) => void;
    },
  ): Dispatch {
    // The closures below outlive this call (until the response ends): they may hold the decision,
    // never `d` or `req`, whose selection input holds the prompt and the parsed body (a 220 KB prompt
    // kept for the whole response survives young-generation GCs and waits for a full one).
    const decision = d.decision;
    const prefillDecision = extra.prefill;
    const { cachedTokens, onFinish } = extra;
    const worker = decision.worker;
    // One decode worker: the prefill leg's KV waits for it. Its endpoint fills every fallback slot, so
    // a retry never reaches a decode host the router did not choose (routing/fallback-endpoints.ts).
    const destination = destinationList(worker, [], this.opts.fallbackSlots ?? 0);
    const setHeaders: Record<string, string> = routeHeaders(worker, destination);
    let rewritten: Buffer | undefined;
    if (body) {
      if (requestId !== undefined && idInBody(this.opts.connector, req.inference?.kind === 'responses')) {
        body.request_id = requestId;
      } else if (req.inference?.namesFreeResponse) body.request_id = responseIdFor(worker);
      rewritten = Buffer.from(JSON.stringify(body));
    } else {
      rewritten = namedResponseBody(req, worker);
    }
    if (requestId) setHeaders[REQUEST_ID_HEADER] = requestId;
    const streamed = req.inference?.stream === true;
    const rewriter = streamed && cachedTokens ? new SseUsageRewriter(cachedTokens) : undefined;
    // A non-streamed answer's usage is in its one JSON body: a 2xx one is held whole and rewritten.
    const rewritesWhole = !streamed && cachedTokens !== undefined && req.inference !== undefined;
    let whole: JsonUsageRewriter | undefined;
    const rewrite = rewriter
      ? (chunk: Buffer, eos: boolean) => rewriter.transform(chunk, eos)
      : rewritesWhole
        ? (chunk: Buffer, eos: boolean) => whole?.transform(chunk, eos)
        : undefined;
    // A usage frame (or a whole body's end) can come before the router has read the prefill leg
    // running beside the decode (a short answer ends as soon as its KV arrived): its rewrite waits
    // for the prefill worker's figure, bounded by the leg's own timeout. Once it waits, the leg's
    // failure no longer resets the response: the decode's answer is whole, and its usage goes on
    // without `cached_tokens`, as when the prefill worker reported none.
    let prefilled = extra.prefilled;
    prefilled?.then(() => (prefilled = undefined));
    let waited = false;
    const transform =
      rewrite &&
      ((chunk: Buffer, eos: boolean): Buffer | undefined | Promise<Buffer | undefined> => {
        // Scanned only while the figure is pending (never in sequential mode: it is known already).
        if (prefilled === undefined) return rewrite(chunk, eos);
        const readsFigure = rewriter ? rewriter.readsFigure(chunk) : whole?.readsFigure(eos);
        if (!readsFigure) return rewrite(chunk, eos);
        waited = true;
        return prefilled.then(() => rewrite(chunk, eos));
      });
    const failure = extra.failure?.catch((err: unknown) => {
      if (!waited) throw err;
    });
    failure?.catch(() => undefined); // observed by the session
    const decisionHeader = this.opts.decisionHeader;
    const prefillPolicy = this.opts.prefillPool.policy.name;
    const decodePolicy = this.opts.decodePool.policy.name;
    return {
      worker,
      decision,
      setHeaders,
      body: rewritten,
      failure,
      responseHeaders: decisionHeader
        ? () => ({
            [DECISION_HEADER]: `${describeDecision(decodePolicy, decision)}; prefill_${describeDecision(prefillPolicy, prefillDecision).replace(/; /g, '; prefill_')}`,
          })
        : undefined,
      transformResponseChunk: transform,
      ...(rewritesWhole
        ? {
            onResponseStart: (status: number) => {
              if (status >= 200 && status < 300) whole = new JsonUsageRewriter(cachedTokens);
            },
            removeResponseHeaders: () => (whole !== undefined ? LENGTH_HEADER : undefined),
          }
        : {}),
      finish: (end) => {
        guard.release();
        onFinish?.(end);
      },
    };
  }
}

/** The worker's Content-Length, which a rewritten body no longer matches. */
const LENGTH_HEADER: readonly string[] = Object.freeze(['content-length']);

/**
 * Whether the decode dispatch's end cuts a prefill leg still running beside it: the request is over
 * before its response ended (cancelled, rejected, ...), or its response was an error (the decode
 * worker refused the request, e.g. a `max_tokens` too large for the prompt, which the prefill leg's
 * one token never is; or Envoy's 503 for a decode worker it could not reach): no decode will pull the
 * prompt's KV, which the prefill worker would otherwise compute and then hold for it
 * (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, 480 s). Not a successful response (its prefill is done, its
 * answer on its way), and not a decode the gateway served on another endpoint (`failed_over`): the
 * request goes on there.
 */
function cutsLeg(end: RequestEnd): boolean {
  if (end.kind === 'response') return end.status >= 400;
  return end.kind !== 'failed_over';
}

/**
 * A prefill worker's 4xx refused the client's request itself (a prompt longer than the context, a bad
 * parameter): another worker would refuse it too, and the client needs the worker's status and
 * message, as a regular fleet gives them. Not 404 (a LoRA adapter this worker lacks), 408 or 429:
 * another worker may take it.
 */
function clientFault(e: PrefillError): boolean {
  const s = e.status;
  return e.kind === 'status' && s !== undefined && s >= 400 && s < 500 && s !== 404 && s !== 408 && s !== 429;
}

/** A request for a model only the decode workers serve, which they cannot serve whole (P2P NCCL). */
function decodeOnlyModel(model: string): RouterError {
  return new RouterError(
    'model_not_found',
    404,
    `The model \`${model}\` is served by decode workers only: no prefill worker serves it, and a P2P NCCL ` +
      'decode worker cannot prefill a request itself.',
  );
}

/**
 * The client's error for a prefill leg that failed for good. A 4xx is the worker's own answer, given as
 * it gave it: the client's fault, or (404, 408, 429, once no other prefill worker took it) a model no
 * worker serves (vLLM's "The model `x` does not exist."), a timeout or a rate limit the client can act on,
 * as a regular fleet answers them. Anything else is a 502.
 */
function prefillFailure(e: PrefillError, worker: Worker): RouterError {
  const s = e.status;
  if (e.kind === 'status' && s !== undefined && s >= 400 && s < 500) {
    return new RouterError(
      'prefill_failed',
      e.status as number,
      e.detail ?? `prefill worker ${worker.url} answered ${e.status as number}`,
    );
  }
  const what =
    e.kind === 'status'
      ? `answered ${e.status}`
      : e.kind === 'timeout'
        ? 'timed out'
        : e.kind === 'invalid_response'
          ? 'sent an invalid response'
          : 'was unreachable';
  return new RouterError(
    e.kind === 'timeout' ? 'prefill_timeout' : 'prefill_failed',
    502,
    `prefill worker ${worker.url} ${what}${e.status ? '' : `: ${e.message}`}`,
    'bad_gateway',
  );
}
