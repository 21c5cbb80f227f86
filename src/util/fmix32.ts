/**
 * Murmur3's 32-bit finalizer: avalanches a combined 32-bit hash so every input bit affects every output
 * bit (used to finish the router's own hashes: block keys, rendezvous weights). Pure.
 */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
