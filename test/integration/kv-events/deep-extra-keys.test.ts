/**
 * a BlockStored whose extra_keys nest deeply (a hostile / garbage frame; ~20 KB) makes
 * extraKeyText's JSON.stringify overflow the stack. decodeFrame throws instead of skipping the event,
 * and the subscriber's receive loop (onFrame is outside its try) dies: no later batch is ever applied,
 * and the loop's promise rejects unhandled.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { Encoder } from '@msgpack/msgpack';
import { decodeFrame, encodeSeq } from '../../../src/kv-events/kv-event-decoder.js';
import { KvEventPublisher } from '../../../src/sim/kv-event-publisher.js';
import { KvEventSubscriber } from '../../../src/kv-events/kv-event-subscriber.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { waitFor } from '../../support/wait-for.js';

const DEPTH = 20_000;

/** msgpack of a map-encoded batch with one BlockStored whose extra_keys[0] is DEPTH nested arrays. */
function deepPayload(): Buffer {
  const head = Buffer.from(
    new Encoder().encode({
      ts: 1,
      events: [
        {
          type: 'BlockStored',
          block_hashes: [1],
          parent_block_hash: null,
          token_ids: [1, 2, 3, 4],
          block_size: 4,
          medium: 'GPU',
          extra_keys: ['@@'],
        },
      ],
    }),
  );
  // Replace the placeholder string '@@' (0xa2 0x40 0x40) by DEPTH single-element arrays around 1.
  const at = head.indexOf(Buffer.from([0xa2, 0x40, 0x40]));
  const deep = Buffer.alloc(DEPTH + 1, 0x91);
  deep[DEPTH] = 0x01;
  return Buffer.concat([head.subarray(0, at), deep, head.subarray(at + 3)]);
}

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('deeply nested extra_keys', () => {
  it('decodeFrame skips the event instead of throwing', () => {
    const parts = [Buffer.from(''), encodeSeq(0), deepPayload()];
    let frame: ReturnType<typeof decodeFrame> | undefined;
    expect(() => {
      frame = decodeFrame(parts);
    }).not.toThrow();
    expect(frame).toMatchObject({
      ok: true,
      batch: { received: 1, events: [], skipped: { invalid_event: 1 } },
    });
  });

  it('the subscriber keeps applying batches after such a frame', async () => {
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const index = new KvBlockIndex();
    let received = 0;
    let applied = 0;
    const sub = new KvEventSubscriber({
      worker: 'w',
      indexKey: 'w#0',
      endpoint,
      index,
      hooks: { received: () => void received++, applied: (_w, n) => void (applied += n) },
    });
    // Catch the loop's rejection here so that the failure shows as this test's assertion.
    let loopError: unknown;
    sub.start();
    void (sub as unknown as { loop: Promise<void> }).loop.catch((e: unknown) => {
      loopError = e;
    });
    closers.push(() => sub.close().catch(() => undefined));
    await waitFor(async () => {
      if (received > 0) return true;
      await pub.publish([]);
      return false;
    });
    const seq = pub.nextSeq;
    await pub.sendRaw([Buffer.from(''), encodeSeq(seq), deepPayload()]);
    // Keep the publisher's numbering consistent with the raw frame.
    pub.skip([]);
    await pub.publish([
      { type: 'stored', hashes: [7n], parent: undefined, tokens: [5, 6, 7, 8], blockSize: 4 },
    ]);
    await waitFor(() => applied >= 1 || loopError !== undefined, { message: 'batch after the deep frame' });
    expect(loopError).toBeUndefined();
    expect(index.cachedTokens(promptKeys([5, 6, 7, 8], 4, keySeed(undefined)), 4, ['w#0'])[0]).toBe(4);
  });
});
