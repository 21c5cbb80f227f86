/**
 * gRPC message framing (the "Length-Prefixed-Message" of the gRPC over HTTP/2 protocol): a 1-byte
 * compressed flag, a 4-byte big-endian length, then the message bytes.
 *
 * FrameDecoder takes the HTTP/2 DATA chunks of one stream as they arrive and returns the complete
 * messages in them. A message inside one chunk is returned as a view (no copy); a message split across
 * chunks is copied once, when its last byte arrives (the parts are kept until then, never re-joined per
 * chunk). A compressed message is a protocol error here (the server announces no grpc-accept-encoding,
 * so a compliant client never compresses).
 */

export const FRAME_HEADER_BYTES = 5;

export class FrameError extends Error {}

/** One message as a gRPC frame: header + message in one buffer. */
export function encodeFrame(message: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  out.set(message, FRAME_HEADER_BYTES);
  return out;
}

export class FrameDecoder {
  /** Bytes received but not yet returned (parts of the current frame). */
  private parts: Buffer[] = [];
  private buffered = 0;
  /** Length of the current frame's message, once its header is complete; -1 before. */
  private need = -1;

  /** True when no partial frame is pending (a stream may only end here). */
  get idle(): boolean {
    return this.buffered === 0;
  }

  /** The complete messages in `chunk` (with what earlier chunks left over), in order. */
  push(chunk: Buffer): Buffer[] {
    const out: Buffer[] = [];
    let buf = chunk;
    if (this.buffered > 0) {
      this.parts.push(chunk);
      this.buffered += chunk.length;
      if (this.need < 0) {
        if (this.buffered < FRAME_HEADER_BYTES) return out;
        // Join only the (small) start that holds the header when it is split.
        if ((this.parts[0] as Buffer).length < FRAME_HEADER_BYTES) this.join();
        this.need = this.header(this.parts[0] as Buffer);
      }
      if (this.buffered < FRAME_HEADER_BYTES + this.need) return out;
      buf = this.join();
      this.parts = [];
      this.buffered = 0;
      this.need = -1;
    }
    let at = 0;
    while (buf.length - at >= FRAME_HEADER_BYTES) {
      const len = this.header(at === 0 ? buf : buf.subarray(at));
      const end = at + FRAME_HEADER_BYTES + len;
      if (end > buf.length) break;
      out.push(buf.subarray(at + FRAME_HEADER_BYTES, end));
      at = end;
    }
    if (at < buf.length) {
      const rest = buf.subarray(at);
      this.parts = [rest];
      this.buffered = rest.length;
      this.need = rest.length >= FRAME_HEADER_BYTES ? this.header(rest) : -1;
    }
    return out;
  }

  private header(b: Buffer): number {
    if (b[0] !== 0) throw new FrameError('compressed gRPC messages are not supported');
    return b.readUInt32BE(1);
  }

  private join(): Buffer {
    const joined = this.parts.length === 1 ? (this.parts[0] as Buffer) : Buffer.concat(this.parts);
    this.parts = [joined];
    return joined;
  }
}
