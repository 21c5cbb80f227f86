/**
 * Per request: does the router watch the response body chunk by chunk, or tell Envoy to skip it?
 *
 * With `response_body_mode: STREAMED` Envoy sends every response chunk to the router and waits for
 * each reply: a small request costs 4 ext_proc messages each way, a 64-chunk stream ~67 (issue 15).
 * Most requests need none of them: the router only has to know when the response ends, to release
 * the load guard. So, on the reply to the response headers (the first reply where both hold: Envoy
 * 1.40 honours `mode_override` on the replies to request or response headers, not on a body reply;
 * and only at the response headers does the router know the status and whether the dispatch reads
 * the body), it may override the rest of the stream's processing mode to
 *
 *   response_body_mode NONE        no body chunks
 *   response_trailer_mode SEND     Envoy keeps the ext_proc stream open for the trailers it would
 *                                  send; an upstream without trailers (HTTP/1 vLLM) sends none, so
 *                                  the stream ends only when Envoy destroys the filter: when the
 *                                  downstream response has ended or was cut (half-close with the
 *                                  `ext_proc_graceful_grpc_close` runtime flag, reset without).
 *
 * (verified against Envoy 1.40 in test/e2e/response-body-skip.test.ts). Envoy honours the override
 * only with the filter's `allow_mode_override: true` (and, if the filter sets
 * `allowed_override_modes`, only a listed mode); otherwise it sends the chunks anyway and the router
 * answers them as before.
 *
 * What skipping gives up, and so when the body is watched after all:
 *   - streams with a FULL_DUPLEX_STREAMED body either way (Envoy refuses overrides there, and the
 *     override's request body mode, BUFFERED, would not describe the stream);
 *   - responses that have no body (headers with end_of_stream: nothing to skip);
 *   - non-2xx responses (error bodies are small, and their end tells a complete error answer from
 *     a cut one);
 *   - requests whose dispatch reads the chunks (`Dispatch.watchResponseBody`): P/D usage rewriting,
 *     and the sampled share of streamed responses that feeds the timing estimates
 *     (load/timing-dispatcher.ts, `--response-body-sample`).
 * A skipped response's end cannot tell complete from cut: it ends as `unwatched`
 * (request/request-end.ts), never as `ok`.
 *
 * With `response_body_mode: NONE` in the filter itself there is no chunk to watch: every routed
 * response is unwatched, whatever its status or dispatch, and the router still sets the override on
 * the reply to its headers, so that with `allow_mode_override` the trailers are `SEND` (the stream
 * then stays open to the response's end whatever the request body mode; processing-modes.ts).
 */
import { BodySendMode, HeaderSendMode, type ProcessingMode } from './proto.js';
import type { BodyMode } from './body-mode-replies.js';

/** How Envoy sends the response body on a stream (protocol_config); 'none': response_body_mode NONE. */
export type ResponseBodyMode = BodyMode | 'none';

export interface ResponseStart {
  /** How Envoy sends the request body on this stream (protocol_config). */
  readonly requestMode: BodyMode;
  /** How Envoy sends the response body on this stream (protocol_config). */
  readonly mode: ResponseBodyMode;
  readonly status: number;
  /** The response headers carried end_of_stream (no body). */
  readonly endOfStream: boolean;
  /** A destination was handed to Envoy (not Envoy's own local reply to an unrouted request). */
  readonly routed: boolean;
}

/**
 * Whether the response body could be skipped, before asking the dispatch whether it reads it (with
 * mode 'none' nothing reads it: any status).
 */
export function bodySkippable(r: ResponseStart): boolean {
  return (
    r.routed &&
    r.requestMode === 'per_message' &&
    !r.endOfStream &&
    (r.mode === 'none' || (r.mode === 'per_message' && r.status >= 200 && r.status < 300))
  );
}

/** The processing mode for the rest of a stream whose response body is skipped. */
export const SKIP_RESPONSE_BODY: ProcessingMode = Object.freeze({
  request_header_mode: HeaderSendMode.SEND,
  response_header_mode: HeaderSendMode.SEND,
  request_body_mode: BodySendMode.BUFFERED,
  response_body_mode: BodySendMode.NONE,
  request_trailer_mode: HeaderSendMode.SKIP,
  response_trailer_mode: HeaderSendMode.SEND,
});
