/**
 * The router's own chained KV block keys, computed from token ids.
 *
 * Why not vLLM's block hash: its default is SHA-256 over a Python pickle with a NONE_HASH that is
 * random per process unless PYTHONHASHSEED is set, so the router cannot reproduce it. Instead both
 * sides hash the same token ids the same way: the event side from each BlockStored's `token_ids`, the
 * request side from the tokenized prompt; an engine-hash -> own-key map resolves BlockRemoved (see
 * kv-block-index.ts). This is llm-d's approach.
 *
 * Key of block k = H(key of block k-1 (or the seed for block 0), tokens of block k, extra of block k).
 * H runs two 32-bit multiplicative lanes (FNV-1a prime and the Murmur2 multiplier) over each token id
 * as a 32-bit word, each lane finished with Murmur3's fmix32, folded into a 53-bit integer (a Map key
 * without allocation). Identical blocks behind different prefixes get different keys (chaining).
 * Collision odds ~2^-53 per pair of distinct blocks: with 10^7 blocks indexed, ~10^-2 expected
 * false matches in total, and a false match only misroutes one request.
 *
 * Seed: per LoRA adapter (events carry `lora_name`; base model = ''), since vLLM puts the LoRA name in
 * the block hash's extra keys: the same tokens under another adapter are different KV. Per-block extra
 * keys other than the LoRA name (multimodal ids, cache salt) are folded in as text; a plain text
 * request has none, so such blocks never match it, which is what vLLM does too; a request's
 * `cache_salt` is folded into its block 0 the same way (promptKeys).
 *
 * Pure functions.
 */

import { fmix32 } from '../util/fmix32.js';

const P1 = 0x01000193;
const P2 = 0x5bd1e995;

function fold(h1: number, h2: number): number {
  return fmix32(h1) * 2097152 + (fmix32(h2) >>> 11);
}

function mixText(h1: number, h2: number, text: string): [number, number] {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, P1);
    h2 = Math.imul(h2 ^ c, P2);
  }
  return [h1, h2];
}

const seedCache = new Map<string, number>();

/** The chain seed for a LoRA adapter ('' = the base model). */
export function keySeed(loraName: string | undefined): number {
  const name = loraName ?? '';
  let seed = seedCache.get(name);
  if (seed === undefined) {
    const [h1, h2] = mixText(0x9e3779b9 | 0, 0x7f4a7c15 | 0, `lora:${name}`);
    seed = fold(h1, h2);
    if (seedCache.size < 4096) seedCache.set(name, seed);
  }
  return seed;
}

/**
 * Chained keys of the `blocks` full blocks of `tokens` starting at `from` (block-aligned), chained
 * from `parent`. `extra[k]` (optional, '' = none) is folded into block k.
 */
export function chainKeys(
  tokens: ArrayLike<number>,
  blockSize: number,
  parent: number,
  blocks = Math.floor(tokens.length / blockSize),
  extra?: readonly string[],
  from = 0,
): number[] {
  const out = new Array<number>(blocks);
  let prev = parent;
  let t = from;
  for (let b = 0; b < blocks; b++) {
    const hi = Math.floor(prev / 2097152);
    let h1 = (hi ^ 0x811c9dc5) | 0;
    let h2 = ((prev - hi * 2097152) ^ 0x2b2ae35d) | 0;
    const end = t + blockSize;
    for (; t < end; t++) {
      const v = tokens[t] as number;
      h1 = Math.imul(h1 ^ (v & 0xffff), P1);
      h1 = Math.imul(h1 ^ (v >>> 16), P1);
      h2 = Math.imul(h2 ^ v, P2);
      h2 ^= h2 >>> 15;
    }
    const x = extra?.[b];
    if (x !== undefined && x.length > 0) [h1, h2] = mixText(h1 ^ 0x5f, h2 ^ 0x5f, x);
    prev = fold(h1, h2);
    out[b] = prev;
  }
  return out;
}

/**
 * Keys of every full block of a prompt's tokens (block 0 chained from the seed). `cacheSalt` (the
 * request's `cache_salt`) is folded into block 0 exactly as the event side folds vLLM's extra keys
 * for that block (`["<salt>"]`, kv-event-decoder.ts), so a salted request matches only blocks stored
 * under the same salt, as in vLLM.
 */
export function promptKeys(
  tokens: ArrayLike<number>,
  blockSize: number,
  seed: number,
  cacheSalt?: string,
): number[] {
  if (cacheSalt === undefined || cacheSalt.length === 0) return chainKeys(tokens, blockSize, seed);
  return chainKeys(tokens, blockSize, seed, undefined, [JSON.stringify([cacheSalt])]);
}
