/**
 * Fixes `usage.prompt_tokens_details.cached_tokens` in a P/D decode SSE stream (vllm-project/router
 * issue #193): the decode worker received the whole prompt's KV cache from the prefill worker, so it
 * claims every prompt token as cached. The honest number is what the prefill worker reported; when it
 * reported none, the field is removed.
 *
 * Streaming, not buffering: chunks that end on a frame boundary (`\n\n`) and carry no usage pass
 * through untouched (the common case, one byte search). Only an incomplete trailing frame is held back
 * until the next chunk completes it, so a usage frame split across chunks is still rewritten; bytes are
 * kept as Buffers so a multi-byte character split across chunks is never corrupted.
 */
const FRAME_END = Buffer.from('\n\n');
const MARKER = Buffer.from('"prompt_tokens_details"');

export class SseUsageRewriter {
  private carry: Buffer | undefined;

  constructor(private readonly cachedTokens: () => number | undefined) {}

  /** Returns the bytes to forward instead of `chunk`, or undefined to forward it unchanged. */
  transform(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
    if (!this.carry && endsWithFrame(chunk) && chunk.indexOf(MARKER) === -1) return undefined;
    const data = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    this.carry = undefined;
    let complete = data;
    if (!endOfStream) {
      const end = data.lastIndexOf(FRAME_END);
      if (end === -1) {
        this.carry = data;
        return Buffer.alloc(0);
      }
      complete = data.subarray(0, end + 2);
      if (end + 2 < data.length) this.carry = Buffer.from(data.subarray(end + 2));
    }
    if (complete.indexOf(MARKER) === -1) return complete === chunk ? undefined : complete;
    return Buffer.from(this.rewriteFrames(complete.toString('utf8')));
  }

  private rewriteFrames(text: string): string {
    return text
      .split('\n\n')
      .map((frame) => {
        if (!frame.startsWith('data: {') || !frame.includes('"prompt_tokens_details"')) return frame;
        try {
          const obj = JSON.parse(frame.slice(6)) as {
            usage?: { prompt_tokens_details?: Record<string, unknown> | null };
          };
          const details = obj.usage?.prompt_tokens_details;
          if (!details) return frame;
          const cached = this.cachedTokens();
          if (cached === undefined) delete details.cached_tokens;
          else details.cached_tokens = cached;
          return `data: ${JSON.stringify(obj)}`;
        } catch {
          return frame;
        }
      })
      .join('\n\n');
  }
}

function endsWithFrame(b: Buffer): boolean {
  const n = b.length;
  return n >= 2 && b[n - 1] === 10 && b[n - 2] === 10;
}
