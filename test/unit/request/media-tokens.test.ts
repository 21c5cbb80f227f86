import { describe, expect, it } from 'vitest';
import {
  DEFAULT_MEDIA_TOKENS,
  dataUrlImageSize,
  imageTokens,
  jpegSize,
  mediaTokens,
  mediaTokensFor,
  parseMediaTokenSpec,
} from '../../../src/request/media-tokens.js';
import { jpegDataUrl, pngDataUrl } from '../../support/image-data-url.js';

const Q = DEFAULT_MEDIA_TOKENS;

describe('imageTokens (Qwen2-VL smart_resize, one token per 28 x 28 block)', () => {
  it.each([
    // width, height, tokens: worked by hand from transformers' smart_resize
    [1024, 768, 27 * 37], // 768/28 = 27.4 -> 27 rows, 1024/28 = 36.6 -> 37 columns
    [28, 28, 4], // below min_pixels: scaled up to 56 x 56
    [10, 10, 4],
    [448, 448, 256],
    [10_000, 10_000, 127 * 127], // above max_pixels: scaled down, floor to the grid
    [1, 5_000, 179], // a sliver: at least one block wide (5,000 / 28 -> 179 rows)
  ])('%i x %i -> %i tokens', (w, h, tokens) => {
    expect(imageTokens(w, h, Q)).toBe(tokens);
  });

  it('never exceeds maxTokens nor goes below minTokens', () => {
    for (const [w, h] of [
      [1, 1],
      [100_000, 100_000],
      [65_535, 3],
      [1, 2 ** 31],
      [2 ** 31, 2 ** 31],
      [3_000, 4_000],
    ] as const) {
      const t = imageTokens(w, h, Q);
      expect(t).toBeGreaterThanOrEqual(Q.minTokens);
      expect(t).toBeLessThanOrEqual(Q.maxTokens);
    }
  });

  it('gives a fixed count when minTokens equals maxTokens (LLaVA-1.5: 576)', () => {
    const llava = { ...Q, minTokens: 576, maxTokens: 576 };
    expect(imageTokens(1024, 768, llava)).toBe(576);
    expect(imageTokens(10, 10, llava)).toBe(576);
  });

  it('weighs nothing with maxTokens 0', () => {
    expect(imageTokens(1024, 768, { ...Q, maxTokens: 0 })).toBe(0);
  });
});

describe('dataUrlImageSize', () => {
  it('reads a PNG and a JPEG whose size lies past 60 KB of EXIF', () => {
    expect(dataUrlImageSize(pngDataUrl(1024, 768))).toEqual({ width: 1024, height: 768 });
    expect(dataUrlImageSize(jpegDataUrl(640, 480, 60_000))).toEqual({ width: 640, height: 480 });
  });

  it('gives undefined for URLs, other media, garbage and truncated headers', () => {
    expect(dataUrlImageSize('https://example.com/cat.png')).toBeUndefined();
    expect(dataUrlImageSize('data:audio/wav;base64,UklGRg==')).toBeUndefined();
    expect(dataUrlImageSize('data:image/png;base64,AAAA')).toBeUndefined();
    expect(dataUrlImageSize('data:image/png;base64,%%%not base64%%%')).toBeUndefined();
    expect(dataUrlImageSize('data:image/png,rawbytes')).toBeUndefined();
    expect(dataUrlImageSize(pngDataUrl(64, 64).slice(0, 40))).toBeUndefined();
  });
});

describe('mediaTokens', () => {
  it('says whether the size was read', () => {
    expect(mediaTokens('image_url', pngDataUrl(448, 448), Q)).toEqual({ tokens: 256, sized: true });
    expect(mediaTokens('image_url', 'https://example.com/cat.png', Q)).toEqual({
      tokens: Q.unknownTokens,
      sized: false,
    });
  });

  it('sizes inline images, and gives unknownTokens to what it cannot size', () => {
    expect(mediaTokens('image_url', pngDataUrl(448, 448), Q).tokens).toBe(256);
    expect(mediaTokens('input_image', pngDataUrl(448, 448), Q).tokens).toBe(256);
    expect(mediaTokens('image_url', 'https://example.com/cat.png', Q).tokens).toBe(Q.unknownTokens);
    expect(mediaTokens('input_audio', 'UklGRg==', Q).tokens).toBe(Q.unknownTokens);
    expect(mediaTokens('video_url', undefined, Q).tokens).toBe(Q.unknownTokens);
  });

  it('turns off per knob: images with maxTokens 0, the rest with unknownTokens 0', () => {
    const noImages = { ...Q, maxTokens: 0 };
    expect(mediaTokens('image_url', pngDataUrl(448, 448), noImages).tokens).toBe(0);
    expect(mediaTokens('image_url', 'https://example.com/cat.png', noImages).tokens).toBe(0);
    expect(mediaTokens('input_audio', 'UklGRg==', noImages).tokens).toBe(Q.unknownTokens);
    expect(mediaTokens('input_audio', 'UklGRg==', { ...Q, unknownTokens: 0 }).tokens).toBe(0);
  });
});

describe('per-model weights (--media-tokens MODEL=FIELD:N,...)', () => {
  it('overrides the fields named, the rest from the flags, for that model only', () => {
    const gemma = parseMediaTokenSpec('gemma-3-27b-it=min:256,max:256', Q);
    expect(gemma).toEqual({ model: 'gemma-3-27b-it', options: { ...Q, minTokens: 256, maxTokens: 256 } });
    const forModel = mediaTokensFor(['gemma-3-27b-it=min:256,max:256', 'llava=min:576, max:576'], Q);
    const png = pngDataUrl(1024, 768);
    expect(mediaTokens('image_url', png, forModel('gemma-3-27b-it')).tokens).toBe(256);
    expect(mediaTokens('image_url', png, forModel('llava')).tokens).toBe(576);
    expect(mediaTokens('image_url', png, forModel('Qwen/Qwen2.5-VL-7B-Instruct')).tokens).toBe(999);
    // A fixed count needs no size: an image by URL weighs it too (other media still weigh `unknown`).
    expect(mediaTokens('image_url', 'https://x/y.png', forModel('llava'))).toEqual({
      tokens: 576,
      sized: true,
    });
    expect(mediaTokens('input_audio', 'UklGRg==', forModel('llava')).tokens).toBe(Q.unknownTokens);
    // A model name may hold '=': the last one splits.
    expect(parseMediaTokenSpec('org/m=v2=unknown:0', Q).model).toBe('org/m=v2');
  });

  it.each([
    ['no-equals'],
    ['m='],
    ['=max:5'],
    ['m=max'],
    ['m=max:-1'],
    ['m=max:1.5'],
    ['m=patch:0'],
    ['m=width:28'],
    ['m=toString:5'],
    ['m=__proto__:5'],
    ['m=max:5:6'],
  ])('rejects %s with a message naming the form', (spec) => {
    expect(() => parseMediaTokenSpec(spec, Q)).toThrow(/--media-tokens/);
  });
});

describe('jpegSize (the segment walk)', () => {
  const seg = (marker: number, body: number[]): number[] => [0xff, marker, 0, body.length + 2, ...body];
  const sof = (marker: number, w: number, h: number): number[] =>
    seg(marker, [8, h >> 8, h & 255, w >> 8, w & 255, 3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
  const jpeg = (...parts: number[][]): Uint8Array => new Uint8Array([0xff, 0xd8, ...parts.flat()]);

  it('reads baseline and progressive frames past APPn, DQT and DHT segments and fill bytes', () => {
    expect(jpegSize(jpeg(seg(0xe0, [1, 2, 3]), seg(0xdb, [0, 0]), sof(0xc0, 640, 480)))).toEqual({
      width: 640,
      height: 480,
    });
    expect(jpegSize(jpeg(seg(0xc4, [9, 9]), [0xff], sof(0xc2, 1920, 1080)))).toEqual({
      width: 1920,
      height: 1080,
    });
  });

  it('gives undefined for a byte out of place, a scan or the end before any frame, a bad length', () => {
    expect(jpegSize(new Uint8Array([0xff, 0xd8, ...new Array<number>(96_000).fill(0)]))).toBeUndefined();
    expect(jpegSize(jpeg(seg(0xda, [1, 2, 3]), sof(0xc0, 1, 1)))).toBeUndefined();
    expect(jpegSize(jpeg([0xff, 0xd9]))).toBeUndefined();
    expect(jpegSize(jpeg([0xff, 0xe0, 0, 1, 0, 0, 0, 0, 0]))).toBeUndefined();
    expect(jpegSize(jpeg(seg(0xe1, [0, 0, 0]), [0xff, 0xc0, 0, 17]))).toBeUndefined(); // cut short
  });
});
