import { describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import {
  decodeFrame,
  decodePayload,
  encodeSeq,
  readSeq,
  type KvEventBatch,
} from '../../../src/kv-events/kv-event-decoder.js';

/*
 * Byte-exact payloads as vLLM publishes them: produced with msgspec 0.23 from vLLM's own struct
 * definitions (EventBatch / BlockStored / BlockRemoved / AllBlocksCleared, omit_defaults, tag=True),
 * once with array_like=True (older vLLM, llm-d's decoder) and once as tagged maps (current vLLM).
 * Hashes: 0xfedcba9876543210 and 0x0123456789abcdef (both above 2^53, so bigint), as msgpack uint64 (0xcf).
 */
const hex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s.replace(/\s+/g, ''), 'hex'));
const H1 = 0xfedcba9876543210n;
const H2 = 0x0123456789abcdefn;

// {ts: 1.5, events: [{type: BlockStored, block_hashes: [H1, H2], parent_block_hash: nil,
//  token_ids: [1..8], block_size: 4, lora_id: nil, medium: "GPU", lora_name: nil}], data_parallel_rank: 0}
const TAGGED_STORED = hex(`
  83 a2 7473 cb 3ff8000000000000
     a6 6576656e7473 91
       88 a4 74797065 ab 426c6f636b53746f726564
          ac 626c6f636b5f686173686573 92 cf fedcba9876543210 cf 0123456789abcdef
          b1 706172656e745f626c6f636b5f68617368 c0
          a9 746f6b656e5f696473 98 0102030405060708
          aa 626c6f636b5f73697a65 04
          a7 6c6f72615f6964 c0
          a6 6d656469756d a3 475055
          a9 6c6f72615f6e616d65 c0
     b2 646174615f706172616c6c656c5f72616e6b 00`);
// {ts: 2.0, events: [{type: BlockRemoved, block_hashes: [H2], medium: "GPU"}, {type: AllBlocksCleared}]}
const TAGGED_REMOVED_CLEARED = hex(`
  82 a2 7473 cb 4000000000000000
     a6 6576656e7473 92
       83 a4 74797065 ac 426c6f636b52656d6f766564
          ac 626c6f636b5f686173686573 91 cf 0123456789abcdef
          a6 6d656469756d a3 475055
       81 a4 74797065 b0 416c6c426c6f636b73436c6561726564`);
// [1.5, [["BlockStored", [H1, H2], nil, [1..8], 4, nil, "GPU", nil]], 0]
const ARRAY_STORED = hex(`
  93 cb 3ff8000000000000 91
     98 ab 426c6f636b53746f726564 92 cf fedcba9876543210 cf 0123456789abcdef c0
        98 0102030405060708 04 c0 a3 475055 c0
  00`);
// [2.0, [["BlockRemoved", [H2], "CPU"], ["AllBlocksCleared"]], nil]
const ARRAY_REMOVED_CLEARED = hex(`
  93 cb 4000000000000000 92
     93 ac 426c6f636b52656d6f766564 91 cf 0123456789abcdef a3 435055
     91 b0 416c6c426c6f636b73436c6561726564
  c0`);
// {ts: 3.0, events: [{type: BlockStored, block_hashes: [32 x 0xab], parent_block_hash: 32 x 0x01,
//  token_ids: [9, 10, 11, 12], block_size: 4, lora_id: 1, medium: "CPU", lora_name: "ad1"}]}
const TAGGED_BYTES_CHILD = hex(`
  82 a2 7473 cb 4008000000000000
     a6 6576656e7473 91
       88 a4 74797065 ab 426c6f636b53746f726564
          ac 626c6f636b5f686173686573 91 c4 20 ${'ab'.repeat(32)}
          b1 706172656e745f626c6f636b5f68617368 c4 20 ${'01'.repeat(32)}
          a9 746f6b656e5f696473 94 090a0b0c
          aa 626c6f636b5f73697a65 04
          a7 6c6f72615f6964 01
          a6 6d656469756d a3 435055
          a9 6c6f72615f6e616d65 a3 616431`);
// A hybrid model's sliding-window group: group_idx 1, kv_cache_spec_kind "sliding_window", window 128.
const TAGGED_SLIDING_WINDOW = hex(`
  82 a2 7473 cb 4010000000000000
     a6 6576656e7473 91
       8b a4 74797065 ab 426c6f636b53746f726564
          ac 626c6f636b5f686173686573 91 07
          b1 706172656e745f626c6f636b5f68617368 c0
          a9 746f6b656e5f696473 94 01020304
          aa 626c6f636b5f73697a65 04
          a7 6c6f72615f6964 c0
          a6 6d656469756d a3 475055
          a9 6c6f72615f6e616d65 c0
          a9 67726f75705f696478 01
          b2 6b765f63616368655f737065635f6b696e64 ae 736c6964696e675f77696e646f77
          bc 6b765f63616368655f737065635f736c6964696e675f77696e646f77 cc 80`);

// vLLM's offloading connector copying a block to CPU it has no payload for (offloading/events.py
// `_placeholder_stored`): {ts: 5.0, events: [{type: BlockStored, block_hashes: [H1],
//  parent_block_hash: nil, token_ids: [], block_size: 0, lora_id: nil, medium: "CPU", lora_name: nil}]}
const TAGGED_OFFLOADED = hex(`
  82 a2 7473 cb 4014000000000000
     a6 6576656e7473 91
       88 a4 74797065 ab 426c6f636b53746f726564
          ac 626c6f636b5f686173686573 91 cf fedcba9876543210
          b1 706172656e745f626c6f636b5f68617368 c0
          a9 746f6b656e5f696473 90
          aa 626c6f636b5f73697a65 00
          a7 6c6f72615f6964 c0
          a6 6d656469756d a3 435055
          a9 6c6f72615f6e616d65 c0`);
// [5.0, [["BlockStored", [H1], nil, [], 0, nil, "CPU", nil]], nil]
const ARRAY_OFFLOADED = hex(`
  93 cb 4014000000000000 91
     98 ab 426c6f636b53746f726564 91 cf fedcba9876543210 c0 90 00 c0 a3 435055 c0
  c0`);

const STORED_EVENT = {
  type: 'stored',
  hashes: [H1, H2],
  parent: undefined,
  tokens: [1, 2, 3, 4, 5, 6, 7, 8],
  blockSize: 4,
  medium: 'GPU',
  loraName: undefined,
  extraKeys: undefined,
};

function batch(payload: Uint8Array): KvEventBatch {
  const out = decodePayload(payload);
  if (!('events' in out)) throw new Error(`rejected: ${out.reason}`);
  return out;
}

describe('decodePayload: both encodings vLLM has shipped', () => {
  it.each([
    ['tagged maps', TAGGED_STORED],
    ['array-like', ARRAY_STORED],
  ])('%s: BlockStored with 64-bit int hashes', (_name, bytes) => {
    const b = batch(bytes);
    expect(b.ts).toBe(1.5);
    expect(b.rank).toBe(0);
    expect(b.events).toEqual([STORED_EVENT]);
    expect(b.skipped).toEqual({});
  });

  it.each([
    ['tagged maps', TAGGED_REMOVED_CLEARED, 'GPU', undefined],
    ['array-like', ARRAY_REMOVED_CLEARED, 'CPU', undefined],
  ])('%s: BlockRemoved then AllBlocksCleared', (_name, bytes, medium, rank) => {
    const b = batch(bytes);
    expect(b.ts).toBe(2);
    expect(b.rank).toBe(rank);
    expect(b.events).toEqual([{ type: 'removed', hashes: [H2], medium }, { type: 'cleared' }]);
  });

  it.each([
    ['tagged maps', TAGGED_OFFLOADED],
    ['array-like', ARRAY_OFFLOADED],
  ])("%s: the offloading connector's BlockStored without tokens is a tier copy, not invalid", (_n, bytes) => {
    const b = batch(bytes);
    expect(b.events).toEqual([{ type: 'offloaded', hashes: [H1], medium: 'CPU' }]);
    expect(b.skipped).toEqual({});
  });

  it('digest-bytes hashes, a parent, LoRA name and a CPU medium', () => {
    const [e] = batch(TAGGED_BYTES_CHILD).events;
    expect(e).toEqual({
      type: 'stored',
      hashes: ['\xab'.repeat(32)],
      parent: '\x01'.repeat(32),
      tokens: [9, 10, 11, 12],
      blockSize: 4,
      medium: 'CPU',
      loraName: 'ad1',
      extraKeys: undefined,
    });
  });

  it('sliding-window groups are not prefix cache: skipped and counted', () => {
    const b = batch(TAGGED_SLIDING_WINDOW);
    expect(b.events).toEqual([]);
    expect(b.received).toBe(1);
    expect(b.skipped).toEqual({ not_prefix: 1 });
  });

  it('unknown event types and unknown fields are ignored', () => {
    const b = batch(
      encode({
        ts: 1,
        events: [
          { type: 'BlockPinned', block_hashes: [1] },
          { type: 'AllBlocksCleared', future_field: [1, 2] },
          ['FutureEvent', 1, 2],
        ],
        future_batch_field: 'x',
      }),
    );
    expect(b.events).toEqual([{ type: 'cleared' }]);
    expect(b.skipped).toEqual({ unknown_type: 2 });
  });

  it('extra keys: the LoRA name is dropped (it seeds the key), the rest kept per block', () => {
    const b = batch(
      encode({
        ts: 1,
        events: [
          {
            type: 'BlockStored',
            block_hashes: [1, 2],
            parent_block_hash: null,
            token_ids: [1, 2, 3, 4],
            block_size: 2,
            lora_id: null,
            medium: 'GPU',
            lora_name: 'ad1',
            extra_keys: [['ad1'], ['ad1', 'salt-x']],
          },
        ],
      }),
    );
    expect(b.events[0]).toMatchObject({ extraKeys: ['', '["salt-x"]'] });
  });

  it.each<[string, unknown, string]>([
    ['partial block (tokens != hashes x block_size)', { token_ids: [1, 2, 3] }, 'invalid_event'],
    ['negative token', { token_ids: [1, -2, 3, 4] }, 'invalid_event'],
    ['float hash', { block_hashes: [1.5, 2] }, 'invalid_event'],
    ['string hash', { block_hashes: ['a', 'b'] }, 'invalid_event'],
    ['block_size 0', { block_size: 0 }, 'invalid_event'],
    ['medium not a string', { medium: 7 }, 'invalid_event'],
    ['no hashes', { block_hashes: [], token_ids: [] }, 'invalid_event'],
    ['group_idx 2', { group_idx: 2 }, 'not_prefix'],
  ])('invalid BlockStored (%s) is counted as %s', (_name, patch, reason) => {
    const event = {
      type: 'BlockStored',
      block_hashes: [1, 2],
      parent_block_hash: null,
      token_ids: [1, 2, 3, 4],
      block_size: 2,
      lora_id: null,
      medium: 'GPU',
      lora_name: null,
      ...(patch as object),
    };
    const b = batch(encode({ ts: 1, events: [event, 'garbage', 7] }));
    expect(b.events).toEqual([]);
    expect(b.skipped).toEqual(
      reason === 'invalid_event' ? { invalid_event: 3 } : { [reason]: 1, invalid_event: 2 },
    );
  });
});

describe('decodeFrame', () => {
  const seq7 = hex('0000000000000007');
  const topic = Buffer.from('kv@pod@m');

  it('reads topic, big-endian seq and payload', () => {
    const f = decodeFrame([topic, seq7, TAGGED_STORED]);
    expect(f).toMatchObject({ ok: true, topic: 'kv@pod@m', seq: 7 });
    expect(readSeq(hex('0000000100000000'))).toBe(2 ** 32);
    expect(Buffer.from(encodeSeq(-1)).toString('hex')).toBe('ffffffffffffffff');
  });

  it.each<[string, Uint8Array[], string]>([
    ['two parts', [topic, seq7], 'frame_parts'],
    ['four parts', [topic, seq7, TAGGED_STORED, TAGGED_STORED], 'frame_parts'],
    ['4-byte seq', [topic, hex('00000007'), TAGGED_STORED], 'bad_seq'],
    ['garbage payload', [topic, seq7, hex('c1c1c1')], 'not_msgpack'],
    ['truncated payload', [topic, seq7, TAGGED_STORED.subarray(0, 40)], 'not_msgpack'],
    ['trailing bytes', [topic, seq7, Uint8Array.from([...ARRAY_STORED, 0])], 'not_msgpack'],
    ['a number', [topic, seq7, encode(42)], 'bad_batch'],
    ['events not a list', [topic, seq7, encode({ ts: 1, events: 3 })], 'bad_batch'],
    ['no ts', [topic, seq7, encode([null, []])], 'bad_batch'],
    ['array over the decoder limit', [topic, seq7, hex('dd00200001')], 'not_msgpack'],
  ])('rejects %s as %s', (_name, parts, reason) => {
    expect(decodeFrame(parts)).toMatchObject({ ok: false, reason });
  });

  it('bounds the payload size and the events per batch', () => {
    const big = encode({ ts: 1, events: new Array(11).fill(['AllBlocksCleared']) });
    expect(decodeFrame([topic, seq7, big], { maxPayloadBytes: 20, maxEventsPerBatch: 100 })).toMatchObject({
      ok: false,
      reason: 'oversized',
      seq: 7,
    });
    expect(decodeFrame([topic, seq7, big], { maxPayloadBytes: 1e6, maxEventsPerBatch: 10 })).toMatchObject({
      ok: false,
      reason: 'too_many_events',
    });
  });
});
