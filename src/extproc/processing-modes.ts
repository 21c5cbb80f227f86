/**
 * The ext_proc filter settings the router cannot route with, recognised from what Envoy tells it on a
 * stream, each named with the change that fixes it (docs/deploy-envoy.md, "Processing modes"). Pure:
 * the session answers or logs.
 *
 *   setting (as Envoy shows it)            what Envoy 1.40 does                   the router
 *   request_body_mode STREAMED or NONE     passes the request headers on before   refuses every request
 *     (protocol_config; a request with a     the router has read the body (unless   with a body: JSON 500
 *     body)                                  the whole body came with them): the    `unsupported_processing_
 *                                            request leaves without a destination   mode` naming the fix
 *                                            (503 `no healthy upstream`), or the
 *                                            router routed on the first chunk (400
 *                                            `invalid_json`); NONE: never a body
 *   response_body_mode NONE with           ends the router's stream at the        logs the fix (the
 *     request_body_mode FULL_DUPLEX_         response headers when                  request is routed)
 *     STREAMED (protocol_config)             response_trailer_mode is SKIP: the
 *                                            worker's load is released while it
 *                                            still generates
 *   observability_mode: true               ignores every reply: no request ever   logs the fix (a reply
 *                                            gets a destination (503)               cannot reach the client)
 *   response_header_mode SKIP (a response  the router cannot see the status nor   logs the fix; Envoy
 *     body message before the response       edit the headers of the response       resets the response
 *     headers)
 *
 * response_body_mode NONE is otherwise followed: with response_trailer_mode SEND Envoy keeps the
 * stream open for the trailers until the response has ended or was cut (whatever the request body
 * mode); with SKIP Envoy 1.40 closes the stream once the response headers were answered and the
 * request direction is done, which a BUFFERED (or BUFFERED_PARTIAL) request body never is to its
 * stream-close check: the stream again stays open to the end. Every response then ends `unwatched`
 * (response-body-mode.ts). The router cannot see the trailer mode, hence the conditional message.
 *
 * BUFFERED_PARTIAL works as BUFFERED for a body within Envoy's buffer limit (the headers are held
 * until the body's reply); a larger body is sent in part, above `--max-body-bytes` when Envoy's limit
 * is at least the router's (the JSON 413).
 */
import { BodySendMode, type ProtocolConfiguration } from './proto.js';

const FIX_REQUEST_BODY =
  "set the ext_proc filter's processing_mode.request_body_mode to BUFFERED (or FULL_DUPLEX_STREAMED with request_trailer_mode: SEND)";

/**
 * Why a request with a body cannot be routed with the request body mode Envoy announced; undefined
 * when it can, or when Envoy announced no modes (no protocol_config).
 */
export function requestBodyModeProblem(config: ProtocolConfiguration | undefined): string | undefined {
  if (config === undefined) return undefined;
  const mode = config.request_body_mode ?? BodySendMode.NONE;
  if (mode === BodySendMode.STREAMED) {
    return (
      'Envoy sends this request body STREAMED: it passes the request on before the router has read ' +
      `the body it routes on, without a destination; ${FIX_REQUEST_BODY}`
    );
  }
  if (mode === BodySendMode.NONE) {
    return (
      'Envoy does not send request bodies to the router (request_body_mode NONE): it cannot route ' +
      `a request on its body; ${FIX_REQUEST_BODY}`
    );
  }
  return undefined;
}

/**
 * Why the router may not follow responses in the response body mode Envoy announced; undefined when
 * it can (see the table above).
 */
export function responseBodyModeProblem(config: ProtocolConfiguration | undefined): string | undefined {
  if (
    config === undefined ||
    (config.response_body_mode ?? BodySendMode.NONE) !== BodySendMode.NONE ||
    config.request_body_mode !== BodySendMode.FULL_DUPLEX_STREAMED
  ) {
    return undefined;
  }
  return (
    'Envoy does not send response bodies to the router (response_body_mode NONE) and streams request ' +
    "bodies (FULL_DUPLEX_STREAMED): unless response_trailer_mode is SEND, it ends the router's stream " +
    "at the response headers, so a worker's load is released while it still generates; set the " +
    "ext_proc filter's processing_mode.response_trailer_mode to SEND (or response_body_mode to " +
    'FULL_DUPLEX_STREAMED with response_trailer_mode: SEND)'
  );
}

export const OBSERVABILITY_MODE_PROBLEM =
  "The ext_proc filter runs in observability_mode: Envoy ignores the router's answers, so no request " +
  'gets a destination (Envoy answers 503); remove observability_mode from the filter';

export const RESPONSE_HEADERS_SKIPPED_PROBLEM =
  'Envoy sent a response body without the response headers (response_header_mode SKIP): ' +
  "the router cannot see the status nor edit the headers of the response; set the ext_proc filter's " +
  'processing_mode.response_header_mode to SEND';
