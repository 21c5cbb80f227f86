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
 * kept as Buffers so a multi-byte character split across chunks is never corrupted. A frame is held
 * only up to MAX_HELD_FRAME_BYTES: a longer one passes on unchanged.
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

/** The reply that holds a chunk back (the client gets nothing for it yet). */
const HOLD = Buffer.alloc(0);

function hasUsage(b: Buffer): boolean {
  return b.indexOf(MARKER) !== -1 || b.indexOf(RESPONSES_MARKER) !== -1;
}

type Details = Record<string, unknown> | null | undefined;
interface UsageFrame {
  usage?: { prompt_tokens_details?: Details; input_tokens_details?: Details };
  response?: { usage?: { input_tokens_details?: Details } };
}

/**
 * The most of one incomplete SSE frame held for its rewrite (vllm-project/router's
 * MAX_SSE_FRAME_BYTES): past it (a worker or upstream sending one huge `data:` line, or one never
 * ended), the frame is passed on unchanged up to its end, so the router never holds it whole.
 */
export const MAX_HELD_FRAME_BYTES = 8 * 1024 * 1024;

export class SseUsageRewriter {
  /**
   * The incomplete trailing frame, in pieces (copies). It never holds a frame end, so a chunk that
   * brings none is appended, not joined with it.
   */
  private held: Buffer[] = [];
  private heldBytes = 0;
  /** Inside a frame passed on past the cap: its bytes go on unchanged until its end. */
  private passing = false;
  /** The last chunk ended with `\n` (a frame end may straddle two chunks). */
  private newlineLast = false;

  constructor(
    private readonly cachedTokens: () => number | undefined,
    private readonly maxFrameBytes: number = MAX_HELD_FRAME_BYTES,
  ) {}

  /**
   * Whether transform(chunk) may rewrite a usage frame (and so read the cached tokens): the chunk, or
   * the incomplete frame held before it, carries a usage marker.
   */
  readsFigure(chunk: Buffer): boolean {
    if (hasUsage(chunk)) return true;
    return this.heldBytes > 0 && hasUsage(Buffer.concat([...this.held, chunk]));
  }

  /** Returns the bytes to forward instead of `chunk`, or undefined to forward it unchanged. */
  transform(chunk: Buffer, endOfStream: boolean): Buffer | undefined {
    const newlineBefore = this.newlineLast;
    if (chunk.length > 0) this.newlineLast = chunk[chunk.length - 1] === 10;
    if (!this.passing) return this.step(chunk, endOfStream, newlineBefore);
    // The passed frame's end: straddling the last chunk and this one, or in this one.
    const straddles = newlineBefore && chunk[0] === 10;
    const at = straddles ? 0 : chunk.indexOf(FRAME_END);
    if (at === -1) return undefined;
    this.passing = false;
    const end = straddles ? 1 : at + 2;
    const rest = this.step(chunk.subarray(end), endOfStream, true);
    return rest === undefined ? undefined : Buffer.concat([chunk.subarray(0, end), rest]);
  }

  private step(chunk: Buffer, endOfStream: boolean, newlineBefore: boolean): Buffer | undefined {
    if (this.heldBytes === 0 && endsWithFrame(chunk) && !hasUsage(chunk)) return undefined;
    const endsFrame =
      chunk.indexOf(FRAME_END) !== -1 || (this.heldBytes > 0 && newlineBefore && chunk[0] === 10);
    if (!endOfStream && !endsFrame) {
      if (this.heldBytes + chunk.length > this.maxFrameBytes) {
        // Past the cap: what was held and this chunk go on unchanged, and so does the rest of the frame.
        this.passing = true;
        return this.release(chunk);
      }
      // A copy: the chunk may be a view into a message buffer that is not ours to keep.
      if (chunk.length > 0) this.held.push(Buffer.from(chunk));
      this.heldBytes += chunk.length;
      return HOLD;
    }
    const data = this.release(chunk) ?? chunk;
    let complete = data;
    let passed: Buffer | undefined;
    if (!endOfStream) {
      const end = data.lastIndexOf(FRAME_END) + 2;
      complete = data.subarray(0, end);
      if (end < data.length) {
        const rest = data.subarray(end);
        if (rest.length > this.maxFrameBytes) {
          this.passing = true;
          passed = rest;
        } else {
          this.held.push(Buffer.from(rest));
          this.heldBytes = rest.length;
        }
      }
    }
    if (hasUsage(complete)) complete = Buffer.from(this.rewriteFrames(complete.toString('utf8')));
    const out = passed ? Buffer.concat([complete, passed]) : complete;
    return out === chunk ? undefined : out;
  }

  /** What is held, with `chunk` after it (undefined: nothing was held); holds nothing after. */
  private release(chunk: Buffer): Buffer | undefined {
    if (this.heldBytes === 0) return undefined;
    const all = Buffer.concat([...this.held, chunk]);
    this.held = [];
    this.heldBytes = 0;
    return all;
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

/** Fixes the usage of a non-streamed (JSON) P/D decode response; see the module comment. */
export class JsonUsageRewriter {
  /** The chunks held so far; undefined once the body passed the cap (or ended). */
  private held: Buffer[] | undefined = [];
  private bytes = 0;

  constructor(
    private readonly cachedTokens: () => number | undefined,
    private readonly maxBytes: number = MAX_HELD_JSON_BYTES,
  ) {}

  /** Whether transform(chunk, endOfStream) rewrites the body (and so reads the cached tokens). */
  readsFigure(endOfStream: boolean): boolean {
    return endOfStream && this.held !== undefined;
  }

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
 *
 * A Responses answer that ran several turns (gpt-oss calling built-in tools: vLLM's HarmonyContext)
 * counts each turn's cached tokens in `cached_tokens_per_turn` and their sum in `cached_tokens`. Only
 * the first turn's prompt came from the prefill worker; the decode worker ran the later turns alone and
 * counted their cache hits honestly. So the first turn gets the prefill worker's count, and the total
 * is the sum again.
 */
function reconcile(obj: UsageFrame, cached: number | undefined): boolean {
  const details =
    obj.usage?.prompt_tokens_details ??
    obj.usage?.input_tokens_details ??
    obj.response?.usage?.input_tokens_details;
  if (!details) return false;
  const turns = details.cached_tokens_per_turn;
  if (cached === undefined) delete details.cached_tokens;
  else if (Array.isArray(turns) && turns.length > 0 && turns.every((n) => typeof n === 'number')) {
    turns[0] = cached;
    details.cached_tokens = (turns as number[]).reduce((sum, n) => sum + n, 0);
  } else details.cached_tokens = cached;
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
