/**
 * Moves a client to a fresh HTTP/2 connection before nghttp2's rapid-reset limit would close this one
 * with streams lost (reset-budget.ts), so a plain Envoy ext_proc filter — which resets every finished
 * stream (RST_STREAM INTERNAL_ERROR, measured with Envoy 1.40) — loses no request.
 *
 * The lossless way is HTTP/2's two-step graceful shutdown (RFC 9113 §6.8): first a GOAWAY with the
 * highest stream id and NO_ERROR (a "shutdown notice": the client opens no new stream on this
 * connection, and every stream it already sent is still served), then, one round trip later (a PING),
 * the real GOAWAY. nghttp2 has the notice (`nghttp2_submit_shutdown_notice`) but Node does not expose
 * it, and Node's `session.goaway()`/`close()` make nghttp2 ignore every stream that arrives afterwards,
 * so the streams the client sent while that GOAWAY was on its way would hang, then fail (measured).
 * So the notice (17 bytes) is written here on the TCP socket itself, behind nghttp2's back, which is
 * what lets nghttp2 go on serving the streams that cross it. It lands between two frames: Node hands
 * nghttp2's output to the socket in whole frames, and the socket's writes are queued in order. After
 * the PING's answer (by then every stream the client sent before it read the notice has arrived),
 * `session.close()` sends the real GOAWAY and ends the connection once its streams are done; from then
 * on nghttp2 no longer counts resets on it either.
 *
 * When: each stream that closes takes one token from a mirror of nghttp2's bucket (every close, reset
 * or not: Node does not tell a reset with NO_ERROR from a graceful end, and an over-count only
 * rotates earlier). The notice goes out once the tokens used plus the streams still open (each may
 * still be reset) reach ROTATE_AT = half of nghttp2's burst; the other half is the margin for the
 * streams that cross the notice and for the mirror's clock. A connection whose streams close slower
 * than the refill rate (33/s) is never rotated; a busy one about every 500 streams, like Envoy's
 * `max_requests_per_connection: 500`.
 */
import type { Socket } from 'node:net';
import type { ServerHttp2Session } from 'node:http2';
import { NGHTTP2_RESET_BURST, ResetBudget } from './reset-budget.js';

export const ROTATE_AT = NGHTTP2_RESET_BURST / 2;

/** GOAWAY (type 7) on stream 0: 8-byte payload = last stream id 2^31-1, error code NO_ERROR (0). */
export const SHUTDOWN_NOTICE = Buffer.from([0, 0, 8, 7, 0, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]);

function nowSec(): number {
  return Math.floor(performance.now() / 1000);
}

export interface RotationEvents {
  /** The shutdown notice was written: the client is moving to a fresh connection. */
  onNotice?: () => void;
  /**
   * The mirrored reset budget ran out anyway (the client kept the connection busy after the notice):
   * nghttp2 may have closed the connection with GOAWAY(INTERNAL_ERROR) and streams may have failed.
   */
  onResetLimit?: () => void;
}

export class ConnectionRotation {
  private readonly budget = new ResetBudget(nowSec());
  private openStreams = 0;
  private state: 'serving' | 'rotating' | 'stopped' = 'serving';
  private limitReported = false;

  /** `socket`: the session's TCP socket (no rotation without it, e.g. a TLS or proxied session). */
  constructor(
    private readonly session: ServerHttp2Session,
    private readonly socket: Socket | undefined,
    private readonly events: RotationEvents = {},
  ) {}

  streamOpened(): void {
    this.openStreams += 1;
    this.maybeRotate();
  }

  streamClosed(): void {
    this.openStreams -= 1;
    if (!this.budget.take(nowSec()) && !this.limitReported && this.state !== 'stopped') {
      this.limitReported = true;
      this.events.onResetLimit?.();
    }
    this.maybeRotate();
  }

  /** The server closes this connection itself (shutdown): no rotation any more. */
  stop(): void {
    this.state = 'stopped';
  }

  private maybeRotate(): void {
    if (this.state !== 'serving' || this.budget.used + this.openStreams < ROTATE_AT) return;
    const { session, socket } = this;
    if (!socket || socket.destroyed || !socket.writable || session.closed || session.destroyed) return;
    this.state = 'rotating';
    socket.write(SHUTDOWN_NOTICE);
    this.events.onNotice?.();
    // The PING's answer comes after everything the client sent before it read the notice.
    const close = (): void => {
      if (!session.closed && !session.destroyed) session.close();
    };
    if (!session.ping(close)) close();
  }
}
