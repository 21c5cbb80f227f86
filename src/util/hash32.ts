import { fmix32 } from './fmix32.js';

/** 32-bit FNV-1a over UTF-16 code units, then the murmur3 finalizer for avalanche. Unsigned. Pure. */
export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h);
}
