/**
 * the subscriber's header promises that every reconnect of the SUB socket drops the worker's
 * entries and then, with a replay endpoint, replays everything the publisher still buffers from 0.
 * onConnect() does the reset but its startResync(0) is a no-op while a gap replay is in flight, and
 * nothing re-arms it: the in-flight replay (from the gap's seq) completes on the emptied index, so
 * every block stored before that seq is lost although the publisher still buffers it.
 *
 * The replay ROUTER here is a test double that buffers every batch (as vLLM's does) and holds the
 * gap's replay until the SUB socket has reconnected.
 */
import { afterEach, describe, expect, it } from 'vitest';
import * as zmq from 'zeromq';
import { KvEventPublisher, type SimKvEvent } from '../../../src/sim/kv-event-publisher.js';
import { KvEventSubscriber } from '../../../src/kv-events/kv-event-subscriber.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { encodeSeq } from '../../../src/kv-events/kv-event-decoder.js';
import { waitFor } from '../../support/wait-for.js';

const BS = 4;
const PROMPT = Array.from({ length: 16 }, (_, i) => 100 + i);
const KEYS = promptKeys(PROMPT, BS, keySeed(undefined));
const H = (i: number): bigint => 0xfedcba9800000000n + BigInt(i);
const storeBlock = (b: number): SimKvEvent => ({
  type: 'stored',
  hashes: [H(b)],
  parent: b === 0 ? undefined : H(b - 1),
  tokens: PROMPT.slice(b * BS, (b + 1) * BS),
  blockSize: BS,
});

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('a reconnect while a gap replay is in flight', () => {
  it('still replays from 0 afterwards', async () => {
    const pub1 = new KvEventPublisher();
    const { endpoint } = await pub1.start();
    closers.push(() => pub1.close());

    // Replay double: every batch the test publishes, by seq.
    const buffer = new Map<number, Uint8Array>();
    const requests: number[] = [];
    let release: () => void = () => undefined;
    const released = new Promise<void>((resolve) => (release = resolve));
    const router = new zmq.Router({ linger: 0 });
    await router.bind('tcp://127.0.0.1:0');
    const replayEndpoint = router.lastEndpoint as string;
    const serving = (async () => {
      for (;;) {
        let msg: Buffer[];
        try {
          msg = await router.receive();
        } catch {
          return;
        }
        const [id, , start] = msg as [Buffer, Buffer, Buffer];
        const from = Number(start.readBigUInt64BE());
        requests.push(from);
        if (from > 0) await released; // the gap replay waits for the reconnect
        try {
          for (const seq of [...buffer.keys()].sort((a, b) => a - b)) {
            if (seq >= from) await router.send([id, Buffer.alloc(0), encodeSeq(seq), buffer.get(seq)!]);
          }
          await router.send([id, Buffer.alloc(0), encodeSeq(-1), Buffer.alloc(0)]);
        } catch {
          return;
        }
      }
    })();
    closers.push(async () => {
      router.close();
      await serving;
    });

    const publish = async (pub: KvEventPublisher, events: SimKvEvent[]): Promise<void> => {
      buffer.set(pub.nextSeq, pub.encodeBatch(events, 1));
      await pub.publish(events, 1);
    };

    const index = new KvBlockIndex();
    let received = 0;
    let reconnects = 0;
    const replays: string[] = [];
    const sub = new KvEventSubscriber({
      worker: 'w',
      indexKey: 'w#0',
      endpoint,
      replayEndpoint,
      index,
      hooks: {
        received: () => void received++,
        reconnect: () => void reconnects++,
        replay: (_w, o) => void replays.push(o),
      },
    });
    sub.start();
    closers.push(() => sub.close());
    await waitFor(() => replays.length === 1, { message: 'start-up replay' });
    await waitFor(async () => {
      if (received > 0) return true;
      await publish(pub1, []);
      return false;
    });
    await publish(pub1, [storeBlock(0), storeBlock(1)]);
    await waitFor(() => index.cachedTokens(KEYS, BS, ['w#0'])[0] === 8, { message: 'live batch' });

    // A batch lost at the HWM (buffered for replay), then the next one: gap -> replay from its seq.
    const lost = pub1.nextSeq;
    buffer.set(lost, pub1.encodeBatch([storeBlock(2)], 1));
    pub1.skip([storeBlock(2)]);
    await publish(pub1, [storeBlock(3)]);
    await waitFor(() => requests.length === 2, { message: 'gap replay request' });
    expect(requests).toEqual([0, lost]);

    // The SUB connection drops and comes back while that replay is in flight.
    await pub1.close();
    let pub2: KvEventPublisher | undefined;
    await waitFor(
      async () => {
        const p = new KvEventPublisher({ endpoint });
        try {
          await p.start();
          pub2 = p;
          return true;
        } catch {
          await p.close();
          return false;
        }
      },
      { message: 'rebind the publisher port' },
    );
    closers.push(() => pub2!.close());
    await waitFor(() => reconnects === 1, { message: 'reconnect' });

    release();
    await waitFor(() => replays.length >= 2, { message: 'gap replay done' });
    await sub.idle();
    // The reconnect asked for everything from 0; the publisher buffers blocks 0..3.
    expect(requests).toEqual([0, lost, 0]);
    expect(index.cachedTokens(KEYS, BS, ['w#0'])[0]).toBe(16);
  });
});
