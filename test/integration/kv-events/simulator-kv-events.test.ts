/**
 * The simulator publishes KV events as vLLM does (real ZMQ), and the router's subscriber + index
 * reproduce exactly what its prefix cache holds: stored blocks, evictions, a reset.
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';
import { tokenizeBody } from '../../../src/tokenize/request-tokens.js';
import { KvEventSubscriber } from '../../../src/kv-events/kv-event-subscriber.js';
import { KvBlockIndex } from '../../../src/kv-events/kv-block-index.js';
import { keySeed, promptKeys } from '../../../src/kv-events/block-keys.js';
import { waitFor } from '../../support/wait-for.js';

const tokenizer = HfTokenizer.load(fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url)));
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

async function post(sim: Simulator, body: Record<string, unknown>, path = '/v1/completions'): Promise<void> {
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', max_tokens: 1, ...body }),
  });
  expect(res.status).toBe(200);
  await res.text();
}

/**
 * A simulator publishing KV events (with a replay endpoint) and a subscriber feeding a fresh index,
 * connected: its first replay has run, so what the simulator publishes from now on arrives.
 */
async function subscribedSimulator(opts: SimulatorOptions) {
  const sim = await startSimulator({ timeScale: 0, tokenizer, ...opts });
  closers.push(() => sim.close());
  const index = new KvBlockIndex();
  let replays = 0;
  let applied = 0;
  const sub = new KvEventSubscriber({
    worker: sim.url,
    indexKey: 'w',
    endpoint: sim.kvEvents!.endpoint,
    replayEndpoint: sim.kvEvents!.replayEndpoint!,
    index,
    hooks: { replay: () => void replays++, applied: (_w, n) => void (applied += n) },
  });
  sub.start();
  closers.push(() => sub.close());
  await waitFor(() => replays === 1);
  await sub.idle();
  return { sim, index, applied: () => applied };
}

describe('simulator KV events', () => {
  it.each([
    ['map', 'int'],
    ['array', 'bytes'],
  ] as const)(
    '%s encoding, %s hashes: the index mirrors the cache through stores, evictions and a reset',
    async (encoding, hashFormat) => {
      const { sim, index, applied } = await subscribedSimulator({
        cache: { capacityBlocks: 8 },
        kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0', encoding, hashFormat },
      });

      const prompt = 'Prefix caching keeps the key and value tensors of a prompt. '.repeat(6);
      const ids = tokenizeBody(tokenizer, { prompt });
      if (!ids.ok) throw new Error('fixture cannot tokenize');
      const keys = promptKeys(ids.ids, 16, keySeed(undefined));
      await post(sim, { prompt });
      await waitFor(() => index.size('w') === sim.cache.usedBlocks && applied() > 1);
      expect(index.cachedTokens(keys, 16, ['w'])).toEqual([Math.min(keys.length, 8) * 16]);

      // A different long prompt evicts it (BlockRemoved), the index follows.
      await post(sim, { prompt: 'Envoy asks the external processor which worker. '.repeat(12) });
      await waitFor(() => index.cachedTokens(keys, 16, ['w'])[0] === 0, { message: 'eviction applied' });
      expect(index.size('w')).toBe(sim.cache.usedBlocks);

      await sim.resetPrefixCache(); // AllBlocksCleared
      await waitFor(() => index.size('w') === 0);
    },
  );

  it('publishes what a prompt it cannot tokenize evicts (a chat with an image, keyed by its text)', async () => {
    const { sim, index } = await subscribedSimulator({
      cache: { capacityBlocks: 8 },
      kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0' },
    });
    const prompt = 'Prefix caching keeps the key and value tensors of a prompt. '.repeat(6);
    const ids = tokenizeBody(tokenizer, { prompt });
    if (!ids.ok) throw new Error('fixture cannot tokenize');
    const keys = promptKeys(ids.ids, 16, keySeed(undefined));
    await post(sim, { prompt });
    await waitFor(() => index.cachedTokens(keys, 16, ['w'])[0]! > 0);
    // A chat with an image part: keyed by its text, not announced as stored; it fills the cache, and
    // the announced blocks it evicts are announced as removed.
    const other = 'Envoy asks the external processor which worker. '.repeat(24);
    const image = { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } };
    await post(
      sim,
      { messages: [{ role: 'user', content: [{ type: 'text', text: other }, image] }] },
      '/v1/chat/completions',
    );
    await waitFor(() => index.cachedTokens(keys, 16, ['w'])[0] === 0, { message: 'eviction published' });
    expect(index.size('w')).toBe(0);
  });

  it("a batched prompt: each prompt's blocks are stored and published on their own, as vLLM runs them", async () => {
    const { sim, index } = await subscribedSimulator({ kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0' } });
    const a = 'Prefix caching keeps the key and value tensors of a prompt. '.repeat(6);
    const b = 'Envoy asks the external processor which worker. '.repeat(8);
    const keysOf = (prompt: string): number[] => {
      const r = tokenizeBody(tokenizer, { prompt });
      if (!r.ok) throw new Error('fixture cannot tokenize');
      return promptKeys(r.ids, 16, keySeed(undefined));
    };
    const [ka, kb] = [keysOf(a), keysOf(b)];
    await post(sim, { prompt: [a, b] });
    await waitFor(
      () =>
        index.cachedTokens(ka, 16, ['w'])[0] === ka.length * 16 &&
        index.cachedTokens(kb, 16, ['w'])[0] === kb.length * 16,
      { message: "both prompts' blocks published" },
    );
    // The same prompts again, alone: each is a hit on the worker too.
    const hits = sim.cache.hitTokens;
    await post(sim, { prompt: b });
    expect(sim.cache.hitTokens).toBe(hits + kb.length * 16);
  });

  it('cache_salt: salted blocks are cached and published apart, and match only the same salt', async () => {
    const { sim, index } = await subscribedSimulator({
      kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0', encoding: 'array' },
    });

    const prompt = 'Tenants revisit their long contexts many times. '.repeat(8);
    const ids = tokenizeBody(tokenizer, { prompt });
    if (!ids.ok) throw new Error('fixture cannot tokenize');
    const keys = (salt?: string) => promptKeys(ids.ids, 16, keySeed(undefined), salt);
    const full = keys().length * 16;
    await post(sim, { prompt, cache_salt: 'tenant-a' });
    await waitFor(() => index.cachedTokens(keys('tenant-a'), 16, ['w'])[0] === full);
    expect(index.cachedTokens(keys(), 16, ['w'])).toEqual([0]);
    expect(index.cachedTokens(keys('tenant-b'), 16, ['w'])).toEqual([0]);

    const hits = sim.cache.hitTokens;
    await post(sim, { prompt, cache_salt: 'tenant-b' }); // another tenant: a miss on the worker too
    expect(sim.cache.hitTokens).toBe(hits);
    await post(sim, { prompt, cache_salt: 'tenant-a' });
    expect(sim.cache.hitTokens).toBe(hits + full);
  });
});
