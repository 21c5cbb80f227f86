/**
 * How a request ended: ONE record, built once by the ext_proc session, and the two projections every
 * consumer reads from it. Nothing else classifies the end of a request.
 *
 *   RequestEnd (the record)
 *     ├─ requestOutcome(end, stage) -> Outcome          metrics label (vllm_router_requests_total)
 *     └─ healthOutcome(end)         -> HealthOutcome    passive health of the routed worker (breaker)
 *
 * A prefill leg (P/D) ends on its own, before or beside the request: `prefillHealthOutcome` projects
 * that end (PrefillError kind, prefill worker status) onto the same HealthOutcome scale.
 *
 * The table (test/unit/request/request-end.test.ts enumerates every row):
 *
 *   way the request ended                       record                          outcome      health
 *   response end-of-stream, status < 400        response(status)                ok           success
 *   response end-of-stream, 4xx                 response(status)                upstream_4xx success
 *   response end-of-stream, 5xx (incl. Envoy's  response(status)                upstream_5xx server_error
 *     local reply for connect failure/reset)
 *   Envoy's local reply, never routed           response(status), unrouted      abandoned    -
 *   router answered 4xx itself (bad input)      rejected(4xx)                   rejected     cancelled
 *   router answered 503 no_workers              rejected(503, no_workers)       no_workers   cancelled
 *   router shed a sheddable request (429,       rejected(429, pool_saturated)   shed         cancelled
 *     routing/admission.ts), or refused one
 *     flow control could not hold (queue_full,
 *     queue_timeout: routing/flow-control.ts)
 *   router answered another 5xx (prefill, bug)  rejected(5xx)                   error        cancelled
 *   stream ended before the router routed it    cancelled(before headers)       abandoned    -
 *   stream ended during the dispatch (prefill)  cancelled(before headers)       no_response  no_response
 *   routed, stream ended before response heads  cancelled(before headers)       no_response  no_response
 *   ended after response headers (abort, reset) cancelled(after headers, s)     cancelled    cancelled,
 *                                                                                             server_error if s >= 500
 *   2xx response whose body the router skipped  unwatched(status)               unwatched    success
 *     (extproc/response-body-mode.ts), stream
 *     ended: complete or cut, it cannot tell
 *   a 4xx / 5xx response skipped (only with     unwatched(status)               upstream_4xx success /
 *     response_body_mode NONE in the filter)                                  / _5xx       server_error
 *   router answered a request for itself (its   answered(status)                answered     -
 *     fleet's GET /v1/models), no worker asked
 *   the router closing (drain timed out) ended  released(status?)               released     cancelled
 *     a routed stream itself with gRPC OK: Envoy
 *     carries on without it, the response goes on
 *   the gateway served the request on a         failed_over(served)             (no end: the server_error
 *     fallback endpoint (the routed worker          request goes on, its load
 *     refused or reset it; routing/fallback-        moves to the served worker)
 *     endpoints.ts): ends the routed worker's
 *     part only
 *
 * Health: `success` and the failures (`server_error`, `prefill_failed`) feed the worker's circuit
 * breaker (health/health-dispatcher.ts records a routed request at its response headers, by their
 * status, so the rows ending after them only count for a request whose headers it never saw);
 * `cancelled` and `no_response` are neutral (see health/worker-health.ts for why a stream
 * without response headers is not the worker's fault). A rejected request never reached the worker:
 * neutral. A 4xx is the client's fault: success for the worker. An unwatched response counts as a
 * success: the worker answered 2xx headers, which is all the router saw; a worker that cuts its
 * streams mid-body is no failure in the watched share either (cancelled after headers < 500: neutral).
 */

/** The end of a request, as the session saw it. `status` is the HTTP status the client got. */
export type RequestEnd =
  /** Response end-of-stream reached (headers with end_of_stream, last body chunk, or trailers). */
  | { readonly kind: 'response'; readonly status: number }
  /** The stream ended first (client abort, upstream reset, message timeout); `status` if headers came. */
  | { readonly kind: 'cancelled'; readonly afterHeaders: boolean; readonly status?: number }
  /** The router answered itself with an ImmediateResponse (its status and error code, when known). */
  | { readonly kind: 'rejected'; readonly status?: number; readonly code?: string }
  /**
   * The stream ended after the headers of a response whose body the router did not watch (Envoy
   * skipped it, extproc/response-body-mode.ts): the response ended, complete or cut.
   */
  | { readonly kind: 'unwatched'; readonly status: number }
  /**
   * The router, closing, ended the ext_proc stream of a routed request itself (gRPC OK) before the
   * response ended: Envoy carries on without it, so the response goes on to the client
   * (extproc/server.ts `close`). `status` if the response headers had come.
   */
  | { readonly kind: 'released'; readonly status?: number }
  /** The router answered the request itself, as a worker would (routing/model-list.ts): no worker saw it. */
  | { readonly kind: 'answered'; readonly status: number }
  /**
   * Not an end of the request: the gateway reported that another endpoint of the destination list
   * served it (extproc/lb-metadata.ts). Ends the routed worker's part (its guard, its health: it
   * refused or reset the request); the request goes on under a dispatch for the served worker.
   */
  | { readonly kind: 'failed_over'; readonly served: string };

/** How far routing got when the request ended. */
export type RoutingStage =
  | 'unrouted' // no dispatch was started (or the dispatcher threw)
  | 'dispatching' // an async dispatch (a P/D prefill leg) was in flight
  | 'routed'; // a destination was handed to Envoy

export type Outcome =
  | 'ok' // upstream answered < 400 and the body ended
  | 'upstream_4xx'
  | 'upstream_5xx'
  | 'rejected' // the router answered 4xx itself (bad input)
  | 'shed' // the router answered 429 (503) to a request while its workers were saturated
  | 'no_workers' // 503 from the router
  | 'error' // other router-generated 5xx (prefill failure, internal)
  | 'no_response' // routed, but the stream ended before response headers (Envoy local reply, abort)
  | 'cancelled' // ended after response headers, before end-of-stream (client abort, upstream reset)
  | 'abandoned' // ended before the router routed it
  | 'unwatched' // 2xx response whose body the router skipped: ended, complete or cut (unknown)
  | 'released' // routed, handed back to Envoy by the router closing: the response went on without it
  | 'answered'; // the router answered for the fleet itself (GET /v1/models)

export type HealthOutcome = 'success' | 'server_error' | 'no_response' | 'prefill_failed' | 'cancelled';

/** The metrics outcome of a request. */
export function requestOutcome(end: RequestEnd, stage: RoutingStage): Outcome {
  switch (end.kind) {
    case 'response':
      if (stage !== 'routed') return 'abandoned'; // Envoy's local reply to a request we never routed
      return end.status >= 500 ? 'upstream_5xx' : end.status >= 400 ? 'upstream_4xx' : 'ok';
    case 'rejected':
      if (end.code === 'pool_saturated' || end.code === 'queue_full' || end.code === 'queue_timeout') {
        return 'shed';
      }
      if (end.status === undefined || end.status < 500) return 'rejected';
      return end.code === 'no_workers' ? 'no_workers' : 'error';
    case 'cancelled':
      if (end.afterHeaders) return 'cancelled';
      return stage === 'unrouted' ? 'abandoned' : 'no_response';
    case 'unwatched':
      // Skipped bodies are 2xx ones, but with response_body_mode NONE in the filter every response
      // is skipped: an error status still says what the client got.
      return end.status >= 500 ? 'upstream_5xx' : end.status >= 400 ? 'upstream_4xx' : 'unwatched';
    case 'released':
      return 'released';
    case 'answered':
      return 'answered';
    case 'failed_over':
      return 'no_response'; // never a session's end; for the routed worker: routed, no response
  }
}

/** The passive-health outcome of a routed request for the worker it was routed to. */
export function healthOutcome(end: RequestEnd): HealthOutcome {
  switch (end.kind) {
    case 'response':
      return end.status >= 500 ? 'server_error' : 'success';
    case 'cancelled':
      if (!end.afterHeaders) return 'no_response';
      return end.status !== undefined && end.status >= 500 ? 'server_error' : 'cancelled';
    case 'rejected':
      return 'cancelled'; // the router answered: says nothing about this worker
    case 'unwatched':
      return end.status >= 500 ? 'server_error' : 'success';
    case 'released':
      return 'cancelled'; // the router let go: says nothing about this worker
    case 'answered':
      return 'cancelled'; // no worker was asked (never routed: not fed to any breaker)
    case 'failed_over':
      return 'server_error'; // the gateway gave up on this worker before it answered
  }
}

/**
 * The passive-health outcome of a prefill leg from how it ended ('ok' or a PrefillError kind).
 * `status` (the prefill worker's answer, when it gave one) keeps a 4xx - the client's request was
 * bad - from counting against the worker; without it every 'status' error counts as a failure.
 */
export function prefillHealthOutcome(kind: string, status?: number): HealthOutcome {
  if (kind === 'ok') return 'success';
  if (kind === 'aborted') return 'cancelled';
  if (kind === 'status' && status !== undefined && status < 500) return 'success';
  return 'prefill_failed';
}
