/**
 * End to end through a real Envoy: tenants that isolate their prefix cache with vLLM's `cache_salt`.
 * vLLM salts a request's first block with it, so two tenants sending the same system prompt share no
 * cached block. The router keys its prefix tree by the salt too (request/prompt-text.ts `saltedText`):
 * it never predicts one tenant's prompt where only another tenant's identical one is cached, so the
 * miss reported there never knocks out the first tenant's affinity. Both tenants alternate over one
 * long shared system prompt on two workers: after each tenant's first request, every request of that
 * tenant is served from its worker's cache. Ends with every load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ workers: 2, router: { responseBodySample: 1, decisionHeader: true } });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
});

const SYSTEM = 'You are the support assistant of a large hardware store. '.repeat(40); // ~560 tokens

async function ask(
  salt: string | undefined,
  question: string,
): Promise<{ cached: number; prompt: number; worker: string }> {
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      messages: [
        { role: 'system', content: SYSTEM },
        { role: 'user', content: question },
      ],
      max_tokens: 2,
      ...(salt === undefined ? {} : { cache_salt: salt }),
    }),
  });
  const body = (await res.json()) as {
    usage: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } | null };
  };
  expect(res.status).toBe(200);
  return {
    // vLLM writes prompt_tokens_details only when something was cached.
    cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
    prompt: body.usage.prompt_tokens,
    worker: /worker=(\S+?);/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '',
  };
}

describe('cache_salt: tenants that share a prompt but not a cache', () => {
  it('spreads the tenants (no cache is shared) and keeps each on the worker holding its own prefix', async () => {
    // 16 tenants: a new prompt is seeded on its prefix home (a rendezvous hash with the workers'
    // URLs, whose ports change every run), so with 8 the homes of all tenants could fall on one of
    // the two workers in about 1 run of 128; with 16, 1 in 32,768.
    const tenants = Array.from({ length: 16 }, (_, i) => `tenant-${i}`);
    const home = new Map<string, string>();
    const misses: string[] = [];
    for (let round = 0; round < 3; round++) {
      for (const tenant of tenants) {
        const r = await ask(tenant, `${tenant} asks question number ${round}`);
        if (round === 0) {
          // Its first request: nothing of this tenant is cached anywhere, whatever the others sent.
          expect(r.cached).toBe(0);
          home.set(tenant, r.worker);
        } else if (r.cached < 500 || r.worker !== home.get(tenant)) {
          misses.push(`${tenant} round ${round}: ${r.cached}/${r.prompt} on ${r.worker}`);
        }
      }
    }
    expect(misses).toEqual([]);
    // A tenant's prompt is never predicted where only another tenant's identical one is cached, so the
    // first requests do not all pile onto the worker that happened to get the first one.
    expect(new Set(home.values()).size).toBe(2);
  });
});
