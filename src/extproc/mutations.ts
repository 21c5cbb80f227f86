/**
 * Small pure builders for ext_proc replies. Header values go in `raw_value` (what Envoy >= 1.27
 * sends and prefers); `append: false` overwrites anything the client sent.
 */
import type {
  BodyMutation,
  CommonResponse,
  HeaderMutation,
  ImmediateResponse,
  ProcessingResponse,
  StructValue,
} from './proto.js';
import type { RouterError } from '../request/router-error.js';

export type HeaderSet = Readonly<Record<string, string>>;

export function headerMutation(
  set: HeaderSet = {},
  remove: readonly string[] = [],
): HeaderMutation | undefined {
  const keys = Object.keys(set);
  if (keys.length === 0 && remove.length === 0) return undefined;
  const m: HeaderMutation = {};
  if (keys.length > 0) {
    m.set_headers = keys.map((key) => ({
      header: { key, raw_value: Buffer.from(set[key] as string) },
      append: { value: false },
    }));
  }
  if (remove.length > 0) m.remove_headers = [...remove];
  return m;
}

export interface CommonOptions {
  set?: HeaderSet;
  remove?: readonly string[];
  body?: BodyMutation;
  clearRouteCache?: boolean;
}

export function commonResponse(opts: CommonOptions = {}): CommonResponse {
  const r: CommonResponse = {};
  const hm = headerMutation(opts.set, opts.remove);
  if (hm) r.header_mutation = hm;
  if (opts.body) r.body_mutation = opts.body;
  // clear_route_cache only has an effect together with a header mutation.
  if (opts.clearRouteCache && hm) r.clear_route_cache = true;
  return r;
}

export function requestHeadersReply(opts?: CommonOptions): ProcessingResponse {
  return { request_headers: { response: commonResponse(opts) } };
}
export function requestBodyReply(opts?: CommonOptions): ProcessingResponse {
  return { request_body: { response: commonResponse(opts) } };
}
export function responseHeadersReply(opts?: CommonOptions): ProcessingResponse {
  return { response_headers: { response: commonResponse(opts) } };
}
export function responseBodyReply(opts?: CommonOptions): ProcessingResponse {
  return { response_body: { response: commonResponse(opts) } };
}
export function requestTrailersReply(): ProcessingResponse {
  return { request_trailers: {} };
}
export function responseTrailersReply(): ProcessingResponse {
  return { response_trailers: {} };
}

/**
 * A reply that never changes, frozen: the gRPC server encodes a frozen message once and writes the
 * same bytes every time (grpc-server.ts), which matters for the one-per-chunk response_body reply.
 */
export function constantReply(msg: ProcessingResponse): ProcessingResponse {
  return deepFreeze(msg);
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object' && !Buffer.isBuffer(o)) {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/** Replace the whole body (BUFFERED / STREAMED chunk). */
export function replaceBody(body: Buffer): BodyMutation {
  return { body };
}

/** A body chunk passed on in FULL_DUPLEX_STREAMED mode. */
export function streamedBody(body: Buffer, endOfStream: boolean): BodyMutation {
  return { streamed_response: { body, end_of_stream: endOfStream } };
}

/** A JSON ImmediateResponse carrying a RouterError. */
/**
 * The ImmediateResponse of a user-facing error: its JSON body in the OpenAI shape, or, for the
 * Anthropic Messages API (`/v1/messages`, `/v1/messages/count_tokens`), in Anthropic's
 * (RouterError.toAnthropicJSON), which its clients (the Anthropic SDKs, Claude Code) read.
 */
export function errorReply(err: RouterError, shape: 'openai' | 'anthropic' = 'openai'): ProcessingResponse {
  const body = shape === 'anthropic' ? err.toAnthropicJSON() : err.toJSON();
  return jsonImmediate(err.status, body, err.code, err.headers);
}

export function jsonImmediate(
  status: number,
  body: unknown,
  details: string,
  headers?: Readonly<Record<string, string>>,
): ProcessingResponse {
  const immediate: ImmediateResponse = {
    status: { code: status },
    headers: headerMutation({ ...headers, 'content-type': 'application/json' }),
    body: Buffer.from(JSON.stringify(body)),
    details: `vllm_router_${details}`,
  };
  return { immediate_response: immediate };
}

/** `{namespace: {key: value}}` as a google.protobuf.Struct (dynamic metadata). */
export function dynamicMetadata(ns: string, values: HeaderSet): StructValue {
  const inner: StructValue = { fields: {} };
  for (const [k, v] of Object.entries(values)) inner.fields[k] = { stringValue: v };
  return { fields: { [ns]: { structValue: inner } } };
}
