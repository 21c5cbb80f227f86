/**
 * A reconnect of the subscriber's SUB socket with a replay endpoint: every reconnect drops the
 * worker's entries and replays what the publisher still buffers from 0 (kv-event-subscriber.ts).
 * The replay ROUTER in each test is a test double that holds its answers where the test needs them.
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

// the subscriber's header promises that every reconnect of the SUB socket drops the worker's
// entries and then, with a replay endpoint, replays everything the publisher still buffers from 0.
// onConnect() does the reset but its startResync(0) is a no-op while a gap replay is in flight, and
// nothing re-arms it: the in-flight replay (from the gap's seq) completes on the emptied index, so
// every block stored before that seq is lost although the publisher still buffers it.
//
// The replay ROUTER here is a test double that buffers every batch (as vLLM's does) and holds the
// gap's replay until the SUB socket has reconnected.
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

// on a reconnect with a replay endpoint, onConnect() drops the entries and replays from 0 but
// keeps `expected` from the previous connection. When the replay returns nothing (the restarted
// publisher had published nothing yet when it served the request), the live batches that arrived
// meanwhile (seq 0, 1, ... of the new process) are compared with the stale `expected` in resync() and
// skipped as "already covered": the new process's first stored blocks are silently lost (until a
// later batch happens to trip the backwards-seq check).
//
// The replay ROUTER is a test double; it answers the post-reconnect request as of the moment it was
// asked (nothing published yet) but delivers the answer after the new process's first batches.
describe('a reconnect whose replay comes back empty', () => {
  it('applies the new process batches that arrived meanwhile', async () => {
    const pub1 = new KvEventPublisher();
    const { endpoint } = await pub1.start();
    closers.push(() => pub1.close());

    const requests: number[] = [];
    let gate: Promise<void> = Promise.resolve();
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
        requests.push(Number(start.readBigUInt64BE()));
        await gate;
        try {
          await router.send([id, Buffer.alloc(0), encodeSeq(-1), Buffer.alloc(0)]); // nothing buffered
        } catch {
          return;
        }
      }
    })();
    closers.push(async () => {
      router.close();
      await serving;
    });

    const index = new KvBlockIndex();
    let received = 0;
    let reconnects = 0;
    const replays: string[] = [];
    const resets: string[] = [];
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
        reset: (_w, why) => void resets.push(why),
      },
    });
    sub.start();
    closers.push(() => sub.close());
    await waitFor(() => replays.length === 1, { message: 'start-up replay' });
    // The old process: a few batches, so `expected` is well past 0.
    await waitFor(async () => {
      if (received > 0) return true;
      await pub1.publish([]);
      return false;
    });
    for (let i = 0; i < 5; i++) await pub1.publish([]);
    await pub1.publish([
      { type: 'stored', hashes: [H(9)], parent: undefined, tokens: [1, 2, 3, 4], blockSize: BS },
    ]);
    await waitFor(() => index.size('w#0') === 1, { message: 'old process batch' });

    // Hold the post-reconnect replay's answer until the new process's first batches have arrived.
    let open: () => void = () => undefined;
    gate = new Promise<void>((resolve) => (open = resolve));
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
    await waitFor(() => reconnects === 1 && requests.length === 2, { message: 'reconnect replay request' });
    const before = received;
    await waitFor(async () => {
      if (received > before) return true;
      await pub2!.publish([]);
      return false;
    });
    const beforeStore = received;
    await pub2!.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => received > beforeStore, { message: 'new process batch queued' });
    open();
    await waitFor(() => replays.length === 2, { message: 'reconnect replay done' });
    await sub.idle();
    expect(resets).toEqual(['reconnect']);
    expect(index.cachedTokens(KEYS, BS, ['w#0'])[0]).toBe(8);
  });
});
