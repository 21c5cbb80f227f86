/**
 * Fixes `usage.prompt_tokens_details.cached_tokens` in a P/D decode SSE stream (vllm-project/router
 * issue #193): the decode worker received the whole prompt's KV cache from the prefill worker, so it
 * claims every prompt token as cached. The honest number is what the prefill worker reported; when it
 * reported none, the field is removed. A /v1/responses stream carries its usage in the
 * `response.completed` event (`event: ...` line, then `data: {"response": {"usage":
 * {"input_tokens_details": ...}}}`): the same fix applies there.
 *
 * Streaming, not buffering: chunks that end on a frame boundary (`\n\n`) and carry no usage pass
 * through untouched (the common case, one byte search). Only an incomplete trailing frame is held back
 * until the next chunk completes it, so a usage frame split across chunks is still rewritten; bytes are
 * kept as Buffers so a multi-byte character split across chunks is never corrupted.
 */
const FRAME_END = Buffer.from('\n\n');
const MARKER = Buffer.from('"prompt_tokens_details"');
const RESPONSES_MARKER = Buffer.from('"input_tokens_details"');

function hasUsage(b: Buffer): boolean {
  return b.indexOf(MARKER) !== -1 || b.indexOf(RESPONSES_MARKER) !== -1;
}

type Details = Record<string, unknown> | null | undefined;
interface UsageFrame {
  usage?: { prompt_tokens_details?: Details; input_tokens_details?: Details };
  response?: { usage?: { input_tokens_details?: Details } };
}

export class SseUsageRewriter {
  private carry: Buffer | undefined;

  constructor(private readonly cachedTokens: () => number | undefined) {}

  /** Returns the bytes to forward instead of `chunk`, or undefined to forward it unchanged. */
  transform(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
    if (!this.carry && endsWithFrame(chunk) && !hasUsage(chunk)) return undefined;
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
    if (!hasUsage(complete)) return complete === chunk ? undefined : complete;
    return Buffer.from(this.rewriteFrames(complete.toString('utf8')));
  }

  private rewriteFrames(text: string): string {
    return text
      .split('\n\n')
      .map((frame) => {
        const at = dataLineStart(frame);
        if (at === -1) return frame;
        if (!frame.includes('"prompt_tokens_details"') && !frame.includes('"input_tokens_details"')) {
          return frame;
        }
        try {
          const obj = JSON.parse(frame.slice(at + 6)) as UsageFrame;
          const details =
            obj.usage?.prompt_tokens_details ??
            obj.usage?.input_tokens_details ??
            obj.response?.usage?.input_tokens_details;
          if (!details) return frame;
          const cached = this.cachedTokens();
          if (cached === undefined) delete details.cached_tokens;
          else details.cached_tokens = cached;
          return `${frame.slice(0, at)}data: ${JSON.stringify(obj)}`;
        } catch {
          return frame;
        }
      })
      .join('\n\n');
  }
}

/** Where a frame's `data: {` line starts (after an `event:` line, in a /v1/responses stream); -1: none. */
function dataLineStart(frame: string): number {
  if (frame.startsWith('data: {')) return 0;
  const i = frame.indexOf('\ndata: {');
  return i === -1 ? -1 : i + 1;
}

function endsWithFrame(b: Buffer): boolean {
  const n = b.length;
  return n >= 2 && b[n - 1] === 10 && b[n - 2] === 10;
}
