/**
 * Real ZMQ sockets on loopback: the simulator's vLLM-compatible publisher -> KvEventSubscriber ->
 * KvBlockIndex. Synchronisation is on the subscriber's hooks (received / applied / replay), never on
 * sleeps.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { KvEventPublisher, type SimKvEvent } from '../../../src/sim/kv-event-publisher.js';
import { KvEventSubscriber, type KvEventHooks } from '../../../src/kv-events/kv-event-subscriber.js';
import { KvEventSubscriptions, LINGER_MS } from '../../../src/kv-events/kv-event-subscriptions.js';
import { parseKvEventSources } from '../../../src/kv-events/kv-event-sources.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';

const BS = 4;
const PROMPT = Array.from({ length: 16 }, (_, i) => 100 + i); // 4 blocks
const KEYS = promptKeys(PROMPT, BS, keySeed(undefined));
const H = (i: number): bigint => 0xfedcba9800000000n + BigInt(i);
const storeBlock = (b: number): SimKvEvent => ({
  type: 'stored',
  hashes: [H(b)],
  parent: b === 0 ? undefined : H(b - 1),
  tokens: PROMPT.slice(b * BS, (b + 1) * BS),
  blockSize: BS,
});

class Recorder {
  received = 0;
  applied = 0;
  gaps = 0;
  reconnects = 0;
  replays: string[] = [];
  resets: string[] = [];
  drops: Record<string, number> = {};
  lags: number[] = [];
  stored: number[][] = [];
  readonly hooks: KvEventHooks = {
    stored: (_w, keys) => void this.stored.push([...keys]),
    lag: (_w, seconds) => void this.lags.push(seconds),
    received: () => void this.received++,
    applied: (_w, n) => void (this.applied += n),
    gap: () => void this.gaps++,
    reconnect: () => void this.reconnects++,
    replay: (_w, o) => void this.replays.push(o),
    reset: (_w, why) => void this.resets.push(why),
    dropped: (_w, reason, n) => void (this.drops[reason] = (this.drops[reason] ?? 0) + n),
  };
}

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

async function setup(
  opts: {
    replay?: boolean;
    encoding?: 'map' | 'array';
    hashFormat?: 'int' | 'bytes';
    clock?: () => number;
    /** Runs once the publisher is up, before anyone subscribes (what only a replay can deliver). */
    beforeSubscribe?: (pub: KvEventPublisher) => Promise<unknown>;
  } = {},
) {
  const pub = new KvEventPublisher({
    ...(opts.replay ? { replayEndpoint: 'tcp://127.0.0.1:0' } : {}),
    encoding: opts.encoding ?? 'map',
    hashFormat: opts.hashFormat ?? 'int',
  });
  const { endpoint, replayEndpoint } = await pub.start();
  closers.push(() => pub.close());
  await opts.beforeSubscribe?.(pub);
  const index = new KvBlockIndex();
  const rec = new Recorder();
  const sub = new KvEventSubscriber({
    worker: 'w',
    indexKey: 'w#0',
    endpoint,
    ...(replayEndpoint !== undefined ? { replayEndpoint } : {}),
    index,
    hooks: rec.hooks,
    ...(opts.clock ? { clock: opts.clock } : {}),
  });
  sub.start();
  closers.push(() => sub.close());
  return { pub, sub, index, rec };
}

/** Without replay, batches sent before the SUB handshake are lost: send empty batches until one arrives. */
async function handshake(pub: KvEventPublisher, rec: Recorder): Promise<void> {
  await waitFor(
    async () => {
      if (rec.received > 0) return true;
      await pub.publish([]);
      return false;
    },
    { message: 'subscriber receives' },
  );
}

/** A regular worker at http://127.0.0.1:<port>. */
const localWorker = (port: number, generation: number, metadata?: Record<string, unknown>): Worker =>
  new Worker({
    role: 'regular',
    url: `http://127.0.0.1:${port}`,
    endpoint: `127.0.0.1:${port}`,
    generation,
    ...(metadata ? { metadata } : {}),
  });

const cached = (index: KvBlockIndex): number | undefined => index.cachedTokens(KEYS, BS, ['w#0'])[0];

describe('KvEventSubscriber over real ZMQ', () => {
  it.each([
    ['map', 'int'],
    ['array', 'bytes'],
  ] as const)('applies live events in order (%s encoding, %s hashes)', async (encoding, hashFormat) => {
    const { pub, index, rec } = await setup({ encoding, hashFormat });
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await pub.publish([storeBlock(2)]);
    await waitFor(() => rec.applied >= 3);
    expect(cached(index)).toBe(12);
    await pub.publish([{ type: 'removed', hashes: [H(1)] }]);
    await waitFor(() => rec.applied >= 4);
    expect(cached(index)).toBe(4);
    expect(rec.gaps).toBe(0);
  });

  it("reports each live batch's lag behind its publisher's timestamp (never negative)", async () => {
    const nowMs = 1_800_000_000_000;
    const { pub, rec } = await setup({ clock: () => nowMs });
    await handshake(pub, rec);
    await pub.publish([storeBlock(0)], nowMs / 1000 - 2.5);
    await pub.publish([storeBlock(1)], nowMs / 1000 + 1); // a publisher clock ahead of the router's
    await waitFor(() => rec.applied >= 2);
    // Frames arrive in order: the handshake's empty batches (if any still in flight) come before ours.
    expect(rec.lags.slice(-2)).toEqual([2.5, 0]);
  });

  it('reports the own keys of the blocks each batch stored, and nothing for removals', async () => {
    const { pub, rec } = await setup();
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await pub.publish([{ type: 'removed', hashes: [H(1)] }]);
    await pub.publish([storeBlock(1)]);
    await waitFor(() => rec.applied >= 4);
    expect(rec.stored).toEqual([[KEYS[0], KEYS[1]], [KEYS[1]]]);
  });

  it('replayed batches are old on purpose: no lag is reported for them', async () => {
    const nowMs = 1_800_000_000_000;
    const { index, rec } = await setup({
      replay: true,
      clock: () => nowMs,
      // Published before anyone subscribed: only the catch-up replay delivers it.
      beforeSubscribe: (pub) => pub.publish([storeBlock(0)], nowMs / 1000 - 60),
    });
    await waitFor(() => rec.applied >= 1);
    expect(cached(index)).toBe(4);
    expect(rec.lags).toEqual([]);
  });

  it('a gap without a replay endpoint drops the worker entries, then rebuilds from new events', async () => {
    const { pub, index, rec } = await setup();
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => rec.applied >= 2);
    pub.skip([{ type: 'removed', hashes: [H(1)] }]); // lost at the HWM
    await pub.publish([{ type: 'cleared' }, storeBlock(0)]);
    await waitFor(() => rec.applied >= 4);
    expect(rec.gaps).toBe(1);
    expect(rec.resets).toEqual(['gap']);
    expect(cached(index)).toBe(4);
  });

  it('after a gap without a replay endpoint, a block extending one the worker kept marks its index incomplete', async () => {
    // The reset drops what the worker still holds, and vLLM never announces a held block again.
    const { pub, index, rec } = await setup();
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => rec.applied >= 2);
    pub.skip([]); // lost at the HWM
    await pub.publish([storeBlock(2)]);
    await waitFor(() => (rec.drops.unknown_parent ?? 0) >= 1);
    expect(rec.resets).toEqual(['gap']);
    expect(cached(index)).toBe(0);
    expect(index.incomplete('w#0')).toBe(true);
  });

  it('a gap with a replay endpoint fetches the missing batches', async () => {
    const { pub, sub, index, rec } = await setup({ replay: true });
    await waitFor(() => rec.replays.length === 1, { message: 'start-up replay' });
    await handshake(pub, rec);
    await pub.publish([storeBlock(0)]);
    pub.skip([storeBlock(1)]);
    pub.skip([storeBlock(2)]);
    await pub.publish([storeBlock(3)]);
    await waitFor(() => rec.replays.length === 2 && rec.applied >= 4, { message: 'gap replay' });
    await sub.idle();
    expect(rec.gaps).toBe(1);
    expect(rec.replays).toEqual(['ok', 'ok']);
    expect(rec.resets).toEqual([]);
    expect(cached(index)).toBe(16);
  });

  it('a gap replay counts each batch received once: the live batch that showed the gap is not counted again', async () => {
    const { pub, sub, index, rec } = await setup({ replay: true });
    await waitFor(() => rec.replays.length === 1, { message: 'start-up replay' });
    await handshake(pub, rec);
    const before = rec.received;
    await pub.publish([storeBlock(0)]);
    pub.skip([storeBlock(1)]);
    pub.skip([storeBlock(2)]);
    await pub.publish([storeBlock(3)]);
    await waitFor(() => rec.replays.length === 2 && rec.applied >= 4, { message: 'gap replay' });
    await sub.idle();
    // Batches 0 and 3 arrived live, 1 and 2 by the replay (which sends 3 again): four batches.
    expect(rec.received - before).toBe(4);
    expect(rec.applied).toBe(4);
    expect(cached(index)).toBe(16);
  });

  it('on start with a replay endpoint, catches up on what was published before it subscribed', async () => {
    const pub = new KvEventPublisher({ replayEndpoint: 'tcp://127.0.0.1:0' });
    const { endpoint, replayEndpoint } = await pub.start();
    closers.push(() => pub.close());
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await pub.publish([storeBlock(2)]);
    const index = new KvBlockIndex();
    const rec = new Recorder();
    const sub = new KvEventSubscriber({
      worker: 'w',
      indexKey: 'w#0',
      endpoint,
      replayEndpoint,
      index,
      hooks: rec.hooks,
    });
    sub.start();
    closers.push(() => sub.close());
    await waitFor(() => rec.replays.length === 1);
    await sub.idle();
    expect(rec.replays).toEqual(['ok']);
    expect(cached(index)).toBe(12);
  });

  it('a publisher restart (reconnect, seq from 0) drops the entries of the old process', async () => {
    const first = new KvEventPublisher();
    const { endpoint } = await first.start();
    const index = new KvBlockIndex();
    const rec = new Recorder();
    const sub = new KvEventSubscriber({ worker: 'w', indexKey: 'w#0', endpoint, index, hooks: rec.hooks });
    sub.start();
    closers.push(() => sub.close());
    await handshake(first, rec);
    await first.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => rec.applied >= 2);
    expect(cached(index)).toBe(8);
    await first.close();
    // libzmq releases the port asynchronously after close: retry the bind until it is free.
    let second: KvEventPublisher | undefined;
    await waitFor(
      async () => {
        const p = new KvEventPublisher({ endpoint });
        try {
          await p.start();
          second = p;
          return true;
        } catch {
          await p.close();
          return false;
        }
      },
      { message: 'rebind the publisher port' },
    );
    const restarted = second as KvEventPublisher;
    closers.push(() => restarted.close());
    await waitFor(() => rec.reconnects === 1, { message: 'reconnect' });
    expect(cached(index)).toBe(0);
    const before = rec.received;
    await waitFor(async () => {
      if (rec.received > before) return true;
      await restarted.publish([]);
      return false;
    });
    await restarted.publish([storeBlock(0)]);
    await waitFor(() => rec.applied >= 3);
    expect(cached(index)).toBe(4);
    expect(rec.resets[0]).toBe('reconnect');
  });

  it('garbage frames are counted and dropped; the stream goes on', async () => {
    const { pub, index, rec } = await setup();
    await handshake(pub, rec);
    const seq = Buffer.alloc(8);
    await pub.sendRaw([Buffer.from(''), seq, Buffer.from([0xc1, 0xc1])]);
    await pub.sendRaw([Buffer.from(''), Buffer.from([1, 2])]);
    await pub.sendRaw([Buffer.from(''), Buffer.from([1, 2, 3]), Buffer.from([0x90])]);
    await waitFor(
      () => (rec.drops.not_msgpack ?? 0) + (rec.drops.frame_parts ?? 0) + (rec.drops.bad_seq ?? 0) === 3,
    );
    expect(rec.drops).toMatchObject({ not_msgpack: 1, frame_parts: 1, bad_seq: 1 });
    // The next real batch is seq = nextSeq: still in order.
    await pub.publish([storeBlock(0)]);
    await waitFor(() => rec.applied >= 1);
    expect(cached(index)).toBe(4);
  });
});

describe('KvEventSubscriptions', () => {
  it('a re-registered worker (new generation) keeps what its publisher showed; a departed one is forgotten after LINGER_MS', async () => {
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const rules = parseKvEventSources({
      sources: [`http://127.0.0.1:8000=${endpoint}`],
      replays: [],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const rec = new Recorder();
    let now = 0;
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks, syncIntervalMs: 0, clock: () => now });
    closers.push(() => subs.close());
    const gen1 = localWorker(8000, 1);
    const other = localWorker(8001, 2);
    subs.sync([gen1, other]);
    expect(subs.publishes(gen1.url)).toBe(true);
    expect(subs.publishes(other.url)).toBe(false);
    expect(subs.cachedTokens(KEYS, BS, [gen1, other])).toEqual([0, undefined]);
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => rec.applied >= 2);
    expect(subs.cachedTokens(KEYS, BS, [gen1])).toEqual([8]);
    expect(subs.sizes()).toEqual(new Map([['http://127.0.0.1:8000', 2]]));
    // How full its cache is, by its events (the cost model's displacement term).
    expect(subs.heldTokens(gen1)).toBe(2 * BS);
    expect(subs.heldTokens(other)).toBeUndefined();

    // The same process re-registered: its publisher never reconnected, so what it showed stands.
    const gen3 = localWorker(8000, 3);
    subs.sync([gen3]);
    expect(subs.cachedTokens(KEYS, BS, [gen3])).toEqual([8]);
    expect(subs.heldTokens(gen3)).toBe(2 * BS);
    // The old generation is not answered for (its Worker object is stale).
    expect(subs.cachedTokens(KEYS, BS, [gen1])).toEqual([undefined]);
    expect(subs.heldTokens(gen1)).toBeUndefined();
    subs.sync([]);
    expect(subs.publishes(gen3.url)).toBe(false);
    expect(subs.sizes()).toEqual(new Map());
    now += LINGER_MS;
    subs.sync([]);
    const gen4 = localWorker(8000, 4);
    subs.sync([gen4]);
    expect(subs.cachedTokens(KEYS, BS, [gen4])).toEqual([0]);
    expect(subs.heldTokens(gen4)).toBe(0);
  });

  it('a worker that leaves and comes back as the same process (a readiness flap) still shows the prefixes it held, and what extends them', async () => {
    // vLLM publishes a block once, when it stores it; without a replay endpoint (its default) a new
    // subscriber never learns of a system prompt cached before it, and drops every later block that
    // extends it (`unknown_parent`).
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const rules = parseKvEventSources({
      sources: [`http://127.0.0.1:8000=${endpoint}`],
      replays: [],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const rec = new Recorder();
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks, syncIntervalMs: 0 });
    closers.push(() => subs.close());
    subs.sync([localWorker(8000, 1)]);
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1)]);
    await waitFor(() => rec.applied >= 2);
    subs.sync([]); // NotReady: the pod leaves the pool
    const back = localWorker(8000, 2);
    subs.sync([back]); // Ready again: a new registration generation of the same process
    const before = rec.received;
    await waitFor(async () => {
      if (rec.received > before) return true;
      await pub.publish([]);
      return false;
    });
    await pub.publish([storeBlock(2), storeBlock(3)]); // the next turn, under the cached opening
    await waitFor(() => rec.applied >= 4 || (rec.drops.unknown_parent ?? 0) > 0);
    expect(rec.drops.unknown_parent ?? 0).toBe(0);
    expect(subs.cachedTokens(KEYS, BS, [back])).toEqual([16]);
  });

  it('a replay that reaches back only the last batches leaves the worker incomplete while it extends a prefix stored before them, until that prefix is evicted', async () => {
    // vLLM keeps its last `buffer_steps` batches for replay: a router (re)started on a long-running
    // worker never sees the BlockStored of a prefix cached before them, and drops every block that
    // extends it (`unknown_parent`).
    const pub = new KvEventPublisher({ replayEndpoint: 'tcp://127.0.0.1:0', bufferSteps: 2 });
    const { endpoint, replayEndpoint } = await pub.start();
    closers.push(() => pub.close());
    await pub.publish([storeBlock(0), storeBlock(1)]); // the system prompt, cached long ago
    const other = (i: number): SimKvEvent => ({
      type: 'stored',
      hashes: [H(100 + i)],
      parent: undefined,
      tokens: [9, 9, 9, i],
      blockSize: BS,
    });
    for (let i = 0; i < 3; i++) await pub.publish([other(i)]); // pushes it out of the buffer
    const rules = parseKvEventSources({
      sources: [`http://127.0.0.1:8000=${endpoint}`],
      replays: [`http://127.0.0.1:8000=${replayEndpoint!}`],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const rec = new Recorder();
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks, syncIntervalMs: 0 });
    closers.push(() => subs.close());
    const worker = localWorker(8000, 1);
    subs.sync([worker]);
    await waitFor(() => rec.replays.length > 0);
    expect(rec.replays).toEqual(['partial']);
    expect(subs.incomplete(worker)).toBe(false); // nothing shows it misses anything yet
    await pub.publish([storeBlock(2), storeBlock(3)]); // a prompt extending the system prompt
    await waitFor(() => (rec.drops.unknown_parent ?? 0) >= 2);
    // The index shows nothing of it, and says so: its answer is only a lower bound.
    expect(subs.cachedTokens(KEYS, BS, [worker])).toEqual([0]);
    expect(subs.incomplete(worker)).toBe(true);
    // The worker evicts the prompt, then the system prompt: nothing it holds is unknown any more.
    await pub.publish([{ type: 'removed', hashes: [H(3), H(2)] }]);
    await waitFor(() => rec.applied >= 3);
    expect(subs.incomplete(worker)).toBe(true);
    await pub.publish([{ type: 'removed', hashes: [H(1), H(0)] }]);
    await waitFor(() => rec.applied >= 4);
    expect(subs.incomplete(worker)).toBe(false);
    // A publisher that clears its cache (AllBlocksCleared) is known again at once.
    await pub.publish([storeBlock(1)]);
    await waitFor(() => (rec.drops.unknown_parent ?? 0) >= 3);
    expect(subs.incomplete(worker)).toBe(true);
    await pub.publish([{ type: 'cleared' }]);
    await waitFor(() => rec.applied >= 5);
    expect(subs.incomplete(worker)).toBe(false);
  });

  it('a worker that comes back with other publishers is subscribed anew, empty', async () => {
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const rules = parseKvEventSources({
      sources: [],
      replays: [],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const port = Number(new URL(endpoint.replace('tcp://', 'http://')).port);
    const rec = new Recorder();
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks, syncIntervalMs: 0 });
    closers.push(() => subs.close());
    subs.sync([localWorker(8000, 1, { kv_events_port: port })]);
    await handshake(pub, rec);
    await pub.publish([storeBlock(0)]);
    await waitFor(() => rec.applied >= 1);
    const moved = localWorker(8000, 2, { kv_events_port: port + 1 });
    subs.sync([moved]);
    expect(subs.cachedTokens(KEYS, BS, [moved])).toEqual([0]);
  });

  it("subscribes to a worker's own KV-events port (Kubernetes annotation / metadata) with no default rule", async () => {
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const port = Number(/:(\d+)$/.exec(endpoint)![1]);
    const rules = parseKvEventSources({
      sources: [],
      replays: [],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const rec = new Recorder();
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks });
    closers.push(() => subs.close());
    const annotated = localWorker(8000, 1, { kv_events_port: port });
    const plain = localWorker(8001, 1);
    subs.sync([annotated, plain]);
    expect(subs.publishes(annotated.url)).toBe(true);
    expect(subs.publishes(plain.url)).toBe(false);
    await handshake(pub, rec);
    await pub.publish([storeBlock(0), storeBlock(1), storeBlock(2)]);
    await waitFor(() => rec.applied >= 3);
    expect(subs.cachedTokens(KEYS, BS, [annotated, plain])).toEqual([12, undefined]);
  });
  it("a worker that stands for one data-parallel rank reads only its own rank's publisher", async () => {
    const pubs = [
      new KvEventPublisher({ dataParallelRank: 0 }),
      new KvEventPublisher({ dataParallelRank: 1 }),
    ];
    const endpoints: string[] = [];
    for (const p of pubs) {
      endpoints.push((await p.start()).endpoint);
      closers.push(() => p.close());
    }
    const rules = parseKvEventSources({
      sources: [`http://127.0.0.1:8000=${endpoints.join(',')}`],
      replays: [],
      defaultPort: 0,
      defaultReplayPort: 0,
      dpSize: 1,
    });
    const rec = new Recorder();
    const subs = new KvEventSubscriptions({ rules, hooks: rec.hooks });
    closers.push(() => subs.close());
    const rank = (r: number): Worker =>
      new Worker({
        role: 'regular',
        url: 'http://127.0.0.1:8000',
        endpoint: '127.0.0.1:8000',
        generation: 1,
        dpRank: r,
      });
    const [r0, r1] = [rank(0), rank(1)];
    const whole = localWorker(8000, 1);
    subs.sync([r0, r1]);
    for (const p of pubs) await handshake(p, rec);
    // Rank 1 alone holds the prompt's first three blocks.
    await pubs[1]!.publish([storeBlock(0), storeBlock(1), storeBlock(2)]);
    await waitFor(() => rec.applied >= 3);
    expect(subs.cachedTokens(KEYS, BS, [r0, r1])).toEqual([0, 12]);
    expect([subs.heldTokens(r0), subs.heldTokens(r1)]).toEqual([0, 12]);
    // The server as one worker (no rank of its own) answers for its best rank, as before.
    expect(subs.cachedTokens(KEYS, BS, [whole])).toEqual([12]);
  });
});
