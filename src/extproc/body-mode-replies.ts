/**
 * The replies that depend on how Envoy sends bodies on a stream, one pure builder per decision.
 *
 *   request body mode       the request was routed on...   replies, in order
 *   any                     its headers (no body)          request_headers (routing)
 *   BUFFERED / STREAMED     its (one) body message         request_body (routing + rewritten body)
 *   FULL_DUPLEX_STREAMED    its last body chunk            request_headers (routing), then the whole
 *                                                          body as one streamed_response chunk
 *
 *   response body mode      reply to one response chunk
 *   BUFFERED / STREAMED     response_body, with a body mutation only when the chunk was rewritten
 *   FULL_DUPLEX_STREAMED    response_body with the chunk (rewritten or not) as streamed_response
 *
 * In FULL_DUPLEX_STREAMED Envoy holds the request headers until their reply, and expects every body
 * byte back: the routing headers therefore travel on the headers reply, sent once the body is complete.
 */
import {
  constantReply,
  requestBodyReply,
  requestHeadersReply,
  responseBodyReply,
  replaceBody,
  streamedBody,
} from './mutations.js';
import type { HeaderSet } from './mutations.js';
import type { ProcessingResponse, StructValue } from './proto.js';

/** How Envoy sends one direction's body on this stream (from ProcessingRequest.protocol_config). */
export type BodyMode = 'per_message' | 'full_duplex';

export interface Routing {
  /** Headers to set on the upstream request (content-length included when the body was rewritten). */
  readonly set: HeaderSet;
  readonly remove: readonly string[];
  /** envoy.lb dynamic metadata naming the destination. */
  readonly metadata: StructValue;
}

/** The replies that hand a routed request to Envoy (see the table above). */
export function routedReplies(
  mode: BodyMode,
  routedOn: 'headers' | 'body',
  routing: Routing,
  body: Buffer | undefined,
  rewritten: Buffer | undefined,
): ProcessingResponse[] {
  const common = { set: routing.set, remove: routing.remove, clearRouteCache: true };
  const headersReply = { ...requestHeadersReply(common), dynamic_metadata: routing.metadata };
  if (routedOn === 'headers') return [headersReply];
  if (mode === 'full_duplex') {
    return [
      headersReply,
      requestBodyReply({ body: streamedBody(rewritten ?? body ?? Buffer.alloc(0), true) }),
    ];
  }
  const reply = requestBodyReply({ ...common, body: rewritten ? replaceBody(rewritten) : undefined });
  return [{ ...reply, dynamic_metadata: routing.metadata }];
}

const PASS_CHUNK = constantReply(responseBodyReply());

/** The reply to one response body chunk (`rewritten`: the dispatcher's replacement, if any). */
export function responseChunkReply(
  mode: BodyMode,
  chunk: Buffer,
  endOfStream: boolean,
  rewritten: Buffer | undefined,
): ProcessingResponse {
  if (mode === 'full_duplex')
    return responseBodyReply({ body: streamedBody(rewritten ?? chunk, endOfStream) });
  return rewritten ? responseBodyReply({ body: replaceBody(rewritten) }) : PASS_CHUNK;
}
