/**
 * Connection rotation against a real node:http2 client that behaves like Envoy's ext_proc client with
 * its defaults: every stream is reset (RST_STREAM) as soon as its reply arrived, on one long-lived
 * connection; on a GOAWAY the client opens a new connection for new streams and lets the old streams
 * finish. Without rotation, nghttp2's rapid-reset limit closes the connection after ~1,000 resets
 * (GOAWAY INTERNAL_ERROR) and the streams sent meanwhile are lost.
 *
 * Node's client (unlike Envoy's, which writes a new stream's HEADERS at once) may still hold a new
 * stream unsent when it reads the GOAWAY; its HTTP/2 library then refuses that stream locally
 * (REFUSED_STREAM: never sent, so safe to retry, RFC 9113 §8.7). The client here retries those, and the
 * server's own record proves no stream reached it twice or went missing.
 */
import http2 from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { codecs } from '../../../src/extproc/codec.js';
import { GrpcServer } from '../../../src/extproc/grpc-server.js';
import { encodeFrame } from '../../../src/extproc/grpc-frames.js';

type Msg = { service: string };
const REFUSED = 'refused';
const ECHO = '/test.Echo/Chat';
const c = codecs();

let server: GrpcServer | undefined;
const clients: http2.ClientHttp2Session[] = [];
afterEach(() => {
  for (const s of clients.splice(0)) s.destroy();
  server?.forceShutdown();
  server = undefined;
});

async function startEcho(counts: {
  rotations: number;
  resetLimit: number;
  seen: Map<string, number>;
}): Promise<number> {
  server = new GrpcServer({
    onRotation: () => (counts.rotations += 1),
    onResetLimit: () => (counts.resetLimit += 1),
  });
  server.addMethod<Msg, Msg>(ECHO, {
    request: c.healthCheckRequest,
    response: c.healthCheckRequest,
    handler: (call) => {
      call.on('data', (m: Msg) => {
        counts.seen.set(m.service, (counts.seen.get(m.service) ?? 0) + 1);
        call.write({ service: `echo:${m.service}` });
      });
      call.on('end', () => call.end());
    },
  });
  return server.listen('127.0.0.1', 0);
}

/** Envoy-like client: one connection at a time; a GOAWAY moves new streams to a new connection. */
class ResettingClient {
  readonly goaways: Array<{ code: number; lastStreamId: number }> = [];
  private session: http2.ClientHttp2Session | undefined;
  connections = 0;

  constructor(private readonly port: number) {}

  private current(): http2.ClientHttp2Session {
    if (!this.session || this.session.closed || this.session.destroyed) {
      const s = http2.connect(`http://127.0.0.1:${this.port}`);
      s.on('error', () => undefined);
      s.on('goaway', (code, lastStreamId) => {
        this.goaways.push({ code, lastStreamId });
        if (this.session === s) this.session = undefined;
      });
      clients.push(s);
      this.session = s;
      this.connections += 1;
    }
    return this.session;
  }

  /** Streams the client's HTTP/2 library refused before sending them (retried). */
  refusedUnsent = 0;

  /** One stream: a message, its reply, then RST_STREAM(NO_ERROR). Resolves with the reply or an error. */
  async call(i: number): Promise<string> {
    for (;;) {
      const reply = await this.once(i);
      if (reply !== REFUSED) return reply;
      this.refusedUnsent += 1;
    }
  }

  private once(i: number): Promise<string> {
    return new Promise((resolve) => {
      let req: http2.ClientHttp2Stream;
      try {
        req = this.current().request({
          ':method': 'POST',
          ':path': ECHO,
          'content-type': 'application/grpc',
        });
      } catch (err) {
        resolve(`error: ${(err as Error).message}`);
        return;
      }
      let reply = '';
      req.on('data', (chunk: Buffer) => {
        reply = c.healthCheckRequest.decode(chunk.subarray(5)).service;
        req.close(http2.constants.NGHTTP2_NO_ERROR);
      });
      req.on('error', (err) => {
        const refused = req.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM;
        reply ||= refused ? REFUSED : `error: ${err.message}`;
      });
      req.on('close', () => resolve(reply || `error: closed without a reply (rst ${req.rstCode})`));
      req.write(encodeFrame(c.healthCheckRequest.encode({ service: `m${i}` })));
    });
  }
}

describe('connection rotation (nghttp2 rapid-reset limit)', () => {
  it('moves a client that resets every stream to fresh connections without losing one stream', async () => {
    const counts = { rotations: 0, resetLimit: 0, seen: new Map<string, number>() };
    const client = new ResettingClient(await startEcho(counts));
    const total = 3000;
    const failures: string[] = [];
    let next = 0;
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < total) {
          const i = next++;
          const reply = await client.call(i);
          if (reply !== `echo:m${i}`) failures.push(`${i}: ${reply}`);
        }
      }),
    );
    expect(failures).toEqual([]);
    expect(counts.resetLimit).toBe(0);
    // Every message reached the server exactly once (a refused stream had never been sent).
    expect(counts.seen.size).toBe(total);
    expect([...counts.seen.values()].every((n) => n === 1)).toBe(true);
    // 3,000 resets are far beyond nghttp2's burst of 1,000 on one connection: the server rotated.
    expect(counts.rotations).toBeGreaterThanOrEqual(2);
    expect(client.connections).toBeGreaterThanOrEqual(3);
    // Each rotation: first the shutdown notice (refuses nothing), then the final GOAWAY, both NO_ERROR.
    expect(client.goaways.length).toBeGreaterThanOrEqual(counts.rotations);
    expect(client.goaways.every((g) => g.code === http2.constants.NGHTTP2_NO_ERROR)).toBe(true);
    expect(client.goaways[0]?.lastStreamId).toBe(2 ** 31 - 1);
  });
});
