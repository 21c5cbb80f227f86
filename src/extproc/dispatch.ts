/**
 * What an ext_proc session asks of the routing layer, and what it gets back.
 *
 * A Dispatcher turns one request into a Dispatch: the chosen destination, the header/body rewrites
 * Envoy must apply, and the load reservations the request holds. The session owns the Dispatch and
 * calls finish() exactly once on whichever way the request ends (finish is idempotent anyway).
 */
import type { HeaderSet } from './mutations.js';
import type { InferenceRequest } from '../request/inference-request.js';
import type { Worker } from '../workers/worker.js';
import type { CacheFeedback, Decision } from '../routing/policy.js';
import type { RequestEnd } from '../request/request-end.js';

export type { RequestEnd } from '../request/request-end.js';

export interface RouteRequest {
  readonly method: string;
  readonly path: string;
  /** Lower-cased request headers as the client sent them. */
  readonly headers: Readonly<Record<string, string>>;
  /** Parsed inference body for /v1/completions and /v1/chat/completions. */
  readonly inference?: InferenceRequest;
  /** The raw request body, when there was one. */
  readonly body?: Buffer;
  /**
   * The endpoints the gateway allows for this request (the endpoint-picker protocol's subset hint,
   * extproc/lb-metadata.ts): the worker Envoy is sent to must be one of them. Absent: any.
   */
  readonly subset?: ReadonlySet<string>;
  /**
   * Set by the P/D dispatcher on an inference request a decode worker serves whole, without a prefill
   * leg (a short prompt, several sequences, a stored response's follow-up): that worker prefills it,
   * so the decode pool prices its prefill and prefix cache as a regular pool does.
   */
  readonly prefillHere?: boolean;
  /**
   * Clock time the request reached the router, when it waited there before this dispatch (flow
   * control held it: routing/flow-control.ts). Envoy's ext_proc `message_timeout` bounds the whole
   * wait for the router's answer, so a P/D prefill leg's deadline counts from it. Absent: now.
   */
  readonly arrivedAt?: number;
}

/** What a dispatch forwards instead of a response body chunk (see transformResponseChunk). */
export type ChunkRewrite = Buffer | undefined | Promise<Buffer | undefined>;

export interface Dispatch {
  /** The worker Envoy sends the request to. */
  readonly worker: Worker;
  readonly decision: Decision;
  /** The policy wants the worker's usage report on the prompt (routing/policy.ts CacheFeedback). */
  readonly cacheFeedback?: CacheFeedback;
  /** Headers to set on the upstream request (destination, request id, ...). */
  readonly setHeaders: HeaderSet;
  /** Replacement request body, when the dispatcher rewrote it. */
  readonly body?: Buffer;
  /** Extra response headers (e.g. the decision header); called once. */
  responseHeaders?(status: number): HeaderSet | undefined;
  /**
   * Response headers to remove, asked once with responseHeaders: `content-length` when the dispatch
   * rewrites the body to another length (Envoy keeps the worker's otherwise, and the client would
   * get a body that does not match it).
   */
  removeResponseHeaders?(status: number): readonly string[] | undefined;
  /**
   * Optional rewrite of a response body chunk; return undefined to pass the chunk unchanged. A promise:
   * the chunk's reply waits for it (a P/D usage frame waiting for the prefill leg's figure), and so do
   * the messages behind it.
   */
  transformResponseChunk?(chunk: Buffer, endOfStream: boolean): ChunkRewrite;
  /**
   * Whether this request needs its response body chunk by chunk (rewrites it, or learns from it).
   * Asked at most once, at the response headers, and only when the body could be skipped (a 2xx
   * response with a body, extproc/response-body-mode.ts). Absent: yes. A dispatch that answers false
   * may still see chunks (an Envoy without `allow_mode_override` sends them anyway).
   */
  watchResponseBody?(status: number): boolean;
  /**
   * Called at the first response byte (headers) — e.g. releases a sidecar-run prefill guard.
   * `bodyWatched`: false when the router told Envoy to skip the response body (no chunk will come).
   */
  onResponseStart?(status: number, bodyWatched: boolean): void;
  /** Releases everything the request still holds. Idempotent. */
  finish(end: RequestEnd): void;
  /**
   * A concurrently running leg (P/D prefill): rejects when it fails, so the session can turn the failure
   * into a client-visible error instead of a hang; resolves when it succeeds. (Resolving matters: a
   * promise that never settles would keep every session that awaits it reachable.)
   */
  readonly failure?: Promise<unknown>;
}

/**
 * Aborted when the request goes away while its dispatch is still in flight. The signal is created
 * on first access (an AbortController per request is measurable on the hot path, and only a
 * dispatcher that awaits I/O needs one); an AbortController satisfies this interface.
 */
export interface Cancellation {
  readonly signal: AbortSignal;
}

/** A request the router answers itself, without a worker (the session sends it as JSON). */
export interface LocalAnswer {
  readonly status: number;
  readonly body: unknown;
  /** The ImmediateResponse's `details` suffix (`vllm_router_<details>`). */
  readonly details: string;
}

export interface Dispatcher {
  dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch>;
  /**
   * The gateway served `from`'s request on `endpoint` instead (a fallback endpoint, or its own load
   * balancer's choice once the list ran out): a Dispatch holding the request's load on that worker,
   * or undefined when no worker of the pool has that endpoint. `req` carries the request line, the
   * headers and what the request weighs (its parsed `inference` without body or prompt: kind, model,
   * stream, sequences; the body is gone by then). The caller then finishes `from` (`failed_over`).
   */
  adopt?(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined;
}
