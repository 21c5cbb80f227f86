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
 *
 * A non-streamed response (JsonUsageRewriter) carries its usage in the one JSON body: its chunks are
 * held (each answered with an empty body) and the whole is rewritten at its end, as vLLM's router
 * does (vllm-project/router pd_cached_tokens.rs `reconcile_usage`). Held only up to
 * MAX_HELD_JSON_BYTES: a larger body (long logprobs) is passed on unchanged from there, so a huge
 * response is never held whole. The rewritten body's length differs from the worker's
 * Content-Length, which the dispatch has Envoy remove at the response headers.
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
          if (!reconcile(obj, this.cachedTokens())) return frame;
          return `${frame.slice(0, at)}data: ${JSON.stringify(obj)}`;
        } catch {
          return frame;
        }
      })
      .join('\n\n');
  }
}

/** The most of a non-streamed response body held for its rewrite; past it, the body passes unchanged. */
export const MAX_HELD_JSON_BYTES = 4 * 1024 * 1024;

const HOLD = Buffer.alloc(0);

/** Fixes the usage of a non-streamed (JSON) P/D decode response; see the module comment. */
export class JsonUsageRewriter {
  /** The chunks held so far; undefined once the body passed the cap (or ended). */
  private held: Buffer[] | undefined = [];
  private bytes = 0;

  constructor(
    private readonly cachedTokens: () => number | undefined,
    private readonly maxBytes: number = MAX_HELD_JSON_BYTES,
  ) {}

  /** Returns the bytes to forward instead of `chunk` (empty while held), or undefined to forward it. */
  transform(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
    const held = this.held;
    if (held === undefined) return undefined;
    this.bytes += chunk.length;
    if (!endOfStream && this.bytes <= this.maxBytes) {
      // A copy: the chunk may be a view into a message buffer that is not ours to keep.
      if (chunk.length > 0) held.push(Buffer.from(chunk));
      return HOLD;
    }
    this.held = undefined;
    const whole = held.length === 0 ? chunk : Buffer.concat([...held, chunk]);
    const rewritten = endOfStream ? this.rewrite(whole) : undefined;
    return rewritten ?? (held.length === 0 ? undefined : whole);
  }

  private rewrite(body: Buffer): Buffer | undefined {
    if (body.indexOf(MARKER) === -1 && body.indexOf(RESPONSES_MARKER) === -1) return undefined;
    try {
      const obj = JSON.parse(body.toString('utf8')) as UsageFrame;
      return reconcile(obj, this.cachedTokens()) ? Buffer.from(JSON.stringify(obj)) : undefined;
    } catch {
      return undefined;
    }
  }
}

/**
 * Sets the usage's `cached_tokens` (chat and completions: `usage.prompt_tokens_details`; responses:
 * `usage.input_tokens_details`, or `response.usage...` in a stream's `response.completed`) to the
 * prefill worker's count, or removes it when that worker reported none. Whether a usage was found.
 */
function reconcile(obj: UsageFrame, cached: number | undefined): boolean {
  const details =
    obj.usage?.prompt_tokens_details ??
    obj.usage?.input_tokens_details ??
    obj.response?.usage?.input_tokens_details;
  if (!details) return false;
  if (cached === undefined) delete details.cached_tokens;
  else details.cached_tokens = cached;
  return true;
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
