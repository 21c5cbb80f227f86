/**
 * How many prompt tokens a multimodal content part costs, for the routing text (prompt-text.ts).
 *
 * vLLM replaces an image with the placeholder tokens its vision encoder fills: a Qwen2-VL-family
 * model (Qwen2-VL, Qwen2.5-VL, the default choice for vision on vLLM) resizes the image to multiples
 * of 28 pixels within [min_pixels, max_pixels] (transformers' `smart_resize`) and spends one token per
 * 28 x 28 block: a 1024 x 768 photo is ~1,000 tokens, a screenshot several thousand, while the chat
 * text around it is often a few dozen. Those tokens are prefilled, cached in KV blocks keyed by the
 * image (media-key.ts), and saved when the same image comes back. A router that counted the image as
 * the few characters of its key would price a vision chat's cache at almost nothing and move its
 * turns to whichever worker is least busy, recomputing the image every turn.
 *
 * The estimate:
 *  - an image sent inline (a base64 `data:` URL) whose header states its size (a JPEG's frame
 *    header, jpegSize; PNG, GIF, WebP, BMP, ... through the `image-size` library): `smart_resize` of
 *    its width and height with `patchPixels` (28), `minTokens` (4) and `maxTokens` (16,384:
 *    Qwen2-VL's defaults), clamped to [minTokens, maxTokens]; `minTokens === maxTokens` gives a model
 *    with a fixed count per image (LLaVA-1.5: 576), which an image by URL weighs too;
 *  - any other media with a key (an image by URL, audio, video, a file): `unknownTokens` (1,024);
 *  - a part without a key (nothing the router can tell apart): 0, as it cannot be told cached.
 * All 0 turns the weighting off. Pure.
 */
import { imageSize } from 'image-size';
import type { PieceText } from '../util/piece-text.js';

export interface MediaTokenOptions {
  /** Image pixels per token side (Qwen2-VL: 14-pixel patches merged 2 x 2 = 28). */
  readonly patchPixels: number;
  /** Fewest tokens an image is resized to (Qwen2-VL's min_pixels / 28^2 = 4). */
  readonly minTokens: number;
  /** Most tokens an image is resized to (Qwen2-VL's max_pixels / 28^2 = 16,384); 0 = images weigh 0. */
  readonly maxTokens: number;
  /** Tokens of media whose size the router cannot read (by URL, audio, video, files); 0 = none. */
  readonly unknownTokens: number;
  /**
   * Routing-text characters per media token: the characters per token the router converts the
   * model's text with (load/chars-per-token.ts), so an image weighs its tokens in the same unit as
   * the words around it. Default 4, the cost model's default.
   */
  readonly charsPerToken?: number;
}

export const DEFAULT_MEDIA_TOKENS: Readonly<MediaTokenOptions> = Object.freeze({
  patchPixels: 28,
  minTokens: 4,
  maxTokens: 16_384,
  unknownTokens: 1_024,
});

/** The media weights of a request's model (`--media-tokens MODEL=...`, else the global flags). */
export type MediaTokensFor = (model: string) => Readonly<MediaTokenOptions>;

const SPEC_FIELDS: ReadonlyMap<string, keyof MediaTokenOptions> = new Map([
  ['patch', 'patchPixels'],
  ['min', 'minTokens'],
  ['max', 'maxTokens'],
  ['unknown', 'unknownTokens'],
]);

/**
 * One model's weights: `MODEL=FIELD:N[,FIELD:N...]` with FIELD one of `patch`, `min`, `max`,
 * `unknown` (integers; `patch` at least 1), the others from `base`. E.g. `gemma-3-27b-it=min:256,max:256`
 * (a fixed 256 per image). Throws a RangeError naming what is wrong.
 */
export function parseMediaTokenSpec(
  spec: string,
  base: Readonly<MediaTokenOptions>,
): { model: string; options: Readonly<MediaTokenOptions> } {
  const eq = spec.lastIndexOf('=');
  const model = eq > 0 ? spec.slice(0, eq).trim() : '';
  const fields = eq > 0 ? spec.slice(eq + 1).trim() : '';
  if (model === '' || fields === '') {
    throw new RangeError(`--media-tokens must be MODEL=FIELD:N[,FIELD:N...], got ${JSON.stringify(spec)}`);
  }
  const options: { -readonly [K in keyof MediaTokenOptions]: MediaTokenOptions[K] } = { ...base };
  for (const item of fields.split(',')) {
    const parts = item.split(':').map((x) => x.trim());
    const [name = '', value = ''] = parts;
    const key = SPEC_FIELDS.get(name);
    const n = Number(value);
    if (
      key === undefined ||
      parts.length !== 2 ||
      value === '' ||
      !Number.isSafeInteger(n) ||
      n < (key === 'patchPixels' ? 1 : 0)
    ) {
      throw new RangeError(
        `--media-tokens ${model}: "${item}" is not one of patch:N (>= 1), min:N, max:N, unknown:N (integers >= 0)`,
      );
    }
    options[key] = n;
  }
  return { model, options: Object.freeze(options) };
}

/** The weights per model from `specs` (parseMediaTokenSpec), `base` for every other model. */
export function mediaTokensFor(specs: readonly string[], base: Readonly<MediaTokenOptions>): MediaTokensFor {
  const byModel = new Map<string, Readonly<MediaTokenOptions>>();
  for (const spec of specs) {
    const { model, options } = parseMediaTokenSpec(spec, base);
    byModel.set(model, options);
  }
  return byModel.size === 0 ? () => base : (model) => byModel.get(model) ?? base;
}

/** Base64 characters decoded to read an image's header: 3 KB (PNG, GIF, WebP, BMP, ...). */
const HEAD_BASE64_CHARS = 4 * 1024;
/** A JPEG's frame header may follow up to 64 KB of EXIF: 96 KB are decoded for a JPEG. */
const JPEG_BASE64_CHARS = 128 * 1024;

/**
 * Tokens of an image of `width` x `height` pixels (transformers' Qwen2-VL `smart_resize`, whose
 * result has one token per `patchPixels`^2 block).
 */
export function imageTokens(width: number, height: number, o: Readonly<MediaTokenOptions>): number {
  if (o.maxTokens <= 0) return 0;
  if (o.minTokens >= o.maxTokens) return o.maxTokens;
  if (!(width > 0 && height > 0)) return o.unknownTokens;
  const f = o.patchPixels;
  const minPixels = o.minTokens * f * f;
  const maxPixels = o.maxTokens * f * f;
  let h = Math.max(f, Math.round(height / f) * f);
  let w = Math.max(f, Math.round(width / f) * f);
  if (h * w > maxPixels) {
    const beta = Math.sqrt((height * width) / maxPixels);
    h = Math.max(f, Math.floor(height / beta / f) * f);
    w = Math.max(f, Math.floor(width / beta / f) * f);
  } else if (h * w < minPixels) {
    const beta = Math.sqrt(minPixels / (height * width));
    h = Math.ceil((height * beta) / f) * f;
    w = Math.ceil((width * beta) / f) * f;
  }
  // A sliver (1 x 10^9) keeps one block across and so can exceed the budget (Qwen2-VL refuses an
  // aspect ratio over 200): the weight stays within [minTokens, maxTokens].
  return Math.min(o.maxTokens, Math.max(o.minTokens, (h / f) * (w / f)));
}

/**
 * Width and height from the header of a base64 `data:image/...` URL, or undefined. A JPEG (it opens
 * with FF D8) is read by jpegSize over its first 96 KB; anything else by the `image-size` library
 * over its first 3 KB, where every other format states its size.
 */
export function dataUrlImageSize(url: string | PieceText): { width: number; height: number } | undefined {
  const comma = url.slice(0, 256).indexOf(',');
  if (comma === -1) return undefined;
  if (!/^data:image\/[^;,]*(;[^,]*)?;base64$/i.test(url.slice(0, comma))) return undefined;
  const data = url.length - comma - 1;
  const decode = (chars: number): Buffer => {
    const n = Math.min(data, chars);
    return Buffer.from(url.slice(comma + 1, comma + 1 + n - (n % 4)), 'base64');
  };
  const head = decode(HEAD_BASE64_CHARS);
  if (head[0] === 0xff && head[1] === 0xd8)
    return jpegSize(data <= HEAD_BASE64_CHARS ? head : decode(JPEG_BASE64_CHARS));
  try {
    const s = imageSize(head);
    return s.width > 0 && s.height > 0 ? { width: s.width, height: s.height } : undefined;
  } catch {
    return undefined; // not an image the library knows
  }
}

/**
 * A JPEG's size from its first frame header (SOF0-SOF15 but DHT, JPG and DAC), walking the segments
 * from the SOI: each must open with FF and a marker, and its length leads to the next. A byte out of
 * place, a scan before any frame, or the end of `b` gives undefined. Hand-written because the library
 * steps through a malformed JPEG byte by byte (22 ms for 96 KB of zeros after an SOI): this walk costs
 * one step per segment, whatever the bytes.
 */
export function jpegSize(b: Uint8Array): { width: number; height: number } | undefined {
  let i = 2;
  while (i + 9 <= b.length) {
    if (b[i] !== 0xff) return undefined;
    const marker = b[i + 1] as number;
    if (marker === 0xff) {
      i += 1; // a fill byte before the marker
      continue;
    }
    if (marker === 0xd9 || marker === 0xda) return undefined; // end, or a scan, before any frame
    const length = ((b[i + 2] as number) << 8) | (b[i + 3] as number);
    if (length < 2) return undefined;
    const frame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc;
    if (frame) {
      const height = ((b[i + 5] as number) << 8) | (b[i + 6] as number);
      const width = ((b[i + 7] as number) << 8) | (b[i + 8] as number);
      return width > 0 && height > 0 ? { width, height } : undefined;
    }
    i += 2 + length;
  }
  return undefined;
}

/**
 * A request's media parts (`vllm_router_media_parts_total`): `sized` from their header, `unsized`
 * weighed `unknownTokens`, `unkeyed` with nothing to key (weighing 0); `tokens` counted in all.
 */
export interface MediaTally {
  sized: number;
  unsized: number;
  unkeyed: number;
  tokens: number;
}

/** A keyed media part's tokens, and whether its size was read (else it weighs `unknownTokens`). */
export interface MediaWeight {
  readonly tokens: number;
  readonly sized: boolean;
}

/** Tokens of a keyed media part of `type` whose payload is `payload` (media-key.ts reads it). */
export function mediaTokens(
  type: string,
  payload: string | PieceText | undefined,
  o: Readonly<MediaTokenOptions>,
): MediaWeight {
  const isImage = type === 'image_url' || type === 'input_image' || type === 'image';
  // A fixed count per image (min = max) needs no size: an image by URL weighs it too.
  if (isImage && o.maxTokens > 0 && o.minTokens >= o.maxTokens) return { tokens: o.maxTokens, sized: true };
  if (isImage && payload !== undefined) {
    const size = dataUrlImageSize(payload);
    if (size !== undefined) return { tokens: imageTokens(size.width, size.height, o), sized: true };
  }
  if (isImage && o.maxTokens <= 0) return { tokens: 0, sized: false };
  return { tokens: o.unknownTokens, sized: false };
}
