/**
 * One ext_proc stream = one HTTP request/response through Envoy.
 *
 * Phases (explicit, enforced by one advance(from, to)): request_headers -> request_body ->
 * dispatching -> response_headers -> response_body -> done. Envoy's own local reply before routing
 * goes request_headers|request_body -> response_body. Anything else is a protocol error (JSON 500).
 *
 * Ordering: messages AND the gRPC stream's end events (`end` = half-close, `cancelled`, `error`,
 * `close`) are handled strictly in arrival order: at once while nothing is pending (the common case:
 * no promise per message), and on one promise chain behind an async dispatch (a P/D prefill leg), so
 * that dispatch cannot interleave with the next message, and a last response chunk that arrived in
 * the same tick as the half-close is handled before the end (the request counts `ok`, not
 * `cancelled`). One exception: an end event that arrives while an async dispatch is in flight ends
 * the session at once (nothing Envoy sends can be waiting behind a request it has no answer to, and
 * the prefill leg must be aborted now, not after it finishes).
 *
 * Body modes: the session follows whatever Envoy announces in `protocol_config`; the replies per mode
 * are built by body-mode-replies.ts. FULL_DUPLEX_STREAMED request chunks are accumulated without
 * replies until the body is complete. Settings it cannot route with (processing-modes.ts) are
 * refused or reported, and so are protocol upgrades (request/protocol-upgrade.ts).
 *
 * Response body: on the response headers reply the session may tell Envoy to skip the body
 * (response-body-mode.ts: a 2xx response whose dispatch reads no chunk); the stream then ends when
 * Envoy is done with the downstream response, and that end is the request's end (`unwatched`).
 *
 * Cleanup: ONE idempotent end() runs on the first of response end-of-stream, an immediate response,
 * or a stream end event. It builds the request's end record (request/request-end.ts), finishes the
 * Dispatch with it (releasing every load guard), aborts an in-flight prefill, and reports the outcome
 * exactly once.
 */
import type { Logger } from 'pino';
import type { Dispatch, Dispatcher, LocalAnswer, RouteRequest } from './dispatch.js';
import {
  constantReply,
  errorReply,
  jsonImmediate,
  requestHeadersReply,
  requestTrailersReply,
  responseHeadersReply,
  responseTrailersReply,
  type HeaderSet,
} from './mutations.js';
import { responseChunkReply, routedReplies, type BodyMode } from './body-mode-replies.js';
import { routedReplyCache, routingFor } from './routed-reply-cache.js';
import { bodySkippable, SKIP_RESPONSE_BODY } from './response-body-mode.js';
import {
  OBSERVABILITY_MODE_PROBLEM,
  requestBodyModeProblem,
  responseBodyModeProblem,
  RESPONSE_HEADERS_SKIPPED_PROBLEM,
} from './processing-modes.js';
import {
  BodySendMode,
  type HeaderMap,
  type HttpBody,
  type HttpHeaders,
  type MetadataContext,
  type ProcessingRequest,
  type ProcessingResponse,
} from './proto.js';
import type { ServerCall } from './grpc-server.js';
import { REQUEST_ID_HEADER, UNTRUSTED_REQUEST_HEADERS } from './headers.js';
import {
  anthropicPath,
  inferenceKind,
  parseInferenceRequest,
  type InferenceKind,
  type InferenceRequest,
} from '../request/inference-request.js';
import type { MediaTally, MediaTokensFor } from '../request/media-tokens.js';
import { RouterError } from '../request/router-error.js';
import { upgradeRefused, upgradeRequested } from '../request/protocol-upgrade.js';
import { MODEL_REWRITE_HEADER, withModel } from '../request/model-rewrite.js';
import { takesPriority, withPriority } from '../request/worker-priority.js';
import { requestOutcome, type Outcome, type RequestEnd, type RoutingStage } from '../request/request-end.js';
import type { Worker } from '../workers/worker.js';
import { endpointSubset, servedEndpoint } from './lb-metadata.js';

export type SessionPhase =
  'request_headers' | 'request_body' | 'dispatching' | 'response_headers' | 'response_body' | 'done';

export type { Outcome } from '../request/request-end.js';

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
  /** What media weigh in the routing text, per model (request/media-tokens.ts); default DEFAULT_MEDIA_TOKENS. */
  readonly mediaTokens?: MediaTokensFor;
  /** Whether tools and tool calls go into the routing text (`--tools-in-prompt`; default true). */
  readonly toolsInPrompt?: boolean;
  /** Told the media parts of every inference request that has any (metrics). */
  readonly onMedia?: (media: Readonly<MediaTally>) => void;
  readonly onEnd?: (summary: SessionSummary) => void;
  /**
   * A request the router answers itself, without a worker (routing/model-list.ts): asked for every
   * request that is not an inference request, before it would be dispatched.
   */
  readonly answer?: (
    method: string,
    path: string,
    headers: Readonly<Record<string, string>>,
  ) => LocalAnswer | undefined;
  /**
   * A request the router answers itself, with its body when it has one, after calls of its own
   * (routing/lora-fanout.ts, routing/fleet-control.ts): asked for every request that is not an
   * inference request.
   */
  readonly answerBody?: (
    method: string,
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Buffer | undefined,
  ) => Promise<LocalAnswer> | undefined;
  /** Called when a session ends; used by graceful drain. */
  readonly onClose?: () => void;
  /**
   * Envoy's ext_proc filter is configured in a way the router cannot route with
   * (processing-modes.ts): `problem` names the setting and its fix (the server logs each once).
   */
  readonly onModeProblem?: (problem: string) => void;
  /**
   * The gateway served the request on `served` instead of the routed worker (lb-metadata.ts);
   * `adopted`: a worker of the pool has that endpoint and now holds the request's load.
   */
  readonly onFailover?: (routed: Worker, served: string, adopted: boolean) => void;
  /**
   * `--forward-priority`: the vLLM `priority` an inference request's body must carry, from its
   * headers (request/worker-priority.ts; 0 = none). Absent: bodies keep what the client wrote.
   */
  readonly workerPriority?: (headers: Readonly<Record<string, string>>) => number;
}

type Stream = ServerCall<ProcessingResponse>;

/** Replies that never change (encoded once by the gRPC server). */
const STRIP_UNTRUSTED = constantReply(requestHeadersReply({ remove: UNTRUSTED_REQUEST_HEADERS }));
const PASS_RESPONSE_HEADERS = constantReply(responseHeadersReply());
const SKIP_BODY_RESPONSE_HEADERS = constantReply({
  ...responseHeadersReply(),
  mode_override: SKIP_RESPONSE_BODY,
});
const PASS_REQUEST_TRAILERS = constantReply(requestTrailersReply());
const PASS_RESPONSE_TRAILERS = constantReply(responseTrailersReply());

export class Session {
  private phase: SessionPhase = 'request_headers';
  private chain: Promise<void> = Promise.resolve();
  /** Steps on the chain (an async one and those queued behind it); 0: the next step runs at once. */
  private pending = 0;
  private abortController: AbortController | undefined;
  private readonly startedAt = performance.now();
  private requestMode: BodyMode = 'per_message';
  private responseMode: BodyMode = 'per_message';
  /** Envoy sends response bodies (response_body_mode is not NONE). */
  private responseBodiesSent = true;
  /** Why a request body cannot be routed in the request body mode Envoy announced (processing-modes.ts). */
  private requestBodyProblem: string | undefined;
  private method = '';
  private path = '';
  private route = 'other';
  private kind: InferenceKind | undefined;
  private headers: Record<string, string> = {};
  /** The gateway's endpoint subset for this request, when it sent one (lb-metadata.ts). */
  private subset: ReadonlySet<string> | undefined;
  /** What a fallback's dispatch (failOver) reads of the parsed body: its model and sequences. */
  private routedAs: InferenceRequest | undefined;
  private bodyChunks: Buffer[] = [];
  private bodyBytes = 0;
  /** A request body message arrived (in FULL_DUPLEX_STREAMED, Envoy then waits for a body reply). */
  private bodySeen = false;
  private dispatch: Dispatch | undefined;
  /** A destination was handed to Envoy (the dispatch may since have been replaced, or dropped). */
  private routedOnce = false;
  private status: number | undefined;
  /** False once the router told Envoy to skip the response body (response-body-mode.ts). */
  private bodyWatched = true;
  /** release() came before the request was routed: it is handed back once routed. */
  private releaseWhenRouted = false;
  private ended = false;
  /** A response chunk's rewrite is in flight (its reply waits for it). */
  private rewriting = false;

  constructor(
    private readonly stream: Stream,
    private readonly deps: SessionDeps,
  ) {
    stream.on('data', (msg: ProcessingRequest) => this.enqueue(() => this.handle(msg)));
    stream.on('end', () => this.onStreamEnd(true));
    stream.on('cancelled', () => this.onStreamEnd(false));
    stream.on('error', () => this.onStreamEnd(false));
    stream.on('close', () => this.onStreamEnd(false));
  }

  /**
   * The router is closing with this stream still open. A request already routed (its request phase
   * answered, waiting for or streaming the response) is handed back to Envoy: the session ends
   * (`released`: its load guards are released) and the ext_proc stream ends with gRPC OK, after
   * which Envoy carries on without the router, so the response goes on to the client even when the
   * filter fails closed. A request not routed yet (its body or its prefill leg still to come) is
   * handed back as soon as it is routed; if closing resets its stream first, Envoy retries it on
   * another replica only when the router had not answered it yet. Returns whether the stream was
   * handed back now.
   */
  release(): boolean {
    if (this.ended) return false;
    if (this.phase !== 'response_headers' && this.phase !== 'response_body') {
      this.releaseWhenRouted = true;
      return false;
    }
    this.end({ kind: 'released', ...(this.status !== undefined ? { status: this.status } : {}) });
    this.stream.end();
    return true;
  }

  /** Cancellation for the dispatcher: created only if a dispatcher asks for it. */
  get signal(): AbortSignal {
    return (this.abortController ??= new AbortController()).signal;
  }

  private enqueue(step: () => void | Promise<void>): void {
    if (this.pending === 0) {
      let result: void | Promise<void>;
      try {
        result = step();
      } catch (err) {
        this.fail(err);
        return;
      }
      if (result === undefined) return;
      this.pending = 1;
      this.chain = result.then(this.stepDone, this.stepFailed);
      return;
    }
    this.pending += 1;
    this.chain = this.chain.then(step).then(this.stepDone, this.stepFailed);
  }

  private readonly stepDone = (): void => {
    this.pending -= 1;
  };

  private readonly stepFailed = (err: unknown): void => {
    this.pending -= 1;
    this.fail(err);
  };

  /**
   * A stream end event: behind the messages that arrived before it, unless a dispatch or a chunk's
   * rewrite is in flight.
   */
  private onStreamEnd(halfClose: boolean): void {
    const finish = (): void => {
      this.end(this.streamEnd());
      if (halfClose) this.stream.end();
    };
    // A response chunk whose rewrite waits holds nothing Envoy still needs: the request ends now.
    if (this.phase === 'dispatching' || this.rewriting) finish();
    else this.enqueue(finish);
  }

  /**
   * The one place the phase changes. `from`: the phase(s) the message is legal in; otherwise the
   * message is a protocol error (answered with a JSON 500) and false is returned.
   */
  private advance(from: SessionPhase | readonly SessionPhase[], to: SessionPhase, message: string): boolean {
    if (from === this.phase || (typeof from !== 'string' && from.includes(this.phase))) {
      this.phase = to;
      return true;
    }
    this.protocolError(message);
    return false;
  }

  private handle(msg: ProcessingRequest): void | Promise<void> {
    if (this.ended) return;
    if (msg.protocol_config) {
      const fds = BodySendMode.FULL_DUPLEX_STREAMED;
      this.requestMode = msg.protocol_config.request_body_mode === fds ? 'full_duplex' : 'per_message';
      this.responseMode = msg.protocol_config.response_body_mode === fds ? 'full_duplex' : 'per_message';
      this.responseBodiesSent =
        (msg.protocol_config.response_body_mode ?? BodySendMode.NONE) !== BodySendMode.NONE;
      this.requestBodyProblem = requestBodyModeProblem(msg.protocol_config);
      const responseProblem = responseBodyModeProblem(msg.protocol_config);
      if (responseProblem !== undefined) this.deps.onModeProblem?.(responseProblem);
    }
    if (msg.observability_mode) {
      this.deps.onModeProblem?.(OBSERVABILITY_MODE_PROBLEM);
      return this.observe(msg);
    }
    if (msg.request_headers) {
      if (msg.metadata_context) this.subset = endpointSubset(msg.metadata_context);
      return this.onRequestHeaders(msg.request_headers);
    }
    if (msg.request_body) return this.onRequestBody(msg.request_body);
    if (msg.request_trailers) return this.onRequestTrailers();
    if (msg.response_headers) return this.onResponseHeaders(msg.response_headers, msg.metadata_context);
    if (msg.response_body) return this.onResponseBody(msg.response_body);
    if (msg.response_trailers) return this.onResponseTrailers();
  }

  private onRequestHeaders(h: HttpHeaders): void | Promise<void> {
    const next = h.end_of_stream ? 'dispatching' : 'request_body';
    if (!this.advance('request_headers', next, 'request_headers')) return;
    this.headers = headerRecord(h.headers);
    this.method = this.headers[':method'] ?? '';
    this.path = this.headers[':path'] ?? '';
    this.kind = inferenceKind(this.method, this.path);
    this.route = this.kind ?? 'other';
    const upgrade = upgradeRequested(this.headers);
    if (upgrade !== undefined) return this.reject(upgradeRefused(upgrade, this.path));
    if (h.end_of_stream) return this.route_(undefined, 'headers');
    if (this.requestBodyProblem !== undefined) return this.unsupportedMode(this.requestBodyProblem);
    // FDS: the headers reply waits until the body is complete (it carries the routing headers).
    if (this.requestMode !== 'full_duplex') {
      this.send(STRIP_UNTRUSTED);
    }
  }

  private onRequestBody(b: HttpBody): void | Promise<void> {
    // Envoy 1.35-1.37 could repeat the final FDS chunk for large bodies: ignore it silently.
    const repeatedLast =
      this.requestMode === 'full_duplex' &&
      b.end_of_stream &&
      this.phase !== 'request_headers' &&
      this.phase !== 'request_body';
    if (repeatedLast) return;
    if (!this.advance('request_body', 'request_body', 'request_body')) return;
    this.bodySeen = true;
    const chunk = bodyOf(b);
    this.bodyBytes += chunk.length;
    if (this.bodyBytes > this.deps.maxBodyBytes) {
      return this.reject(
        new RouterError('body_too_large', 413, `request body exceeds ${this.deps.maxBodyBytes} bytes`),
      );
    }
    if (chunk.length > 0) this.bodyChunks.push(chunk);
    if (this.requestMode === 'full_duplex' && !b.end_of_stream) return;
    return this.routeBody();
  }

  private onRequestTrailers(): void | Promise<void> {
    // Only sent when configured; nothing to change. In FDS, trailers also end the request body.
    const reply = (): void => {
      if (!this.ended) this.send(PASS_REQUEST_TRAILERS);
    };
    if (this.requestMode === 'full_duplex' && this.phase === 'request_body') {
      // Trailers right after the headers (no body message): Envoy waits for no body reply (a body
      // reply would be spurious to it), so the request is routed as one without a body.
      const routing = this.bodySeen ? this.routeBody() : this.routeWithoutBody();
      if (routing) return routing.then(reply);
    }
    reply();
  }

  private routeWithoutBody(): void | Promise<void> {
    this.advance('request_body', 'dispatching', 'request_trailers');
    return this.route_(undefined, 'headers');
  }

  private routeBody(): void | Promise<void> {
    this.advance('request_body', 'dispatching', 'request_body');
    const body =
      this.bodyChunks.length === 1 ? (this.bodyChunks[0] as Buffer) : Buffer.concat(this.bodyChunks);
    this.bodyChunks = [];
    return this.route_(body, 'body');
  }

  /** Parse, dispatch, and answer the message that completed the request (phase: dispatching). */
  private route_(body: Buffer | undefined, routedOn: 'headers' | 'body'): void | Promise<void> {
    const local =
      this.kind === undefined ? this.deps.answer?.(this.method, this.path, this.headers) : undefined;
    if (local !== undefined) {
      this.send(jsonImmediate(local.status, local.body, local.details));
      this.end({ kind: 'answered', status: local.status });
      return;
    }
    const later =
      this.kind === undefined
        ? this.deps.answerBody?.(this.method, this.path, this.headers, body)
        : undefined;
    if (later !== undefined) {
      return later.then(
        (answer) => {
          if (this.ended) return; // the stream went away meanwhile
          this.send(jsonImmediate(answer.status, answer.body, answer.details));
          this.end({ kind: 'answered', status: answer.status });
        },
        (err) => {
          if (!this.ended) this.reject(asRouterError(err, this.deps.logger));
        },
      );
    }
    let result: Dispatch | Promise<Dispatch>;
    // The gateway asked for another model (request/model-rewrite.ts), and the objective's priority
    // goes to the worker (request/worker-priority.ts): everything below reads the edited body, and
    // Envoy gets it unless the dispatcher writes one of its own (then built from it).
    let edited: Buffer | undefined;
    try {
      if (body !== undefined) {
        const target = this.headers[MODEL_REWRITE_HEADER];
        edited = target ? withModel(body, target, this.headers['content-type']) : undefined;
        // vLLM's Messages API takes no `priority` (its request model has none): left as it is.
        const takes =
          this.kind !== undefined ? this.kind !== 'messages' : takesPriority(this.method, this.path);
        const priority = takes ? this.deps.workerPriority?.(this.headers) : undefined;
        const prioritised = priority !== undefined ? withPriority(edited ?? body, priority) : undefined;
        edited = prioritised ?? edited;
        if (edited !== undefined) body = edited;
      }
      const req: RouteRequest = {
        method: this.method,
        path: this.path,
        headers: this.headers,
        body,
        inference: this.kind && routedOn === 'body' ? this.parse(body as Buffer) : undefined,
        ...(this.subset !== undefined ? { subset: this.subset } : {}),
      };
      if (this.kind && routedOn === 'headers') {
        throw new RouterError('invalid_body', 400, `${this.path} needs a JSON request body`);
      }
      result = this.deps.dispatcher.dispatch(req, this);
    } catch (err) {
      return this.reject(asRouterError(err, this.deps.logger));
    }
    if (!isPromise(result)) return this.routed(result, routedOn, body, edited);
    return result.then(
      (dispatch) => this.routed(dispatch, routedOn, body, edited),
      (err) => this.reject(asRouterError(err, this.deps.logger)),
    );
  }

  /**
   * Answers the message that completed the request with the dispatch's routing. `edited`: the body
   * with the model the gateway asked for or the worker priority, sent when the dispatcher did not
   * rewrite the body itself.
   */
  private routed(
    dispatch: Dispatch,
    routedOn: 'headers' | 'body',
    body: Buffer | undefined,
    edited?: Buffer,
  ): void {
    if (this.ended) {
      // The stream went away while we were dispatching (e.g. during a prefill leg).
      dispatch.finish({ kind: 'cancelled', afterHeaders: false });
      return;
    }
    this.dispatch = dispatch;
    this.routedOnce = true;
    dispatch.failure?.catch((err) => this.onLegFailure(err));
    this.advance('dispatching', 'response_headers', 'dispatch');
    const replacement = dispatch.body ?? edited;
    const replies =
      routedReplyCache.get(this.requestMode, routedOn, dispatch.setHeaders, replacement) ??
      routedReplies(
        this.requestMode,
        routedOn,
        routingFor(dispatch.setHeaders, dispatch.worker.endpoint, replacement),
        body,
        replacement,
      );
    for (const reply of replies) this.send(reply);
    // Not while a prefill leg runs beside the response: handing back would cut it (cutsLeg).
    if (this.releaseWhenRouted && dispatch.failure === undefined) this.release();
  }

  private parse(body: Buffer) {
    const kind = this.kind as InferenceKind;
    const req = parseInferenceRequest(kind, this.headers['content-type'], body, {
      media: this.deps.mediaTokens,
      tools: this.deps.toolsInPrompt,
    });
    if (req.media !== undefined) this.deps.onMedia?.(req.media);
    this.routedAs = bodiless(req);
    return req;
  }

  private onResponseHeaders(h: HttpHeaders, metadata: MetadataContext | null | undefined): void {
    // Envoy's own local reply before the request was routed (e.g. its 413 above its buffer limit):
    // pass it through unchanged. Nothing was dispatched, so there is no guard to release.
    const from: readonly SessionPhase[] = ['request_headers', 'request_body', 'response_headers'];
    if (!this.advance(from, 'response_body', 'response_headers')) return;
    this.bodyChunks = [];
    const served = metadata ? servedEndpoint(metadata) : undefined;
    if (served !== undefined && this.dispatch !== undefined && served !== this.dispatch.worker.endpoint) {
      this.failOver(this.dispatch, served);
    }
    const status = Number(headerRecord(h.headers)[':status'] ?? 0);
    this.status = status;
    const d = this.dispatch;
    const eos = h.end_of_stream === true;
    const skip =
      d !== undefined &&
      bodySkippable({
        requestMode: this.requestMode,
        mode: this.responseBodiesSent ? this.responseMode : 'none',
        status,
        endOfStream: eos,
        routed: true,
      }) &&
      (!this.responseBodiesSent || d.watchResponseBody?.(status) === false);
    // Without response bodies (response_body_mode NONE) no chunk comes: nothing is watched.
    this.bodyWatched = !skip && this.responseBodiesSent;
    d?.onResponseStart?.(status, this.bodyWatched);
    const extra: HeaderSet | undefined = d?.responseHeaders?.(status);
    const remove = d?.removeResponseHeaders?.(status);
    const edited = extra !== undefined || remove !== undefined;
    if (skip) {
      this.send(
        edited
          ? { ...responseHeadersReply({ set: extra, remove }), mode_override: SKIP_RESPONSE_BODY }
          : SKIP_BODY_RESPONSE_HEADERS,
      );
    } else {
      this.send(edited ? responseHeadersReply({ set: extra, remove }) : PASS_RESPONSE_HEADERS);
    }
    if (eos) this.end({ kind: 'response', status });
  }

  private onResponseBody(b: HttpBody): void | Promise<void> {
    if (this.phase === 'done') return; // duplicate final chunk
    // A routed request's response body before its headers: Envoy skips the response headers.
    if (this.phase === 'response_headers') return this.unsupportedMode(RESPONSE_HEADERS_SKIPPED_PROBLEM);
    if (!this.advance('response_body', 'response_body', 'response_body')) return;
    const chunk = bodyOf(b);
    const eos = b.end_of_stream === true;
    const rewritten = this.dispatch?.transformResponseChunk?.(chunk, eos);
    if (!isPromise(rewritten)) return this.answerChunk(chunk, eos, rewritten);
    // The rewrite waits (a P/D usage frame for its prefill leg's figure): so does this reply, and the
    // messages behind it on the chain. A stream end meanwhile ends the request at once (onStreamEnd).
    const copy = Buffer.from(chunk);
    this.rewriting = true;
    return rewritten.then((r) => {
      this.rewriting = false;
      if (!this.ended) this.answerChunk(copy, eos, r);
    });
  }

  private answerChunk(chunk: Buffer, eos: boolean, rewritten: Buffer | undefined): void {
    this.send(responseChunkReply(this.responseMode, chunk, eos, rewritten));
    if (eos) this.end({ kind: 'response', status: this.status ?? 0 });
  }

  /**
   * An upstream response with trailers (an HTTP/2 upstream's) never ends its body with end_of_stream:
   * Envoy sends the trailers after the last chunk. What the dispatch still holds of the body (a
   * rewriter's incomplete frame or whole JSON body) is due now. In FULL_DUPLEX_STREAMED Envoy takes a
   * body chunk before the trailers reply (processor_state.cc handleTrailersResponse); in STREAMED it
   * sends the trailers only once every chunk was answered, so the held bytes can no longer reach the
   * client: the stream is reset rather than the response passed on cut short as if complete.
   */
  private onResponseTrailers(): void | Promise<void> {
    const held =
      this.phase === 'response_body' ? this.dispatch?.transformResponseChunk?.(EMPTY_BODY, true) : undefined;
    if (!isPromise(held)) return this.answerTrailers(held);
    this.rewriting = true;
    return held.then((h) => {
      this.rewriting = false;
      if (!this.ended) this.answerTrailers(h);
    });
  }

  private answerTrailers(held: Buffer | undefined): void {
    if (held !== undefined && held.length > 0) {
      if (this.responseMode === 'full_duplex') {
        this.send(responseChunkReply('full_duplex', held, false, undefined));
      } else {
        const e = new RouterError(
          'internal_error',
          502,
          'response trailers came after body bytes held for a rewrite',
        );
        this.deps.logger.warn(
          { bytes: held.length, path: this.logPath, requestId: this.requestId },
          'response trailers in STREAMED mode: the held end of the body cannot be sent; resetting stream',
        );
        this.end({ kind: 'cancelled', afterHeaders: true, status: this.status }, e);
        this.stream.destroy(e);
        return;
      }
    }
    this.send(PASS_RESPONSE_TRAILERS);
    if (this.phase === 'response_body' || this.phase === 'response_headers') {
      this.end({ kind: 'response', status: this.status ?? 0 });
    }
  }

  /**
   * The gateway served the request on another endpoint than the routed worker's (a fallback of the
   * destination list, routing/fallback-endpoints.ts): the routed worker refused or reset it. Its
   * part ends (`failed_over`: its guard released, a failure on its health), and the request goes on
   * under a dispatch holding its load on the served worker, when the pool has one at that endpoint.
   */
  private failOver(routed: Dispatch, served: string): void {
    const req: RouteRequest = {
      method: this.method,
      path: this.path,
      headers: this.headers,
      ...(this.routedAs !== undefined ? { inference: this.routedAs } : {}),
    };
    let next: Dispatch | undefined;
    try {
      next = this.deps.dispatcher.adopt?.(req, routed, served);
    } finally {
      routed.finish({ kind: 'failed_over', served });
      this.dispatch = next;
    }
    this.deps.onFailover?.(routed.worker, served, next !== undefined);
    this.deps.logger.warn(
      {
        worker: routed.worker.key,
        served,
        adopted: next !== undefined,
        path: this.logPath,
        requestId: this.requestId,
      },
      'the gateway served the request on another endpoint: the routed worker refused or reset it',
    );
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
      this.reject(e);
    } else if ((this.status ?? 0) >= 400) {
      // The worker already answered an error (a decode whose KV pull failed with the prefill): it is
      // the client's answer. A reset would turn it into Envoy's empty 503.
      this.deps.logger.warn(
        { err: e.message, status: this.status, path: this.logPath, requestId: this.requestId },
        'leg failed after an error response; passing the error on',
      );
    } else {
      // Mid-stream: the only honest signal left is to abort the stream.
      this.deps.logger.warn(
        { err: e.message, path: this.logPath, requestId: this.requestId },
        'leg failed mid-response; resetting stream',
      );
      this.end({ kind: 'cancelled', afterHeaders: true, status: this.status }, e);
      this.stream.destroy(e);
    }
  }

  /**
   * The request's `x-request-id` (Envoy sets one on every request unless told not to), in every log
   * line about the request: the key that joins them with Envoy's access log and the worker's logs.
   */
  private get requestId(): string | undefined {
    return this.headers[REQUEST_ID_HEADER];
  }

  /**
   * The request's path without its query string, for log lines: a client may put a key in the query
   * (`?api_key=`, `?key=`), and logs are read by more people than the gateway's clients.
   */
  private get logPath(): string {
    const q = this.path.indexOf('?');
    return q === -1 ? this.path : this.path.slice(0, q);
  }

  private reject(err: RouterError): void {
    this.send(errorReply(err, anthropicPath(this.path) ? 'anthropic' : 'openai'));
    this.end({ kind: 'rejected', status: err.status, code: err.code }, err);
  }

  /** Envoy's filter is configured in a way the router cannot route with: say what to change. */
  private unsupportedMode(problem: string): void {
    this.deps.onModeProblem?.(problem);
    this.reject(new RouterError('unsupported_processing_mode', 500, problem));
  }

  private protocolError(kind: string): void {
    this.deps.logger.warn(
      { kind, phase: this.phase, path: this.logPath, requestId: this.requestId },
      'unexpected ext_proc message',
    );
    this.reject(
      new RouterError('internal_error', 500, `unexpected ext_proc message ${kind} in phase ${this.phase}`),
    );
  }

  private fail(err: unknown): void {
    this.deps.logger.error({ err, requestId: this.requestId }, 'ext_proc session failed');
    if (!this.ended) this.reject(new RouterError('internal_error', 500, 'internal router error'));
  }

  /** The end record for a stream that ended before response end-of-stream. */
  private streamEnd(): RequestEnd {
    if (this.phase === 'response_body' && !this.bodyWatched) {
      return { kind: 'unwatched', status: this.status ?? 0 };
    }
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
    const stage: RoutingStage = this.routedOnce
      ? 'routed'
      : this.phase === 'dispatching'
        ? 'dispatching'
        : 'unrouted';
    this.ended = true;
    this.phase = 'done';
    // Only an in-flight dispatch (a prefill leg) listens; abort() builds a DOMException with a stack
    // trace, which is not free on the per-request path.
    if (stage === 'dispatching') this.abortController?.abort();
    this.dispatch?.finish(how);
    const summary: SessionSummary = {
      route: this.route,
      outcome: requestOutcome(how, stage),
      durationMs: performance.now() - this.startedAt,
      worker: this.dispatch?.worker.key,
      branch: this.dispatch?.decision.branch,
      status:
        how.kind === 'response' || how.kind === 'unwatched' || how.kind === 'released'
          ? how.status
          : err?.status,
    };
    this.deps.onEnd?.(summary);
    if (this.deps.logger.isLevelEnabled('debug')) {
      this.deps.logger.debug(
        { ...summary, path: this.logPath, requestId: this.requestId, error: err?.code },
        'request',
      );
    }
    this.deps.onClose?.();
  }
}

const NO_BODY: Readonly<Record<string, unknown>> = Object.freeze({});

/**
 * The parsed request without its body and prompt (kept for the whole response, they would stay
 * reachable): what a fallback endpoint's dispatch needs, the model and the sequences it weighs.
 */
function bodiless(req: InferenceRequest): InferenceRequest {
  return {
    kind: req.kind,
    model: req.model,
    stream: req.stream,
    text: '',
    json: NO_BODY,
    promptBody: NO_BODY,
    namesFreeResponse: false,
    ...(req.sequences !== undefined ? { sequences: req.sequences } : {}),
  };
}

const EMPTY_BODY = Buffer.alloc(0);

/**
 * A body message's bytes. Envoy leaves an empty body out of the message (a last chunk that only ends
 * the stream), and protobufjs reads an absent bytes field as an empty Array, not a Buffer.
 */
function bodyOf(b: HttpBody): Buffer {
  return Buffer.isBuffer(b.body) ? b.body : EMPTY_BODY;
}

function isPromise<T>(v: T | Promise<T>): v is Promise<T> {
  return typeof (v as Promise<T> | undefined)?.then === 'function';
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
