/**
 * vLLM never finds a whole prompt in its prefix cache. `KVCacheManager.get_computed_blocks`
 * (vllm/v1/core/kv_cache_manager.py) caps the hit at `request.num_tokens - 1` ("When all tokens hit
 * the cache, we must recompute the last token to obtain logits ... This can trigger recomputation of
 * an entire block"), and the hit is block-aligned: a prompt of exactly k full blocks, all cached,
 * reports (k - 1) blocks cached, never prompt_tokens.
 */
import { describe, expect, it } from 'vitest';
import { PrefixCache } from '../../../src/sim/prefix-cache.js';
import { postJson, simulatorsClosedAfterEach } from '../sim/sim-test-client.js';

const sim = simulatorsClosedAfterEach();

describe('full-prompt prefix-cache hits', () => {
  it('PrefixCache: a fully cached 2-block prompt hits 1 block (vLLM recomputes the last block)', () => {
    const cache = new PrefixCache();
    const text = 'x'.repeat(128); // 32 tokens = 2 blocks of 16
    cache.lookupAndInsert(text);
    const again = cache.lookupAndInsert(text);
    expect(again.promptTokens).toBe(32);
    expect(again.cachedTokens).toBe(16);
  });

  it('PrefixCache token mode: the same cap', () => {
    const cache = new PrefixCache();
    const ids = Array.from({ length: 32 }, (_, i) => i + 1);
    cache.lookupAndInsertTokens(ids);
    expect(cache.lookupAndInsertTokens(ids).cachedTokens).toBe(16);
  });

  it('HTTP: a repeated one-block prompt reports 0 cached tokens, never cached == prompt', async () => {
    const s = await sim();
    const prompt = 'y'.repeat(64); // 16 tokens, one full block
    await postJson(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
    const r = await postJson(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
    const usage = r.json.usage as { prompt_tokens: number };
    expect(usage.prompt_tokens).toBe(16);
    expect(s.records.at(-1)!.cachedTokens).toBe(0);
  });
});
