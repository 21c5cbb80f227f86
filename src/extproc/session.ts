/**
 * One ext_proc stream = one HTTP request/response through Envoy.
 *
 * Phases (explicit, enforced): request_headers -> request_body -> dispatching -> response_headers
 * -> response_body -> done. Messages are handled strictly in arrival order (a promise chain), so an
 * async dispatch (a P/D prefill leg) cannot interleave with the next message.
 *
 * Body modes: the session follows whatever Envoy uses. BUFFERED: one request_body message, answered
 * with the routing headers (+ rewritten body). FULL_DUPLEX_STREAMED (announced in `protocol_config`):
 * request chunks are accumulated without replies; once the body is complete the session sends the
 * request_headers reply (routing headers) and then the whole body as `streamed_response`; response
 * chunks are echoed back as `streamed_response`. STREAMED response bodies get one reply per chunk.
 *
 * Cleanup: ONE idempotent end() runs on the first of response end-of-stream, an immediate response,
 * or the gRPC stream's `end`, `cancelled`, `error`, `close`. It finishes the Dispatch (releasing every
 * load guard), aborts an in-flight prefill, and records the outcome exactly once.
 */
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { Dispatch, Dispatcher, RequestEnd, RouteRequest } from './dispatch.js';
import {
  dynamicMetadata,
  errorReply,
  replaceBody,
  requestBodyReply,
  requestHeadersReply,
  requestTrailersReply,
  responseBodyReply,
  responseHeadersReply,
  responseTrailersReply,
  streamedBody,
  type HeaderSet,
} from './mutations.js';
import {
  BodySendMode,
  type HeaderMap,
  type HttpBody,
  type HttpHeaders,
  type ProcessingRequest,
  type ProcessingResponse,
} from './proto.js';
import { DESTINATION_HEADER, LB_METADATA_NAMESPACE, UNTRUSTED_REQUEST_HEADERS } from './headers.js';
import { inferenceKind, parseInferenceRequest, type InferenceKind } from '../request/inference-request.js';
import { RouterError } from '../request/router-error.js';

export type SessionPhase =
  'request_headers' | 'request_body' | 'dispatching' | 'response_headers' | 'response_body' | 'done';

export type Outcome =
  | 'ok' // upstream answered < 400 and the body ended
  | 'upstream_4xx'
  | 'upstream_5xx'
  | 'rejected' // the router answered 4xx itself (bad input)
  | 'no_workers' // 503 from the router
  | 'error' // other router-generated 5xx (prefill failure, internal)
  | 'no_response' // routed, but the stream ended before response headers (Envoy local reply, abort)
  | 'cancelled' // ended after response headers, before end-of-stream (client abort, upstream reset)
  | 'abandoned'; // ended before the router routed it

export interface SessionSummary {
  route: string;
  outcome: Outcome;
  durationMs: number;
  worker?: string;
  branch?: string;
  status?: number;
}

export interface SessionDeps {
  readonly dispatcher: Dispatcher;
  readonly logger: Logger;
  readonly maxBodyBytes: number;
  readonly onEnd?: (summary: SessionSummary) => void;
  /** Called when a session ends; used by graceful drain. */
  readonly onClose?: () => void;
}

type Stream = grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>;

export class Session {
  private phase: SessionPhase = 'request_headers';
  private chain: Promise<void> = Promise.resolve();
  private abortController: AbortController | undefined;
  private readonly startedAt = performance.now();
  private fullDuplexRequest = false;
  private fullDuplexResponse = false;
  private method = '';
  private path = '';
  private route = 'other';
  private kind: InferenceKind | undefined;
  private headers: Record<string, string> = {};
  private bodyChunks: Buffer[] = [];
  private bodyBytes = 0;
  private dispatch: Dispatch | undefined;
  private status: number | undefined;
  private ended = false;

  constructor(
    private readonly stream: Stream,
    private readonly deps: SessionDeps,
  ) {
    stream.on('data', (msg: ProcessingRequest) => {
      this.chain = this.chain.then(() => this.handle(msg)).catch((err) => this.fail(err));
    });
    stream.on('end', () => {
      this.end(this.streamEnd());
      stream.end();
    });
    stream.on('cancelled', () => this.end(this.streamEnd()));
    stream.on('error', () => this.end(this.streamEnd()));
    stream.on('close', () => this.end(this.streamEnd()));
  }

  /** Cancellation for the dispatcher: created only if a dispatcher asks for it. */
  get signal(): AbortSignal {
    return (this.abortController ??= new AbortController()).signal;
  }

  get currentPhase(): SessionPhase {
    return this.phase;
  }

  private async handle(msg: ProcessingRequest): Promise<void> {
    if (this.ended) return;
    if (msg.protocol_config) {
      this.fullDuplexRequest = msg.protocol_config.request_body_mode === BodySendMode.FULL_DUPLEX_STREAMED;
      this.fullDuplexResponse = msg.protocol_config.response_body_mode === BodySendMode.FULL_DUPLEX_STREAMED;
    }
    if (msg.observability_mode) return this.observe(msg);
    if (msg.request_headers) return this.onRequestHeaders(msg.request_headers);
    if (msg.request_body) return this.onRequestBody(msg.request_body);
    if (msg.request_trailers) return this.onRequestTrailers();
    if (msg.response_headers) return this.onResponseHeaders(msg.response_headers);
    if (msg.response_body) return this.onResponseBody(msg.response_body);
    if (msg.response_trailers) return this.onResponseTrailers();
  }

  private async onRequestHeaders(h: HttpHeaders): Promise<void> {
    if (this.phase !== 'request_headers') return this.protocolError('request_headers');
    this.headers = headerRecord(h.headers);
    this.method = this.headers[':method'] ?? '';
    this.path = this.headers[':path'] ?? '';
    this.kind = inferenceKind(this.method, this.path);
    this.route = this.kind ?? 'other';
    if (h.end_of_stream) return this.route_(undefined, 'headers');
    this.phase = 'request_body';
    // FDS: the headers reply waits until the body is complete (it carries the routing headers).
    if (!this.fullDuplexRequest) this.send(requestHeadersReply({ remove: UNTRUSTED_REQUEST_HEADERS }));
  }

  private async onRequestBody(b: HttpBody): Promise<void> {
    if (this.phase !== 'request_body') {
      // Envoy 1.35-1.37 could repeat the final FDS chunk for large bodies: ignore it silently.
      if (this.fullDuplexRequest && b.end_of_stream && this.phase !== 'request_headers') return;
      return this.protocolError('request_body');
    }
    const chunk = b.body ?? Buffer.alloc(0);
    this.bodyBytes += chunk.length;
    if (this.bodyBytes > this.deps.maxBodyBytes) {
      return this.reject(
        new RouterError('body_too_large', 413, `request body exceeds ${this.deps.maxBodyBytes} bytes`),
      );
    }
    if (chunk.length > 0) this.bodyChunks.push(chunk);
    if (this.fullDuplexRequest && !b.end_of_stream) return;
    const body =
      this.bodyChunks.length === 1 ? (this.bodyChunks[0] as Buffer) : Buffer.concat(this.bodyChunks);
    this.bodyChunks = [];
    return this.route_(body, 'body');
  }

  private async onRequestTrailers(): Promise<void> {
    // Only sent when configured; nothing to change. In FDS, trailers also end the request body.
    if (this.fullDuplexRequest && this.phase === 'request_body') {
      const body = Buffer.concat(this.bodyChunks);
      this.bodyChunks = [];
      await this.route_(body, 'body');
    }
    if (!this.ended) this.send(requestTrailersReply());
  }

  /** Parse, dispatch, and answer the message that completed the request. */
  private async route_(body: Buffer | undefined, stage: 'headers' | 'body'): Promise<void> {
    this.phase = 'dispatching';
    let dispatch: Dispatch;
    try {
      const req: RouteRequest = {
        method: this.method,
        path: this.path,
        headers: this.headers,
        body,
        inference: this.kind && stage === 'body' ? this.parse(body as Buffer) : undefined,
      };
      if (this.kind && stage === 'headers') {
        throw new RouterError('invalid_body', 400, `${this.path} needs a JSON request body`);
      }
      dispatch = await this.deps.dispatcher.dispatch(req, this);
    } catch (err) {
      return this.reject(asRouterError(err, this.deps.logger));
    }
    if (this.ended) {
      // The stream went away while we were dispatching (e.g. during a prefill leg).
      dispatch.finish({ kind: 'cancelled', afterHeaders: false });
      return;
    }
    this.dispatch = dispatch;
    dispatch.failure?.catch((err) => this.onLegFailure(err));
    const set: Record<string, string> = { ...dispatch.setHeaders };
    const newBody = dispatch.body;
    if (newBody) set['content-length'] = String(newBody.length);
    const routing = {
      set,
      remove: UNTRUSTED_REQUEST_HEADERS.filter((h) => !(h in set)),
      clearRouteCache: true,
    };
    const metadata = dynamicMetadata(LB_METADATA_NAMESPACE, {
      [DESTINATION_HEADER]: dispatch.setHeaders[DESTINATION_HEADER] ?? dispatch.worker.endpoint,
    });
    this.phase = 'response_headers';
    if (stage === 'headers') {
      this.send({ ...requestHeadersReply(routing), dynamic_metadata: metadata });
    } else if (this.fullDuplexRequest) {
      this.send({ ...requestHeadersReply(routing), dynamic_metadata: metadata });
      this.send(requestBodyReply({ body: streamedBody(newBody ?? (body as Buffer), true) }));
    } else {
      const reply = requestBodyReply({ ...routing, body: newBody ? replaceBody(newBody) : undefined });
      this.send({ ...reply, dynamic_metadata: metadata });
    }
  }

  private parse(body: Buffer) {
    return parseInferenceRequest(this.kind as InferenceKind, this.headers['content-type'], body);
  }

  private async onResponseHeaders(h: HttpHeaders): Promise<void> {
    // Envoy's own local reply before the request was routed (e.g. its 413 above its buffer limit):
    // pass it through unchanged. Nothing was dispatched, so there is no guard to release.
    const localReply = this.phase === 'request_headers' || this.phase === 'request_body';
    if (!localReply && this.phase !== 'response_headers') return this.protocolError('response_headers');
    if (localReply) this.bodyChunks = [];
    this.status = Number(headerRecord(h.headers)[':status'] ?? 0);
    const d = this.dispatch;
    d?.onResponseStart?.(this.status);
    const extra: HeaderSet | undefined = d?.responseHeaders?.(this.status);
    this.send(responseHeadersReply(extra ? { set: extra } : undefined));
    if (h.end_of_stream) return this.end({ kind: 'response', status: this.status });
    this.phase = 'response_body';
  }

  private async onResponseBody(b: HttpBody): Promise<void> {
    if (this.phase !== 'response_body') {
      if (this.phase === 'done') return; // duplicate final chunk
      return this.protocolError('response_body');
    }
    const chunk = b.body ?? Buffer.alloc(0);
    const eos = b.end_of_stream === true;
    const replaced = this.dispatch?.transformResponseChunk?.(chunk, eos);
    if (this.fullDuplexResponse) {
      this.send(responseBodyReply({ body: streamedBody(replaced ?? chunk, eos) }));
    } else {
      this.send(responseBodyReply(replaced ? { body: replaceBody(replaced) } : undefined));
    }
    if (eos) this.end({ kind: 'response', status: this.status ?? 0 });
  }

  private async onResponseTrailers(): Promise<void> {
    this.send(responseTrailersReply());
    if (this.phase === 'response_body' || this.phase === 'response_headers') {
      this.end({ kind: 'response', status: this.status ?? 0 });
    }
  }

  /** observability_mode: Envoy does not wait for replies; only track the lifecycle. */
  private observe(msg: ProcessingRequest): void {
    if (msg.response_body?.end_of_stream || msg.response_headers?.end_of_stream) {
      this.end({ kind: 'response', status: this.status ?? 0 });
    }
  }

  /** A concurrently running leg (P/D prefill) failed after dispatch. */
  private onLegFailure(err: unknown): void {
    if (this.ended) return;
    const e = asRouterError(err, this.deps.logger);
    if (this.phase === 'response_headers') {
      // Nothing reached the client yet: answer with the error instead of the decode response.
      this.send(errorReply(e));
      this.end({ kind: 'rejected' }, e);
    } else {
      // Mid-stream: the only honest signal left is to abort the stream.
      this.deps.logger.warn({ err: e.message, path: this.path }, 'leg failed mid-response; resetting stream');
      this.end({ kind: 'cancelled', afterHeaders: true, status: this.status }, e);
      this.stream.destroy(e);
    }
  }

  private reject(err: RouterError): void {
    this.send(errorReply(err));
    this.end({ kind: 'rejected' }, err);
  }

  private protocolError(kind: string): void {
    this.deps.logger.warn({ kind, phase: this.phase, path: this.path }, 'unexpected ext_proc message');
    this.reject(
      new RouterError('internal_error', 500, `unexpected ext_proc message ${kind} in phase ${this.phase}`),
    );
  }

  private fail(err: unknown): void {
    this.deps.logger.error({ err }, 'ext_proc session failed');
    if (!this.ended) this.reject(new RouterError('internal_error', 500, 'internal router error'));
  }

  private streamEnd(): RequestEnd {
    if (this.phase === 'response_body') return { kind: 'cancelled', afterHeaders: true, status: this.status };
    return { kind: 'cancelled', afterHeaders: false };
  }

  private send(msg: ProcessingResponse): void {
    if (this.ended || this.stream.destroyed || this.stream.writableEnded) return;
    this.stream.write(msg);
  }

  /** The one cleanup path. */
  private end(how: RequestEnd, err?: RouterError): void {
    if (this.ended) return;
    const wasDispatching = this.phase === 'dispatching';
    const routed = this.dispatch !== undefined;
    this.ended = true;
    this.phase = 'done';
    // Only an in-flight dispatch (a prefill leg) listens; abort() builds a DOMException with a stack
    // trace, which is not free on the per-request path.
    if (wasDispatching) this.abortController?.abort();
    this.dispatch?.finish(how);
    const outcome = classify(how, routed, wasDispatching, err);
    const summary: SessionSummary = {
      route: this.route,
      outcome,
      durationMs: performance.now() - this.startedAt,
      worker: this.dispatch?.worker.url,
      branch: this.dispatch?.decision.branch,
      status: how.kind === 'response' ? how.status : err?.status,
    };
    this.deps.onEnd?.(summary);
    if (this.deps.logger.isLevelEnabled('debug')) {
      this.deps.logger.debug({ ...summary, path: this.path, error: err?.code }, 'request');
    }
    this.deps.onClose?.();
  }
}

function classify(how: RequestEnd, routed: boolean, wasDispatching: boolean, err?: RouterError): Outcome {
  switch (how.kind) {
    case 'response':
      if (!routed) return 'abandoned'; // Envoy's local reply to a request we never routed
      return how.status >= 500 ? 'upstream_5xx' : how.status >= 400 ? 'upstream_4xx' : 'ok';
    case 'rejected':
      if (!err || err.status < 500) return 'rejected';
      return err.code === 'no_workers' ? 'no_workers' : 'error';
    case 'cancelled':
      if (how.afterHeaders) return 'cancelled';
      return routed || wasDispatching ? 'no_response' : 'abandoned';
  }
}

function asRouterError(err: unknown, logger: Logger): RouterError {
  if (err instanceof RouterError) return err;
  logger.error({ err }, 'unexpected error while routing');
  return new RouterError('internal_error', 500, 'internal router error');
}

const textDecoder = new TextDecoder();

/** Lower-cased header record from Envoy's HeaderMap (value or raw_value). */
export function headerRecord(map: HeaderMap | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of map?.headers ?? []) {
    const v = h.raw_value && h.raw_value.length > 0 ? textDecoder.decode(h.raw_value) : (h.value ?? '');
    const k = h.key.toLowerCase();
    out[k] = k in out ? `${out[k]},${v}` : v;
  }
  return out;
}
