/**
 * A mirror of nghttp2's rapid-reset limit (CVE-2023-44487; nghttp2 >= 1.57, the HTTP/2 library in
 * Node): per server connection, a token bucket of `burst` tokens (1,000) refilled at `ratePerSec` (33)
 * per whole second of a seconds clock; every RST_STREAM the client sends takes one token, and the
 * reset that finds the bucket empty makes nghttp2 answer GOAWAY(INTERNAL_ERROR), which fails every
 * stream the client sent after it. Node 20 cannot change the two numbers (Node 22.10+ has
 * `streamResetBurst`/`streamResetRate`).
 *
 * Envoy resets every ext_proc stream it is done with (unless its `ext_proc_graceful_grpc_close` runtime
 * flag is on), so one busy connection spends a token per request: ~1,000 requests in its first second
 * trip the limit. connection-rotation.ts reads `used` to move Envoy to a fresh connection long before.
 *
 * Measured on Node 20.20 (nghttp2 1.61): a client that resets each stream after its response got
 * GOAWAY(INTERNAL_ERROR) after 1,034 resets in ~1 s (1,000 + 33 per elapsed second), whether or not
 * the server had already ended the stream. This mirror's second boundaries are not nghttp2's, so it
 * may count up to one refill (33) fewer tokens used than nghttp2 does: callers keep a margin.
 *
 * Pure: the caller passes the clock (whole seconds).
 */
export const NGHTTP2_RESET_BURST = 1000;
export const NGHTTP2_RESET_RATE_PER_SEC = 33;

export class ResetBudget {
  private tokens: number;

  constructor(
    private stampSec: number,
    readonly burst = NGHTTP2_RESET_BURST,
    readonly ratePerSec = NGHTTP2_RESET_RATE_PER_SEC,
  ) {
    this.tokens = burst;
  }

  /** Tokens spent and not yet refilled (as of the last take). */
  get used(): number {
    return this.burst - this.tokens;
  }

  /** One reset at `nowSec`. Returns false once the bucket was empty (nghttp2 would have sent GOAWAY). */
  take(nowSec: number): boolean {
    if (nowSec > this.stampSec) {
      this.tokens = Math.min(this.burst, this.tokens + this.ratePerSec * (nowSec - this.stampSec));
      this.stampSec = nowSec;
    }
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}
