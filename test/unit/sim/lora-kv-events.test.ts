/**
 * a LoRA request's BlockStored carries its adapter (vLLM block_pool.py cache_full_blocks:
 * `lora_id=request.lora_request.id`, newer releases also `lora_name`), and its block hashes differ
 * from the base model's for the same tokens (the LoRA name is in every block's extra keys).
 */
import * as zmq from 'zeromq';
import { decode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { postJson, simulatorsClosedAfterEach } from '../sim/sim-test-client.js';

const sim = simulatorsClosedAfterEach();
type Stored = { type: string; block_hashes: bigint[]; lora_name: string | null };

describe('LoRA KV events', () => {
  it('BlockStored names the adapter and uses other hashes than the base model', async () => {
    const s = await sim({ model: 'base', lora: { maxLoras: 2, loadMs: 0, modules: ['sql'] }, kvEvents: {} });
    const sub = new zmq.Subscriber({ linger: 0 });
    sub.connect(s.kvEvents!.endpoint);
    sub.subscribe();
    const stored: Stored[] = [];
    const prompt = 'Prefix caching keeps the key and value tensors of a prompt. '.repeat(4);
    // Slow joiner: send until the subscription is live (the first batch arrives).
    const reader = (async () => {
      for await (const [, , payload] of sub) {
        const batch = decode(payload!, { useBigInt64: true }) as { events: Stored[] };
        for (const e of batch.events) if (e.type === 'BlockStored') stored.push(e);
        // The sentinel (a long base prompt sent last) ends the read: events arrive in order.
        if (stored.some((e) => e.block_hashes.length >= 50)) return;
      }
    })();
    let n = 0;
    while (stored.length === 0 && n++ < 200) {
      await postJson(`${s.url}/v1/completions`, { model: 'base', prompt: `${n} ${prompt}`, max_tokens: 1 });
      await new Promise((r) => setImmediate(r));
    }
    const base = stored[0]!;
    await postJson(`${s.url}/v1/completions`, { model: 'sql', prompt: `${n} ${prompt}`, max_tokens: 1 });
    await postJson(`${s.url}/v1/completions`, {
      model: 'base',
      prompt: 'sentinel '.repeat(400),
      max_tokens: 1,
    });
    await reader;
    sub.close();
    expect(base.lora_name).toBeNull();
    const lora = stored.find((e) => e.lora_name === 'sql');
    expect(lora, 'a BlockStored for the adapter request').toBeDefined();
    expect(lora!.block_hashes[0]).not.toEqual(base.block_hashes[0]);
  });
});
