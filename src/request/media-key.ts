/**
 * A short key for what a multimodal content part carries (an image, audio, a video, a file), for the
 * routing text (prompt-text.ts).
 *
 * vLLM hashes a prompt's media into its prefix-cache block keys: two requests whose text is the same
 * but whose images differ share no block past the image, and the same image sent again (a vision
 * chat's next turn) is a hit. A routing text that wrote only the part's type would see a shared
 * prefix in the first case and predict hits that never come (every "describe this image" request
 * piling onto one worker); with the key, the text diverges where the prompt does.
 *
 * The key: the part's `uuid` when it has one (vLLM's user-given media id, which vLLM then uses as the
 * media's hash), else a hash of the media string: the part's payload under its own type (`image_url:
 * {url}`, `input_audio: {data}`, `video_url: {url}`, ...), or the Responses API's `image_url` string,
 * `file_data`, `file_id`. A string up to 8 KiB is hashed whole (64 bits); a longer one (a base64 data
 * URL of megabytes) by its length, its first and last 2 KiB and 64 strided samples of 32 characters:
 * a bounded cost, and two different images' base64 differ in nearly every sample. A part without any
 * of these gets no key (its type alone, as before).
 *
 * Pure.
 */
import { hash32 } from '../util/hash32.js';
import { PieceText } from '../util/piece-text.js';

const WHOLE_CHARS = 8 * 1024;
const EDGE_CHARS = 2 * 1024;
const SAMPLES = 64;
const SAMPLE_CHARS = 32;

type Text = string | PieceText;

function isText(v: unknown): v is Text {
  return typeof v === 'string' || v instanceof PieceText;
}

/** The media string of a content part of type `type`, or undefined. */
export function mediaPayload(part: Readonly<Record<string, unknown>>, type: string): Text | undefined {
  const own = part[type];
  if (isText(own)) return own;
  for (const holder of [own, part.image_url, part]) {
    if (isText(holder)) return holder;
    if (typeof holder !== 'object' || holder === null) continue;
    const h = holder as Record<string, unknown>;
    for (const field of ['url', 'data', 'file_data', 'file_id']) {
      const v = h[field];
      if (isText(v) && v.length > 0) return v;
    }
  }
  return undefined;
}

/** 64 bits of hash of `s` as base 36 (two independent 32-bit hashes). */
function hash64(s: string): string {
  return `${hash32(s).toString(36)}.${hash32(`\u0001${s}`).toString(36)}`;
}

/** The key of a media string (see the header). */
export function mediaStringKey(s: Text): string {
  const n = s.length;
  if (n <= WHOLE_CHARS) return hash64(typeof s === 'string' ? s : s.toString());
  let sample = `${n}\u0000${s.slice(0, EDGE_CHARS)}\u0000${s.slice(n - EDGE_CHARS, n)}`;
  const stride = Math.floor((n - SAMPLE_CHARS) / SAMPLES);
  for (let i = 0; i < SAMPLES; i++) sample += s.slice(i * stride, i * stride + SAMPLE_CHARS);
  return hash64(sample);
}

/**
 * The key of a content part's media (`uuid` first), or undefined when it carries none readable.
 * `payload`: the part's mediaPayload, when the caller has it already.
 */
export function mediaKey(
  part: Readonly<Record<string, unknown>>,
  type: string,
  payload: Text | undefined = mediaPayload(part, type),
): string | undefined {
  const uuid = part.uuid;
  if (typeof uuid === 'string' && uuid.length > 0) return `id:${uuid.length <= 128 ? uuid : hash64(uuid)}`;
  return payload === undefined ? undefined : mediaStringKey(payload);
}
