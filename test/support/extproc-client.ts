/**
 * A real grpc-js client that drives the ext_proc server the way Envoy does: one bidi stream per
 * request, one message at a time, awaiting each reply.
 */
import * as grpc from '@grpc/grpc-js';
import { extProcService, type ProcessingRequest, type ProcessingResponse } from '../../src/extproc/proto.js';

export class ExtProcTestClient {
  private readonly client: grpc.Client;

  constructor(port: number) {
    const Ctor = extProcService();
    this.client = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  }

  open(): ExtProcTestStream {
    const call = (
      this.client as unknown as { Process(): grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse> }
    ).Process();
    return new ExtProcTestStream(call);
  }

  close(): void {
    this.client.close();
  }
}

export class ExtProcTestStream {
  private readonly queue: ProcessingResponse[] = [];
  private waiters: Array<(r: ProcessingResponse | undefined) => void> = [];
  private ended = false;
  readonly done: Promise<grpc.StatusObject | undefined>;

  constructor(readonly call: grpc.ClientDuplexStream<ProcessingRequest, ProcessingResponse>) {
    call.on('data', (r: ProcessingResponse) => {
      const w = this.waiters.shift();
      if (w) w(r);
      else this.queue.push(r);
    });
    this.done = new Promise((resolve) => {
      call.on('status', (s) => resolve(s));
      call.on('error', () => resolve(undefined));
    });
    call.on('end', () => this.finish());
    call.on('error', () => this.finish());
  }

  private finish(): void {
    this.ended = true;
    for (const w of this.waiters.splice(0)) w(undefined);
  }

  /** Next reply, or undefined when the server ended the stream. */
  next(): Promise<ProcessingResponse | undefined> {
    const r = this.queue.shift();
    if (r) return Promise.resolve(r);
    if (this.ended) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async send(msg: ProcessingRequest): Promise<ProcessingResponse | undefined> {
    this.call.write(msg);
    return this.next();
  }

  /** Sends without waiting for a reply (FULL_DUPLEX_STREAMED chunks). */
  write(msg: ProcessingRequest): void {
    this.call.write(msg);
  }

  /** Envoy's close(): half-close then reset. */
  cancel(): void {
    this.call.cancel();
  }

  halfClose(): void {
    this.call.end();
  }
}

export function headers(
  map: Record<string, string>,
  endOfStream = false,
): ProcessingRequest['request_headers'] {
  return {
    headers: { headers: Object.entries(map).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) },
    end_of_stream: endOfStream,
  };
}

export function requestHeaders(
  method: string,
  path: string,
  extra: Record<string, string> = {},
  endOfStream = false,
): ProcessingRequest {
  return {
    request_headers: headers(
      {
        ':method': method,
        ':path': path,
        ':authority': 'test',
        'content-type': 'application/json',
        ...extra,
      },
      endOfStream,
    ),
  };
}

export function requestBody(body: string | Buffer | object, endOfStream = true): ProcessingRequest {
  const buf = Buffer.isBuffer(body)
    ? body
    : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
  return { request_body: { body: buf, end_of_stream: endOfStream } };
}

export function responseHeaders(status: number, endOfStream = false): ProcessingRequest {
  return {
    response_headers: headers(
      { ':status': String(status), 'content-type': 'text/event-stream' },
      endOfStream,
    ),
  };
}

export function responseBody(text: string, endOfStream = false): ProcessingRequest {
  return { response_body: { body: Buffer.from(text), end_of_stream: endOfStream } };
}

/** Header value set by a reply's header mutation (request_headers, request_body or response_headers). */
export function setHeader(r: ProcessingResponse | undefined, name: string): string | undefined {
  const common =
    r?.request_headers?.response ??
    r?.request_body?.response ??
    r?.response_headers?.response ??
    r?.response_body?.response;
  const h = common?.header_mutation?.set_headers?.find((s) => s.header.key === name);
  if (!h) return undefined;
  const raw = (h.header as { raw_value?: Buffer; value?: string }).raw_value;
  return raw && raw.length ? raw.toString() : (h.header as { value?: string }).value;
}

export function removedHeaders(r: ProcessingResponse | undefined): string[] {
  const common = r?.request_headers?.response ?? r?.request_body?.response;
  return common?.header_mutation?.remove_headers ?? [];
}
