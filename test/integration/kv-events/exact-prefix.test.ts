/**
 * The exact prefix composition (kv-events/exact-prefix.ts) over a real ZMQ publisher (the simulator's)
 * and the fixture tokenizer: what a router sees of a prompt it routed, as the worker's events arrive.
 * Synchronisation is on the index size, never on sleeps.
 */
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createExactPrefix } from '../../../src/kv-events/exact-prefix.js';
import { KvEventPublisher, type SimKvEvent } from '../../../src/sim/kv-event-publisher.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';
import { input } from '../../unit/routing/fixtures.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const BS = 4;
const prompt = 'Summarise the chapter about the river harbor and its lantern bridge. '.repeat(8);
const ids = (
  RequestTokenizer.load(new Map([['m', DIR]])).tokenize('m', { prompt }) as { ok: true; ids: number[] }
).ids;
const blocks = Math.floor(ids.length / BS);
const H = (i: number): bigint => 0xabcd000000000000n + BigInt(i);
/** BlockStored for the prompt's blocks [from, to): what the worker publishes once it computed them. */
const stored = (from: number, to: number): SimKvEvent => ({
  type: 'stored',
  hashes: Array.from({ length: to - from }, (_, k) => H(from + k)),
  parent: from === 0 ? undefined : H(from - 1),
  tokens: Array.from(ids.slice(from * BS, to * BS)),
  blockSize: BS,
});

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

async function setup() {
  const pub = new KvEventPublisher();
  const { endpoint } = await pub.start();
  closers.push(() => pub.close());
  const worker = new Worker({
    role: 'regular',
    url: 'http://127.0.0.1:8000',
    endpoint: '127.0.0.1:8000',
    generation: 1,
  });
  const exact = createExactPrefix(
    {
      kvEventSource: [`${worker.url}=${endpoint}`],
      kvEventReplay: [],
      kvEventPort: 0,
      kvEventReplayPort: 0,
      kvEventDpSize: 1,
      kvEventBlockSize: BS,
      kvIndexMaxBlocks: 10_000,
      kvTierCredit: ['GPU=1', 'CPU=0.5'],
      tokenizer: [`m=${DIR}`],
      serviceDiscovery: false,
      kvEventTopic: '',
      kvPendingTtlMs: 60_000,
      tokenizerCacheChars: 1 << 20,
    },
    new Registry(),
    () => [worker],
    pino({ level: 'silent' }),
  );
  closers.push(() => exact.close());
  exact.start();
  exact.sync();
  const source = exact.source!;
  const size = (): number => exact.subscriptions!.sizes().get(worker.url) ?? 0;
  // ZMQ drops what is published before the subscription is up: publish a block of another prompt
  // until one lands.
  await waitFor(async () => {
    if (size() > 0) return true;
    await pub.publish([
      { type: 'stored', hashes: [H(1000)], parent: undefined, tokens: [1, 2, 3, 4], blockSize: BS },
    ]);
    return false;
  });
  const req = input([worker], { text: prompt, body: { prompt } });
  const cached = (): number | undefined =>
    source.cachedTokens(input([worker], { text: prompt, body: { prompt } }), [worker])?.[0];
  return { pub, worker, source, size, req, cached };
}

describe('exact prefix: pending blocks and the events that confirm them', () => {
  it('a prompt the worker stored and then evicted is seen gone, even with no lookup in between', async () => {
    const { pub, worker, source, size, req, cached } = await setup();
    const before = size();
    expect(source.cachedTokens(req, [worker])).toEqual([0]);
    source.routed(req, worker, Date.now()); // the router sent it there: its blocks are pending
    expect(cached()).toBe(blocks * BS);
    await pub.publish([stored(0, blocks)]);
    await waitFor(() => size() === before + blocks);
    expect(source.pending.size).toBe(0); // the stored events confirmed them
    expect(source.heldTokens(worker)).toBe((before + blocks) * BS);
    await pub.publish([{ type: 'removed', hashes: Array.from({ length: blocks }, (_, b) => H(b)) }]);
    await waitFor(() => size() === before);
    expect(cached()).toBe(0);
    expect(source.heldTokens(worker)).toBe(before * BS);
  });

  it('blocks the worker has not stored yet stay pending, and the stored part is confirmed', async () => {
    const { pub, worker, source, size, req, cached } = await setup();
    const before = size();
    source.cachedTokens(req, [worker]);
    source.routed(req, worker, Date.now());
    await pub.publish([stored(0, 2)]);
    await waitFor(() => size() === before + 2);
    expect(source.pending.size).toBe(blocks - 2);
    expect(cached()).toBe(blocks * BS);
  });
});
