/**
 * vLLM sets `usage.prompt_tokens_details` only when `enable_prompt_tokens_details and
 * num_cached_tokens` (serving_chat.py / serving_completion.py): a request that found nothing cached
 * gets `prompt_tokens_details: null` (omitted in a stream's usage chunk), never `{cached_tokens: 0}`.
 * The router reads an absent cached_tokens as "no report" (load/usage-tokens.ts cachedTokensIn), so
 * a worker that lost a prefix completely never corrects the cache-aware tree against real vLLM.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { postJson, simulatorsClosedAfterEach, sseEvents } from '../sim/sim-test-client.js';

const sim = simulatorsClosedAfterEach();

describe('prompt_tokens_details on a cache miss', () => {
  it('JSON: no cached tokens -> prompt_tokens_details is null', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'a fresh prompt', max_tokens: 2 });
    const usage = r.json.usage as Record<string, unknown>;
    expect(usage.prompt_tokens_details ?? null).toBeNull();
  });

  it('SSE usage chunk: no cached tokens -> no cached_tokens', async () => {
    const s = await sim();
    const res = await request(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        messages: [{ role: 'user', content: 'hi' }],
        max_tokens: 2,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    const events = sseEvents(await res.body.text());
    const usage = (events.at(-2) as { usage: Record<string, unknown> }).usage;
    expect(usage.prompt_tokens_details ?? null).toBeNull();
  });
});
