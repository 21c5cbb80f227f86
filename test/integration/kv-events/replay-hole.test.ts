/**
 * a replayed batch the decoder rejects (here: more events than maxEventsPerBatch) is skipped
 * by fetchReplay (`continue`) and the batches after it are applied as if the sequence were
 * contiguous. The rejected batch's BlockRemoved is lost without a reset, so the index keeps claiming
 * a block the worker evicted (a stale entry that only the LRU bound ever drops). The live path treats
 * the same rejected frame as a gap (reset or a replay whose partial start resets).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KvEventPublisher } from '../../../src/sim/kv-event-publisher.js';
import { KvEventSubscriber } from '../../../src/kv-events/kv-event-subscriber.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { waitFor } from '../../support/wait-for.js';

const BS = 4;
const PROMPT = Array.from({ length: 16 }, (_, i) => 100 + i);
const KEYS = promptKeys(PROMPT, BS, keySeed(undefined));
const H = (i: number): bigint => 0xfedcba9800000000n + BigInt(i);

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('a rejected batch inside a replay', () => {
  it('does not leave the blocks it removed in the index', async () => {
    const pub = new KvEventPublisher({ replayEndpoint: 'tcp://127.0.0.1:0' });
    const { endpoint, replayEndpoint } = await pub.start();
    closers.push(() => pub.close());
    // seq 0: one event storing blocks 0..3.
    await pub.publish([
      { type: 'stored', hashes: [H(0), H(1), H(2), H(3)], parent: undefined, tokens: PROMPT, blockSize: BS },
    ]);
    // seq 1: 3 events > maxEventsPerBatch (2): rejected by the decoder. The worker evicted block 3.
    await pub.publish([
      { type: 'removed', hashes: [H(3)] },
      { type: 'removed', hashes: [H(9)] },
      { type: 'removed', hashes: [H(8)] },
    ]);
    await pub.publish([]); // seq 2
    const index = new KvBlockIndex();
    const replays: string[] = [];
    const resets: string[] = [];
    const drops: Record<string, number> = {};
    const sub = new KvEventSubscriber({
      worker: 'w',
      indexKey: 'w#0',
      endpoint,
      replayEndpoint,
      index,
      limits: { maxPayloadBytes: 16 * 1024 * 1024, maxEventsPerBatch: 2 },
      hooks: {
        replay: (_w, o) => void replays.push(o),
        reset: (_w, why) => void resets.push(why),
        dropped: (_w, reason, n) => void (drops[reason] = (drops[reason] ?? 0) + n),
      },
    });
    sub.start();
    closers.push(() => sub.close());
    await waitFor(() => replays.length === 1, { message: 'start-up replay' });
    await sub.idle();
    expect(drops.too_many_events).toBe(1);
    expect(replays).toHaveLength(1);
    // The worker holds blocks 0..2 (12 tokens) at most; the index must not claim block 3.
    expect(index.cachedTokens(KEYS, BS, ['w#0'])[0]).not.toBe(16);
  });
});
