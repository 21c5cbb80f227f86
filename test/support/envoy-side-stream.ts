/**
 * One ext_proc stream as Envoy's ext_proc filter opens it, over a raw node:http2 client: gRPC frames
 * written as the test says, and the three ways Envoy ends a stream (half-close alone, with the
 * `ext_proc_graceful_grpc_close` runtime flag; half-close then RST_STREAM NO_ERROR, Envoy's default;
 * RST_STREAM CANCEL, as other gRPC clients cancel). Replies are decoded and handed over in arrival
 * order; `activity()` resolves at the next reply or at the stream's end.
 */
import http2 from 'node:http2';
import protobuf from 'protobufjs';
import { encodeFrame, FrameDecoder } from '../../src/extproc/grpc-frames.js';
import { codecs } from '../../src/extproc/codec.js';
import {
  protoPath,
  SERVICE_NAME,
  type ProcessingRequest,
  type ProcessingResponse,
} from '../../src/extproc/proto.js';

export type EnvoyClose = 'graceful' | 'reset' | 'cancel';

/** A ProcessingRequest, with the HttpBody fields Envoy 1.40 has and the router's proto leaves out. */
export type EnvoyRequest = ProcessingRequest & {
  request_body?: { end_of_stream_without_message?: boolean };
  response_body?: { end_of_stream_without_message?: boolean };
};

let encoder: protobuf.Type | undefined;

/** ProcessingRequest's encoder with HttpBody.end_of_stream_without_message (field 3, as in Envoy's API). */
function requestType(): protobuf.Type {
  if (!encoder) {
    const root = new protobuf.Root().loadSync(protoPath(), { keepCase: true });
    root
      .lookupType('envoy.service.ext_proc.v3.HttpBody')
      .add(new protobuf.Field('end_of_stream_without_message', 3, 'bool'));
    encoder = root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
  }
  return encoder;
}

export class EnvoySideStream {
  /** The gRPC status the router ended the stream with (undefined: not ended by the router). */
  grpcStatus: number | undefined;
  /** The router ended the stream (its status came) or the stream is gone: Envoy is done with it. */
  closed = false;
  readonly done: Promise<void>;
  private readonly req: http2.ClientHttp2Stream;
  private readonly decoder = new FrameDecoder();
  private wake: (() => void) | undefined;

  constructor(session: http2.ClientHttp2Session, onReply: (r: ProcessingResponse) => void) {
    this.req = session.request({
      ':method': 'POST',
      ':path': `/${SERVICE_NAME}/Process`,
      'content-type': 'application/grpc',
      te: 'trailers',
    });
    this.req.on('response', (h) => {
      if (h['grpc-status'] !== undefined) this.ended(Number(h['grpc-status']));
    });
    this.req.on('trailers', (t) => this.ended(Number(t['grpc-status'])));
    const decode = codecs().processingResponse;
    this.req.on('data', (chunk: Buffer) => {
      for (const bytes of this.decoder.push(chunk)) onReply(decode.decode(bytes));
      this.poke();
    });
    this.req.on('error', () => undefined);
    this.done = new Promise((resolve) =>
      this.req.on('close', () => {
        this.closed = true;
        this.poke();
        resolve();
      }),
    );
  }

  send(msg: EnvoyRequest): void {
    if (this.closed || this.req.writableEnded) return;
    const bytes = requestType()
      .encode(msg as unknown as Record<string, unknown>)
      .finish();
    this.req.write(encodeFrame(bytes));
  }

  /** Resolves at the next reply or the stream's end (or at once when it has ended). */
  activity(): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const prev = this.wake;
      this.wake = () => {
        prev?.();
        resolve();
      };
    });
  }

  close(how: EnvoyClose): void {
    if (this.req.closed) return;
    if (this.grpcStatus !== undefined) {
      // The router has ended the stream: Envoy's gRPC client is done with it, it sends nothing more
      // than its own end. (END_STREAM then RST_STREAM NO_ERROR here, with the router in this process,
      // sends Node 20's http2 into an endless native write loop: not what Envoy does.)
      if (!this.req.writableEnded) this.req.end();
      return;
    }
    if (how !== 'cancel' && !this.req.writableEnded) this.req.end();
    if (how === 'reset') this.req.close(http2.constants.NGHTTP2_NO_ERROR);
    if (how === 'cancel') this.req.close(http2.constants.NGHTTP2_CANCEL);
  }

  private ended(status: number): void {
    this.grpcStatus = status;
    this.closed = true;
    this.poke();
  }

  private poke(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }
}
