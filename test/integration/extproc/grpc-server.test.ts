/**
 * The node:http2 gRPC server against real gRPC clients (@grpc/grpc-js) and raw HTTP/2: message
 * framing both ways, statuses, health Check/Watch, resets.
 */
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { afterEach, describe, expect, it } from 'vitest';
import { codecs } from '../../../src/extproc/codec.js';
import { GrpcServer, GrpcStatus, type GrpcCall } from '../../../src/extproc/grpc-server.js';
import { HealthService } from '../../../src/extproc/health-service.js';
import { encodeFrame } from '../../../src/extproc/grpc-frames.js';

type Msg = { service: string };
const ECHO = '/test.Echo/Chat';
const c = codecs();
const serialize = (m: Msg): Buffer => Buffer.from(c.healthCheckRequest.encode(m));
const deserialize = (b: Buffer): Msg => ({ service: c.healthCheckRequest.decode(b).service });

let server: GrpcServer | undefined;
let client: grpc.Client | undefined;
afterEach(async () => {
  client?.close();
  server?.forceShutdown();
  server = client = undefined;
});

/** An echo server: answers each message with `echo:<service>`, ends with OK on half-close. */
async function startEcho(onCall?: (call: GrpcCall<Msg, Msg>, events: string[]) => void): Promise<number> {
  server = new GrpcServer();
  server.addMethod<Msg, Msg>(ECHO, {
    request: c.healthCheckRequest,
    response: c.healthCheckRequest,
    handler: (call) => {
      const events: string[] = [];
      call.on('data', (m: Msg) => {
        if (m.service === 'bad') return call.sendStatus(GrpcStatus.INVALID_ARGUMENT, 'bad input');
        call.write({ service: `echo:${m.service}` });
      });
      call.on('end', () => call.end());
      for (const e of ['end', 'cancelled', 'close']) call.on(e, () => events.push(e));
      onCall?.(call, events);
    },
  });
  return server.listen('127.0.0.1', 0);
}

function chat(port: number, messages: string[]): Promise<{ replies: string[]; status: grpc.StatusObject }> {
  client ??= new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const call = client.makeBidiStreamRequest(ECHO, serialize, deserialize);
  const replies: string[] = [];
  return new Promise((resolve) => {
    call.on('data', (m: Msg) => replies.push(m.service));
    call.on('error', () => undefined);
    call.on('status', (status) => resolve({ replies, status }));
    for (const m of messages) call.write({ service: m });
    call.end();
  });
}

describe('gRPC server over node:http2', () => {
  it('answers every message of a bidi stream in order and ends with OK after the half-close', async () => {
    const port = await startEcho();
    const big = 'x'.repeat(300_000); // spans many HTTP/2 DATA frames
    const { replies, status } = await chat(port, ['a', big, 'b']);
    expect(replies).toEqual(['echo:a', `echo:${big}`, 'echo:b']);
    expect(status.code).toBe(grpc.status.OK);
  });

  it('sends a status with its message, trailers-only before any reply', async () => {
    const port = await startEcho();
    const { replies, status } = await chat(port, ['bad']);
    expect(replies).toEqual([]);
    expect(status.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(status.details).toBe('bad input');
  });

  it('answers UNIMPLEMENTED for a method it does not serve', async () => {
    const port = await startEcho();
    client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const err = await new Promise<grpc.ServiceError | null>((resolve) =>
      client!.makeUnaryRequest('/test.Echo/Nope', serialize, deserialize, { service: 'x' }, (e) =>
        resolve(e),
      ),
    );
    expect(err?.code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it('ends a call whose message is not valid protobuf with INTERNAL, and ends a reset call once', async () => {
    let seen: string[] = [];
    const port = await startEcho((_call, events) => (seen = events));
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const status = await new Promise<string | undefined>((resolve) => {
        const req = session.request({ ':method': 'POST', ':path': ECHO, 'content-type': 'application/grpc' });
        req.on('trailers', (t) => resolve(t['grpc-status'] as string));
        req.on('response', (h) => h['grpc-status'] && resolve(h['grpc-status'] as string));
        req.on('error', () => resolve(undefined));
        req.resume();
        req.write(encodeFrame(Buffer.from([0xff, 0xff, 0xff])));
      });
      expect(status).toBe(String(GrpcStatus.INTERNAL));

      const closed = new Promise<void>((resolve) => {
        const req = session.request({ ':method': 'POST', ':path': ECHO, 'content-type': 'application/grpc' });
        req.on('error', () => undefined);
        req.on('response', () => req.close(http2.constants.NGHTTP2_CANCEL));
        req.write(encodeFrame(serialize({ service: 'a' })));
        req.on('close', () => resolve());
      });
      await closed;
      // Node's client sends END_STREAM before its RST_STREAM (as Envoy does): a half-close, then the
      // close. Either way the call ends exactly once and 'close' comes last.
      await expect.poll(() => seen.at(-1)).toBe('close');
      expect(seen.filter((e) => e === 'end' || e === 'cancelled')).toHaveLength(1);
    } finally {
      session.destroy();
    }
  });

  it('announces large flow-control windows and frames, and a large message arrives whole', async () => {
    const port = await startEcho();
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      await new Promise<void>((resolve) => session.once('remoteSettings', () => resolve()));
      expect(session.remoteSettings.initialWindowSize).toBe(8 << 20);
      expect(session.remoteSettings.maxFrameSize).toBe(1 << 20);
      // The connection window follows in a WINDOW_UPDATE right after the settings.
      await expect.poll(() => session.state.remoteWindowSize).toBe(64 << 20);
      const big = 'y'.repeat(3_000_000);
      const reply = await new Promise<string>((resolve, reject) => {
        const req = session.request({ ':method': 'POST', ':path': ECHO, 'content-type': 'application/grpc' });
        const parts: Buffer[] = [];
        req.on('data', (d: Buffer) => parts.push(d));
        req.on('end', () => resolve(deserialize(Buffer.concat(parts).subarray(5)).service));
        req.on('error', reject);
        req.end(encodeFrame(serialize({ service: big })));
      });
      expect(reply).toBe(`echo:${big}`);
    } finally {
      session.destroy();
    }
  });

  it('serves grpc.health.v1 Check and Watch', async () => {
    server = new GrpcServer();
    const health = new HealthService({ '': 'SERVING', readiness: 'SERVING' });
    health.addTo(server);
    const port = await server.listen('127.0.0.1', 0);
    const pkg = grpc.loadPackageDefinition(protoLoader.loadSync(healthProtoPath, { enums: String })) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
    const hc = new pkg.grpc.health.v1.Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    try {
      const check = (service: string) =>
        new Promise<{ code: number; status?: string }>((resolve) =>
          hc.Check({ service }, (err: grpc.ServiceError | null, res?: { status: string }) =>
            resolve({ code: err?.code ?? 0, status: res?.status }),
          ),
        );
      expect(await check('')).toEqual({ code: 0, status: 'SERVING' });
      expect((await check('nope')).code).toBe(grpc.status.NOT_FOUND);
      const watch = hc.Watch({ service: 'readiness' });
      const seen: string[] = [];
      watch.on('data', (r: { status: string }) => seen.push(r.status));
      watch.on('error', () => undefined);
      await expect.poll(() => seen).toEqual(['SERVING']);
      health.setStatus('readiness', 'NOT_SERVING');
      await expect.poll(() => seen).toEqual(['SERVING', 'NOT_SERVING']);
      expect(await check('readiness')).toEqual({ code: 0, status: 'NOT_SERVING' });
      // Any name may be watched; once its Watch ends, nothing of it is kept.
      const other = hc.Watch({ service: `made-up-${'x'.repeat(64)}` });
      other.on('data', () => undefined);
      other.on('error', () => undefined);
      await expect.poll(() => health.watchedServices()).toBe(2);
      other.cancel();
      watch.cancel();
      await expect.poll(() => health.watchedServices()).toBe(0);
    } finally {
      hc.close();
    }
  });
});
