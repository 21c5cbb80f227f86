/**
 * `usage.prompt_tokens` (and `usage.prompt_tokens_details.cached_tokens`) from a response chunk, without
 * parsing the chunk: OpenAI-compatible servers (vLLM, SGLang) send the usage in a non-streamed body and,
 * when the client asks with `stream_options.include_usage`, in a stream's last data event. A key such
 * as `"prompt_tokens"` with unescaped quotes cannot occur inside a JSON string value (the quotes would
 * be escaped), so the last occurrence in the chunk is the usage object's. A chunk boundary that splits the key or its value
 * loses that sample: nothing else.
 */
const KEY = Buffer.from('"prompt_tokens"');
const COLON = 0x3a;
const ZERO = 0x30;
const NINE = 0x39;

function isSpace(b: number): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

const CACHED_KEY = Buffer.from('"cached_tokens"');
const INPUT_KEY = Buffer.from('"input_tokens"');
const COMPLETION_KEY = Buffer.from('"completion_tokens"');
const OUTPUT_KEY = Buffer.from('"output_tokens"');

/** The value of the chunk's last `"prompt_tokens": N`, or undefined when it has none (or it is cut). */
export function promptTokensIn(chunk: Buffer): number | undefined {
  return lastValueOf(chunk, KEY);
}

/** The same for a /v1/responses body or event, whose usage says `"input_tokens": N`. */
export function inputTokensIn(chunk: Buffer): number | undefined {
  return lastValueOf(chunk, INPUT_KEY);
}

/** The chunk's last `"completion_tokens": N` (the tokens a response generated), as `promptTokensIn`. */
export function completionTokensIn(chunk: Buffer): number | undefined {
  return lastValueOf(chunk, COMPLETION_KEY);
}

/** The same for a /v1/responses or /v1/messages body, whose usage says `"output_tokens": N`. */
export function outputTokensIn(chunk: Buffer): number | undefined {
  return lastValueOf(chunk, OUTPUT_KEY);
}

/**
 * The value of the chunk's last `"cached_tokens": N` (`usage.prompt_tokens_details.cached_tokens`:
 * vLLM sends it with `--enable-prompt-tokens-details`), or undefined when it has none, it is null, or
 * it is cut.
 */
export function cachedTokensIn(chunk: Buffer): number | undefined {
  return lastValueOf(chunk, CACHED_KEY);
}

const DETAILS_KEY = Buffer.from('"prompt_tokens_details"');
const NULL = Buffer.from('null');
const CLOSE = 0x7d; // }

/**
 * Whether the chunk's usage object (from its last `"prompt_tokens"`) visibly carries no cached tokens:
 * `"prompt_tokens_details": null`, or the object closes with no `prompt_tokens_details` at all. vLLM
 * (`--enable-prompt-tokens-details`) writes the details only when something was cached
 * (serving_completion.py / serving_chat.py: `if ... and num_cached_tokens`), so for a worker known to
 * send them this reads as 0 cached. False when the object is cut by the chunk's end.
 */
export function usageShowsNoCached(chunk: Buffer): boolean {
  const at = chunk.lastIndexOf(KEY);
  if (at < 0) return false;
  const details = chunk.indexOf(DETAILS_KEY, at);
  if (details >= 0) {
    let i = details + DETAILS_KEY.length;
    while (i < chunk.length && isSpace(chunk[i] as number)) i += 1;
    if (chunk[i] !== COLON) return false;
    i += 1;
    while (i < chunk.length && isSpace(chunk[i] as number)) i += 1;
    return chunk.subarray(i, i + NULL.length).equals(NULL);
  }
  // Without details the usage object holds only numbers: its first '}' closes it.
  return chunk.indexOf(CLOSE, at) >= 0;
}

function lastValueOf(chunk: Buffer, key: Buffer): number | undefined {
  const at = chunk.lastIndexOf(key);
  if (at < 0) return undefined;
  let i = at + key.length;
  while (i < chunk.length && isSpace(chunk[i] as number)) i += 1;
  if (chunk[i] !== COLON) return undefined;
  i += 1;
  while (i < chunk.length && isSpace(chunk[i] as number)) i += 1;
  let n = 0;
  let digits = 0;
  while (i < chunk.length) {
    const b = chunk[i] as number;
    if (b < ZERO || b > NINE) break;
    n = n * 10 + (b - ZERO);
    digits += 1;
    i += 1;
  }
  // A value running to the chunk's end may continue in the next chunk; 16 digits is past any prompt.
  if (digits === 0 || digits > 15 || i === chunk.length) return undefined;
  return n;
}
