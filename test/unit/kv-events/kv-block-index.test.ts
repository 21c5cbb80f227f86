import { describe, expect, it } from 'vitest';
import { chainKeys, keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import type { BlockStoredEvent, KvEvent } from '../../../src/kv-events/kv-event-decoder.js';

const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

function stored(
  hashes: number[],
  toks: number[],
  parent?: number,
  extra: Partial<BlockStoredEvent> = {},
): BlockStoredEvent {
  return {
    type: 'stored',
    hashes,
    parent,
    tokens: toks,
    blockSize: BS,
    medium: 'GPU',
    loraName: undefined,
    extraKeys: undefined,
    ...extra,
  };
}
const removed = (hashes: number[], medium = 'GPU'): KvEvent => ({ type: 'removed', hashes, medium });

describe('block keys', () => {
  it('are chained: the same block behind another prefix gets another key', () => {
    const a = promptKeys([1, 2, 3, 4, 5, 6, 7, 8], BS, keySeed(undefined));
    const b = promptKeys([9, 9, 9, 9, 5, 6, 7, 8], BS, keySeed(undefined));
    expect(a).toHaveLength(2);
    expect(a[1]).not.toBe(b[1]);
    expect(Number.isSafeInteger(a[0])).toBe(true);
  });

  it('continuing from a parent key equals hashing the whole prompt', () => {
    const seed = keySeed(undefined);
    const whole = promptKeys(tokens(12), BS, seed);
    const head = chainKeys(tokens(4), BS, seed);
    const tail = chainKeys(tokens(8, 5), BS, head[0] as number);
    expect([...head, ...tail]).toEqual(whole);
  });

  it('are seeded per LoRA adapter, and extra keys change a block', () => {
    const t = tokens(8);
    expect(promptKeys(t, BS, keySeed('ad1'))).not.toEqual(promptKeys(t, BS, keySeed(undefined)));
    expect(keySeed('')).toBe(keySeed(undefined));
    const seed = keySeed(undefined);
    expect(chainKeys(t, BS, seed, 2, ['', 'salt'])[0]).toBe(promptKeys(t, BS, seed)[0]);
    expect(chainKeys(t, BS, seed, 2, ['', 'salt'])[1]).not.toBe(promptKeys(t, BS, seed)[1]);
  });

  it('distinguishes token ids that differ only in high bits', () => {
    const seed = keySeed(undefined);
    expect(promptKeys([1, 2, 3, 4], BS, seed)).not.toEqual(promptKeys([1 + 65536, 2, 3, 4], BS, seed));
  });
});

describe('KvBlockIndex', () => {
  const seed = keySeed(undefined);
  const prompt = tokens(16); // 4 blocks
  const keys = promptKeys(prompt, BS, seed);

  it('longest run of consecutive blocks from the start, per worker', () => {
    const index = new KvBlockIndex();
    index.apply('a', [stored([101, 102, 103], tokens(12))]);
    index.apply('b', [stored([201], tokens(4))]);
    // c holds blocks 1..3 chained from a block 0 it later lost: no prefix.
    index.apply('c', [stored([301, 302], tokens(8))]);
    index.apply('c', [removed([301])]);
    expect(index.cachedTokens(keys, BS, ['a', 'b', 'c', 'none'])).toEqual([12, 4, 0, undefined]);
  });

  it('events split over batches chain through the parent hash', () => {
    const index = new KvBlockIndex();
    index.apply('a', [stored([1], tokens(4))]);
    index.apply('a', [stored([2, 3], tokens(8, 5), 1)]);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([12]);
  });

  it('an unknown parent drops the event (keys cannot be computed)', () => {
    const index = new KvBlockIndex();
    const r = index.apply('a', [stored([2, 3], tokens(8, 5), 999)]);
    expect(r.dropped).toEqual({ unknown_parent: 1 });
    expect(index.hasWorker('a')).toBe(false);
  });

  it('a worker extending a chain the index never saw is incomplete until that chain is evicted or cleared', () => {
    const index = new KvBlockIndex();
    // Its first event already extends an unknown block (a router started on a running worker).
    index.apply('a', [stored([2, 3], tokens(8, 5), 1)]);
    expect(index.incomplete('a')).toBe(true);
    index.apply('a', [stored([4], tokens(4, 13), 3)]); // and its child: still unknown
    index.apply('a', [removed([4, 3, 2])]);
    expect(index.incomplete('a')).toBe(true); // block 1 is still held
    index.apply('a', [removed([1])]);
    expect(index.incomplete('a')).toBe(false);
    // Stored again from the start, the chain is known; a clear ends any unknown one.
    index.apply('a', [stored([1, 2], tokens(8))]);
    expect(index.incomplete('a')).toBe(false);
    index.apply('a', [stored([9], tokens(4, 50), 8)]);
    expect(index.incomplete('a')).toBe(true);
    index.apply('a', [{ type: 'cleared' }]);
    expect(index.incomplete('a')).toBe(false);
    // This index's own bound forgets a block the worker still holds: its extension shows it.
    const small = new KvBlockIndex({ maxBlocksPerWorker: 2 });
    small.apply('a', [stored([1, 2, 3], tokens(12))]);
    small.apply('a', [stored([4], tokens(4, 13), 1)]);
    expect(small.incomplete('a')).toBe(true);
  });

  it('BlockRemoved resolves engine hashes, per medium; CPU-only blocks earn the tier credit', () => {
    const index = new KvBlockIndex({ tierCredit: { GPU: 1, CPU: 0.5 } });
    index.apply('a', [stored([1, 2], tokens(8)), stored([1, 2], tokens(8), undefined, { medium: 'CPU' })]);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([8]);
    index.apply('a', [removed([2])]); // block 1 now on CPU only
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([4 + 2]);
    index.apply('a', [removed([2], 'CPU')]);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([4]);
    expect(index.size('a')).toBe(1);
    const r = index.apply('a', [removed([2, 77])]);
    expect(r.unknownBlocks).toBe(2);
  });

  it("the offloading connector's tier copies keep evicted blocks held at the tier's credit", () => {
    const index = new KvBlockIndex({ tierCredit: { GPU: 1, CPU: 0.5 } });
    const offloaded = (hashes: number[]): KvEvent => ({ type: 'offloaded', hashes, medium: 'CPU' });
    index.apply('a', [stored([1, 2, 3], tokens(12))]);
    const r = index.apply('a', [offloaded([1, 2, 99])]); // 99: never announced
    expect(r).toMatchObject({ applied: 1, unknownBlocks: 1 });
    index.apply('a', [removed([1, 2, 3])]); // the GPU evicts all three
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([(4 + 4) * 0.5]);
    index.apply('a', [removed([1, 2], 'CPU')]);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([0]);
    expect(index.size('a')).toBe(0);
  });

  it('AllBlocksCleared and clearWorker empty one worker only', () => {
    const index = new KvBlockIndex();
    index.apply('a', [stored([1], tokens(4))]);
    index.apply('b', [stored([1], tokens(4))]);
    index.apply('a', [{ type: 'cleared' }]);
    expect(index.cachedTokens(keys, BS, ['a', 'b'])).toEqual([0, 4]);
    index.clearWorker('b');
    expect(index.sizes()).toEqual(
      new Map([
        ['a', 0],
        ['b', 0],
      ]),
    );
  });

  it('LoRA adapters: seeded keys, and isAdapter learns the names from events', () => {
    const index = new KvBlockIndex();
    index.apply('a', [stored([1, 2], tokens(8), undefined, { loraName: 'ad1' })]);
    expect(index.isAdapter('ad1')).toBe(true);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([0]);
    expect(index.cachedTokens(promptKeys(prompt, BS, keySeed('ad1')), BS, ['a'])).toEqual([8]);
  });

  it('bounded per worker: the least recently stored blocks go first', () => {
    const index = new KvBlockIndex({ maxBlocksPerWorker: 2 });
    index.apply('a', [stored([1, 2], tokens(8))]);
    const r = index.apply('a', [stored([3], tokens(4, 9), 2)]);
    expect(r.evicted).toBe(1);
    expect(index.size('a')).toBe(2);
    expect(index.cachedTokens(keys, BS, ['a'])).toEqual([0]); // block 0 forgotten
    // The forgotten block's engine hash no longer resolves.
    expect(index.apply('a', [removed([1])]).unknownBlocks).toBe(1);
  });

  it('block size: learned per worker; lookups at another size are undefined', () => {
    const index = new KvBlockIndex();
    index.apply('a', [stored([1], tokens(4))]);
    index.apply('b', [{ ...stored([1], tokens(8)), blockSize: 8 }]);
    expect(index.blockSizes().sort()).toEqual([4, 8]);
    expect(index.cachedTokens(keys, BS, ['a', 'b'])).toEqual([4, undefined]);
    expect(index.apply('a', [{ ...stored([5], tokens(8)), blockSize: 8 }]).dropped).toEqual({
      block_size_mismatch: 1,
    });
    index.dropWorker('b');
    expect(index.blockSizes()).toEqual([4]);
  });

  it('rejects invalid options', () => {
    expect(() => new KvBlockIndex({ maxBlocksPerWorker: 0 })).toThrow(RangeError);
    expect(() => new KvBlockIndex({ tierCredit: { CPU: 2 } })).toThrow(RangeError);
  });
});
