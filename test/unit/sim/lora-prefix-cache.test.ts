/**
 * vLLM keys a LoRA request's KV blocks by the adapter's name (kv_cache_utils.py
 * `_gen_lora_extra_hash_keys` -> `[request.lora_request.lora_name]` in every block's extra keys), so a
 * prompt cached for the base model (or another adapter) is NOT a prefix-cache hit for an adapter, and
 * the BlockStored events of a LoRA request carry the adapter (`lora_id` / `lora_name`,
 * block_pool.py `cache_full_blocks`).
 */
import { describe, expect, it } from 'vitest';
import { postJson, simulatorsClosedAfterEach } from '../sim/sim-test-client.js';

const sim = simulatorsClosedAfterEach();
const PROMPT = 'Prefix caching keeps the key and value tensors of a prompt. '.repeat(8);

describe('simulator LoRA prefix caching', () => {
  it('does not count a prompt cached for the base model as cached for an adapter', async () => {
    const s = await sim({ model: 'base', lora: { maxLoras: 2, loadMs: 0, modules: ['sql'] } });
    const base = await postJson(`${s.url}/v1/completions`, { model: 'base', prompt: PROMPT, max_tokens: 1 });
    expect(base.status).toBe(200);
    const lora = await postJson(`${s.url}/v1/completions`, { model: 'sql', prompt: PROMPT, max_tokens: 1 });
    expect(lora.status).toBe(200);
    // vLLM: the adapter's block hashes differ from the base model's: nothing is cached.
    expect(s.records.at(-1)!.cachedTokens).toBe(0);
  });

  it('does not share cached blocks between two adapters', async () => {
    const s = await sim({ model: 'base', lora: { maxLoras: 2, loadMs: 0, modules: ['sql', 'chat'] } });
    await postJson(`${s.url}/v1/completions`, { model: 'sql', prompt: PROMPT, max_tokens: 1 });
    await postJson(`${s.url}/v1/completions`, { model: 'chat', prompt: PROMPT, max_tokens: 1 });
    expect(s.records.at(-1)!.cachedTokens).toBe(0);
  });
});
