import { describe, expect, it } from 'vitest';
import {
  chainedBlockHashes,
  PrefixCache,
  type BlockPool,
  type CacheChanges,
} from '../../../src/sim/prefix-cache.js';

/** `n` distinct 64-character blocks, tagged so different tags never share text. */
function blocks(tag: string, n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += `${tag}-block-${i}-`.padEnd(64, '.');
  return out;
}

describe('chainedBlockHashes', () => {
  it.each([
    { text: '', blockChars: 64, count: 0 },
    { text: 'x'.repeat(63), blockChars: 64, count: 0 },
    { text: 'x'.repeat(64), blockChars: 64, count: 1 },
    { text: 'x'.repeat(200), blockChars: 64, count: 3 },
  ])('$text.length chars -> $count full blocks', ({ text, blockChars, count }) => {
    expect(chainedBlockHashes(text, blockChars)).toHaveLength(count);
  });

  it('hashes the same block text differently behind a different prefix', () => {
    const shared = blocks('shared', 1);
    const a = chainedBlockHashes(blocks('a', 1) + shared, 64);
    const b = chainedBlockHashes(blocks('b', 1) + shared, 64);
    expect(a[1]).not.toBe(b[1]);
    // ...while the same prefix gives the same chain.
    expect(chainedBlockHashes(blocks('a', 1) + shared, 64)).toEqual(a);
  });

  it('produces safe integers', () => {
    for (const h of chainedBlockHashes(blocks('z', 32), 64)) expect(Number.isSafeInteger(h)).toBe(true);
  });
});

describe('PrefixCache', () => {
  it.each([
    { name: 'cold prompt', warm: [], prompt: blocks('p', 4), cached: 0, hitBlocks: 0, total: 4 },
    {
      name: 'identical prompt: the block of its last token is recomputed (vLLM get_computed_blocks)',
      warm: [blocks('p', 4)],
      prompt: blocks('p', 4),
      cached: 48,
      hitBlocks: 3,
      total: 4,
    },
    {
      name: 'identical prompt plus a partial block: every full block hits',
      warm: [blocks('p', 4)],
      prompt: blocks('p', 4) + '.',
      cached: 64,
      hitBlocks: 4,
      total: 4,
    },
    {
      name: 'shared 2-block prefix then new text',
      warm: [blocks('p', 2)],
      prompt: blocks('p', 2) + blocks('q', 3),
      cached: 32,
      hitBlocks: 2,
      total: 5,
    },
    {
      name: 'same block text after a different prefix does not hit',
      warm: [blocks('a', 1) + blocks('s', 2)],
      prompt: blocks('b', 1) + blocks('s', 2),
      cached: 0,
      hitBlocks: 0,
      total: 3,
    },
    {
      name: 'partial trailing block is never cached',
      warm: [blocks('p', 1) + 'tail'],
      prompt: blocks('p', 1) + 'tail',
      cached: 16,
      hitBlocks: 1,
      total: 1,
    },
    { name: 'tiny prompt counts one token', warm: [], prompt: 'hi', cached: 0, hitBlocks: 0, total: 0 },
  ])('$name', ({ warm, prompt, cached, hitBlocks, total }) => {
    const cache = new PrefixCache();
    for (const w of warm) cache.lookupAndInsert(w);
    const r = cache.lookupAndInsert(prompt);
    expect(r).toEqual({
      promptTokens: Math.max(1, Math.ceil(prompt.length / 4)),
      cachedTokens: cached,
      hitBlocks,
      totalBlocks: total,
    });
  });

  it('counts queried and hit tokens', () => {
    const cache = new PrefixCache();
    cache.lookupAndInsert(blocks('p', 4)); // 64 tokens, 0 hit
    cache.lookupAndInsert(blocks('p', 4) + 'abcd'); // 65 tokens, 64 hit
    expect(cache.queriedTokens).toBe(129);
    expect(cache.hitTokens).toBe(64);
  });

  it('evicts least recently used blocks at capacity, prompt tail first', () => {
    const cache = new PrefixCache({ capacityBlocks: 4 });
    cache.lookupAndInsert(blocks('a', 2));
    cache.lookupAndInsert(blocks('b', 2));
    expect(cache.usage()).toBe(1);
    cache.lookupAndInsert(blocks('a', 2)); // touch a: b is now least recently used
    cache.lookupAndInsert(blocks('c', 1)); // evicts b's tail block only
    expect(cache.usedBlocks).toBe(4);
    expect(cache.lookupAndInsert(blocks('a', 2) + '.').hitBlocks).toBe(2);
    // b's head block survived (prefix kept, tail evicted first), its tail did not.
    expect(cache.lookupAndInsert(blocks('b', 2) + '.').hitBlocks).toBe(1);
  });

  it('token mode: a Uint32Array prompt stores and publishes what the same array of numbers does', () => {
    const ids = Array.from({ length: 40 }, (_, i) => 1000 + i);
    const stored = (prompt: ArrayLike<number>) => {
      const changes: CacheChanges = { stored: [], removed: [] };
      const r = new PrefixCache({ capacityBlocks: 64, blockTokens: 16 }).lookupAndInsertTokens(
        prompt,
        undefined,
        changes,
      );
      return { r, stored: changes.stored };
    };
    const typed = stored(new Uint32Array(ids));
    expect(typed).toEqual(stored(ids));
    // Events carry token_ids as msgpack arrays: plain arrays, never typed ones.
    for (const b of typed.stored) expect(Array.isArray(b.tokens)).toBe(true);
    expect(typed.stored).toHaveLength(2);
  });

  it('never holds more than its capacity', () => {
    const cache = new PrefixCache({ capacityBlocks: 8 });
    for (let i = 0; i < 20; i++) cache.lookupAndInsert(blocks(`x${i}`, 3));
    expect(cache.usedBlocks).toBe(8);
    expect(cache.usage()).toBe(1);
  });

  describe('on a shared block pool', () => {
    /** A pool whose running requests hold `held` blocks and `privateBlocks` blocks beyond them. */
    function pool(held: Set<number>, privateBlocks = 0): BlockPool {
      return { isHeld: (h) => held.has(h), privateBlocks: () => privateBlocks };
    }

    it('never evicts a block a running request holds; evicts the unheld ones instead', () => {
      const cache = new PrefixCache({ capacityBlocks: 4 });
      const held = new Set<number>();
      cache.sharePool(pool(held));
      const a = cache.hashText(blocks('a', 2));
      cache.lookupAndInsert(blocks('a', 2));
      cache.lookupAndInsert(blocks('b', 2));
      for (const h of a) held.add(h); // a runs; b is cached and idle
      const removed: number[] = [];
      const changes: CacheChanges = { stored: [], removed };
      // Without a pool the 2 new blocks would evict a (least recently used); here b goes.
      cache.lookupAndInsertTokens(
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
        undefined,
        changes,
      );
      cache.lookupAndInsert(blocks('c', 1));
      expect(cache.lookupAndInsert(blocks('a', 2) + '.').hitBlocks).toBe(2);
      expect(cache.lookupAndInsert(blocks('b', 2) + '.').hitBlocks).toBe(0);
      expect(removed).toHaveLength(1);
    });

    it('leaves cached prefixes only the room running requests do not use', () => {
      const cache = new PrefixCache({ capacityBlocks: 8 });
      let privateBlocks = 0;
      cache.sharePool({ isHeld: () => false, privateBlocks: () => privateBlocks });
      cache.lookupAndInsert(blocks('a', 3));
      cache.lookupAndInsert(blocks('b', 3));
      expect(cache.usedBlocks).toBe(6);
      privateBlocks = 4; // running requests' tails and outputs take 4 of the 8 blocks
      cache.lookupAndInsert(blocks('c', 1));
      expect(cache.usedBlocks).toBe(4);
      expect(cache.lookupAndInsert(blocks('b', 3) + '.').hitBlocks).toBe(3); // b was more recent than a
      expect(cache.lookupAndInsert(blocks('a', 3) + '.').hitBlocks).toBe(0);
    });

    it("keeps a request's own blocks even when held blocks fill the pool", () => {
      const cache = new PrefixCache({ capacityBlocks: 4 });
      const held = new Set(cache.hashText(blocks('a', 4)));
      cache.sharePool(pool(held));
      cache.lookupAndInsert(blocks('a', 4));
      cache.lookupAndInsert(blocks('b', 2)); // nothing is evictable: over capacity until a ends
      expect(cache.usedBlocks).toBe(6);
      held.clear();
      cache.lookupAndInsert(blocks('b', 2));
      expect(cache.usedBlocks).toBe(4);
      expect(cache.lookupAndInsert(blocks('b', 2) + '.').hitBlocks).toBe(2);
    });
  });

  it.each([{ capacityBlocks: 0 }, { blockTokens: 1.5 }, { charsPerToken: -1 }])('rejects %o', (o) => {
    expect(() => new PrefixCache(o)).toThrow(RangeError);
  });
});
