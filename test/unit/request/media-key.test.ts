/** The key of a multimodal part's media in the routing text (request/media-key.ts). */
import { describe, expect, it } from 'vitest';
import { mediaKey, mediaStringKey } from '../../../src/request/media-key.js';
import { PieceText } from '../../../src/util/piece-text.js';

/** A base64-looking payload of `n` characters from a seed (different seeds differ everywhere). */
function payload(n: number, seed: number): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  let x = seed >>> 0 || 1;
  let out = '';
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out += alphabet[(x >>> 0) % 64];
  }
  return out;
}

describe('mediaStringKey', () => {
  it('tells images apart, big or small, and gives the same image the same key', () => {
    const head = 'data:image/jpeg;base64,/9j/4AAQSkZJRgABAQ';
    const big = (seed: number) => head + payload(300_000, seed);
    expect(mediaStringKey(big(1))).toBe(mediaStringKey(big(1)));
    expect(mediaStringKey(big(1))).not.toBe(mediaStringKey(big(2)));
    expect(mediaStringKey('https://x/1.png')).not.toBe(mediaStringKey('https://x/2.png'));
    // Same edges, one changed byte in the middle of a small payload: hashed whole, so it differs.
    const small = payload(6000, 3);
    expect(mediaStringKey(small)).not.toBe(mediaStringKey(`${small.slice(0, 3000)}#${small.slice(3001)}`));
  });

  it('reads a long payload kept in pieces as the same string', () => {
    const s = payload(50_000, 4);
    expect(mediaStringKey(new PieceText([s.slice(0, 20_000), s.slice(20_000)]))).toBe(mediaStringKey(s));
  });
});

describe('mediaKey', () => {
  it.each([
    ['chat image', { type: 'image_url', image_url: { url: 'u' } }, 'image_url', mediaStringKey('u')],
    ['chat image as a string', { type: 'image_url', image_url: 'u' }, 'image_url', mediaStringKey('u')],
    [
      'audio data',
      { type: 'input_audio', input_audio: { data: 'd', format: 'wav' } },
      'input_audio',
      mediaStringKey('d'),
    ],
    ['video', { type: 'video_url', video_url: { url: 'v' } }, 'video_url', mediaStringKey('v')],
    ['Responses image', { type: 'input_image', image_url: 'u' }, 'input_image', mediaStringKey('u')],
    ['Responses file', { type: 'input_file', file_id: 'file-1' }, 'input_file', mediaStringKey('file-1')],
    ['uuid first', { type: 'image_url', image_url: { url: 'u' }, uuid: 'cat-1' }, 'image_url', 'id:cat-1'],
    ['nothing readable', { type: 'image_url', image_url: { detail: 'low' } }, 'image_url', undefined],
  ])('%s', (_name, part, type, want) => {
    expect(mediaKey(part, type)).toBe(want);
  });
});
