/**
 * A small gRPC server over node:http2 for the few methods the router serves (Envoy's ext_proc
 * `Process` bidi stream and grpc.health.v1): gRPC's HTTP/2 mapping (POST, `content-type:
 * application/grpc`, length-prefixed messages, `grpc-status` trailers), nothing else (no compression,
 * no deadlines, no interceptors). Every method is served as a stream of messages both ways; a unary
 * method is a call whose handler answers one message and ends.
 *
 * Why not @grpc/grpc-js: its per-call machinery (interceptor chain, metadata objects, status objects,
 * an Error per cancelled call, proto-loader object conversion) cost about as much CPU per ext_proc
 * request as Envoy spends on the whole request (issue 15, docs/benchmarks.md).
 *
 * Stream resets: Envoy ends every finished ext_proc stream with RST_STREAM unless its
 * `ext_proc_graceful_grpc_close` runtime flag is on, and nghttp2 (not configurable in Node 20) answers
 * more than 1,000 resets on a connection faster than 33/s with GOAWAY(INTERNAL_ERROR), failing the
 * streams Envoy sent meanwhile. Each connection therefore has a ConnectionRotation
 * (connection-rotation.ts), which moves the client to a fresh connection, losslessly, long before.
 */
import { EventEmitter } from 'node:events';
import http2 from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { ConnectionRotation } from './connection-rotation.js';
import { encodeFrame, FrameDecoder } from './grpc-frames.js';
import type { MessageCodec } from './codec.js';

/** gRPC status codes used here. */
export const GrpcStatus = {
  OK: 0,
  CANCELLED: 1,
  INVALID_ARGUMENT: 3,
  NOT_FOUND: 5,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
} as const;

const { NGHTTP2_NO_ERROR } = http2.constants;

/**
 * HTTP/2 flow control as announced to the client. HTTP/2's defaults (64 KiB windows, 16 KiB frames)
 * made Envoy send a 220 KB prompt in 14 DATA frames and wait for WINDOW_UPDATEs on the way, on a
 * connection shared by every stream; this server reads every message as it arrives (no
 * backpressure), so larger windows buffer nothing more here. Measured through Envoy (220 KB prompts,
 * concurrency 16, 6 paired rounds): router CPU per request -14% and Envoy's -12% (issue 15).
 */
const STREAM_WINDOW = 8 << 20;
const CONNECTION_WINDOW = 64 << 20;
const MAX_FRAME = 1 << 20;

/** Encoded frames of frozen (constant) messages, by message object. */
const constantFrames = new WeakMap<object, Buffer>();

/** What a handler uses of a call (GrpcCall; a test double or another transport may stand in). */
export interface ServerCall<Out> {
  on(event: 'data' | 'end' | 'cancelled' | 'error' | 'close', listener: (...args: any[]) => void): unknown; // eslint-disable-line @typescript-eslint/no-explicit-any
  write(msg: Out): unknown;
  /** Ends the call with OK. */
  end(): void;
  /** Ends the call with an error status. */
  destroy(err?: Error): void;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
}

/**
 * One call. Events (as @grpc/grpc-js server streams emit them): 'data' (a decoded message), 'end'
 * (the client half-closed), 'cancelled' (the stream was reset or closed before this side sent a
 * status), 'close' (always last). Never 'error': a malformed message ends the call with a status.
 */
export class GrpcCall<In, Out> extends EventEmitter implements ServerCall<Out> {
  private headersSent = false;
  private statusSent = false;
  private decoder: FrameDecoder | undefined = new FrameDecoder();

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly codec: { request: MessageCodec<In, unknown>; response: MessageCodec<unknown, Out> },
  ) {
    super();
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    stream.on('end', () => {
      // A reset also ends the readable side: with an error code that is a cancellation ('close'
      // reports it). A reset with NO_ERROR (Envoy's own close) cannot be told from a half-close here
      // (as with grpc-js): it surfaces as 'end', then 'close'.
      if (stream.rstCode !== NGHTTP2_NO_ERROR) return;
      if (this.decoder && !this.decoder.idle) {
        this.sendStatus(GrpcStatus.INTERNAL, 'stream ended inside a message');
      } else if (!this.statusSent) this.emit('end');
    });
    // A reset or socket error surfaces as 'close' (statusSent false): nothing else to do here, but a
    // listener must exist or Node throws the error.
    stream.on('error', noop);
    stream.on('close', () => {
      this.decoder = undefined;
      if (!this.statusSent) {
        this.statusSent = true;
        this.emit('cancelled');
      }
      this.emit('close');
    });
  }

  /** True once a status was sent or the stream is gone (writes are dropped). */
  get destroyed(): boolean {
    return this.statusSent || this.stream.destroyed;
  }

  get writableEnded(): boolean {
    return this.statusSent;
  }

  write(msg: Out): boolean {
    if (this.destroyed) return false;
    this.sendHeaders();
    return this.stream.write(this.frame(msg));
  }

  /** The message as a gRPC frame; a frozen message (a constant reply) is encoded only once. */
  private frame(msg: Out): Buffer {
    if (!Object.isFrozen(msg)) return encodeFrame(this.codec.response.encode(msg));
    const key = msg as object;
    let frame = constantFrames.get(key);
    if (!frame) constantFrames.set(key, (frame = encodeFrame(this.codec.response.encode(msg))));
    return frame;
  }

  /** Ends the call with OK. */
  end(): void {
    this.sendStatus(GrpcStatus.OK);
  }

  /** Ends the call with INTERNAL (the error's message as grpc-message). */
  destroy(err?: Error): void {
    this.sendStatus(GrpcStatus.INTERNAL, err?.message ?? 'internal error');
  }

  sendStatus(code: number, message?: string): void {
    if (this.statusSent) return;
    this.statusSent = true;
    const stream = this.stream;
    if (stream.destroyed || stream.closed) return;
    const trailers: http2.OutgoingHttpHeaders = { 'grpc-status': String(code) };
    if (message) trailers['grpc-message'] = encodeURIComponent(message);
    if (!this.headersSent) {
      // Trailers-only response.
      this.headersSent = true;
      stream.respond(
        { ':status': 200, 'content-type': 'application/grpc', ...trailers },
        { endStream: true },
      );
    } else {
      stream.once('wantTrailers', () => stream.sendTrailers(trailers));
      stream.end();
    }
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
  }

  private onData(chunk: Buffer): void {
    if (!this.decoder || this.statusSent) return;
    let messages: Buffer[];
    try {
      messages = this.decoder.push(chunk);
    } catch (err) {
      this.sendStatus(GrpcStatus.INTERNAL, (err as Error).message);
      return;
    }
    for (const bytes of messages) {
      let msg: In;
      try {
        msg = this.codec.request.decode(bytes);
      } catch {
        this.sendStatus(GrpcStatus.INTERNAL, 'malformed protobuf message');
        return;
      }
      this.emit('data', msg);
      if (this.statusSent) return;
    }
  }
}

export interface GrpcMethod<In, Out> {
  readonly request: MessageCodec<In, unknown>;
  readonly response: MessageCodec<unknown, Out>;
  readonly handler: (call: GrpcCall<In, Out>) => void;
}

export interface GrpcServerOptions {
  /** HTTP/2 settings this server announces. */
  readonly settings?: http2.Settings;
  /** A connection was asked to move to a fresh one (connection-rotation.ts). */
  readonly onRotation?: () => void;
  /** A client used up nghttp2's reset budget anyway (connection-rotation.ts: onResetLimit). */
  readonly onResetLimit?: () => void;
}

export class GrpcServer {
  private readonly server: http2.Http2Server;
  private readonly methods = new Map<string, GrpcMethod<unknown, unknown>>();
  private readonly sessions = new Map<http2.ServerHttp2Session, ConnectionRotation>();
  /** The TCP socket whose session the HTTP/2 server is creating (it does so synchronously). */
  private accepting: Socket | undefined;

  constructor(opts: GrpcServerOptions = {}) {
    this.server = http2.createServer({
      settings: { initialWindowSize: STREAM_WINDOW, maxFrameSize: MAX_FRAME, ...opts.settings },
      // Node refuses new streams once a session buffers more than maxSessionMemory (default 10 MB),
      // and ends the session after 100 refusals: large prompts in flight on one connection would get
      // there. Envoy's own buffer limits bound what it sends, as they did with grpc-js (which lifts
      // this limit the same way).
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
    });
    // 'connection' listeners run in order: this one before the HTTP/2 server's own, which creates
    // the session (the session's `socket` refuses writes; the rotation needs the socket itself).
    this.server.prependListener('connection', (socket: Socket) => (this.accepting = socket));
    this.server.on('session', (session: http2.ServerHttp2Session) => {
      const socket = this.accepting;
      this.accepting = undefined;
      this.sessions.set(
        session,
        new ConnectionRotation(session, socket, {
          onNotice: opts.onRotation,
          onResetLimit: opts.onResetLimit,
        }),
      );
      session.on('error', noop);
      session.setLocalWindowSize(CONNECTION_WINDOW);
      session.once('close', () => this.sessions.delete(session));
    });
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
  }

  /** Serves `path` (`/package.Service/Method`). */
  addMethod<In, Out>(path: string, method: GrpcMethod<In, Out>): void {
    this.methods.set(path, method as unknown as GrpcMethod<unknown, unknown>);
  }

  /** Listens on host:port (0 = any free port); resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen(port, host, () => {
        this.server.off('error', onError);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Stops accepting connections and drains every open one (GOAWAY, streams finish); resolves when all
   * are closed.
   */
  shutdown(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const [session, rotation] of this.sessions) {
      rotation.stop();
      session.close();
    }
    return closed;
  }

  /** Closes every connection now (open streams are reset). */
  forceShutdown(): void {
    this.server.close();
    for (const [session, rotation] of this.sessions) {
      rotation.stop();
      session.destroy();
    }
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    const rotation = this.sessions.get(stream.session as http2.ServerHttp2Session);
    if (rotation) {
      rotation.streamOpened();
      stream.once('close', () => rotation.streamClosed());
    }
    const method = this.methods.get(headers[':path'] ?? '');
    const contentType = headers['content-type'] ?? '';
    if (headers[':method'] !== 'POST' || !contentType.startsWith('application/grpc')) {
      stream.on('error', noop);
      stream.respond({ ':status': 415 }, { endStream: true });
      return;
    }
    if (!method) {
      const call = new GrpcCall(stream, { request: NO_CODEC, response: NO_CODEC });
      call.sendStatus(GrpcStatus.UNIMPLEMENTED, `unknown method ${headers[':path']}`);
      return;
    }
    method.handler(new GrpcCall(stream, method));
  }
}

function noop(): void {}

const NO_CODEC: MessageCodec<unknown, unknown> = {
  decode: () => undefined,
  encode: () => new Uint8Array(0),
};
