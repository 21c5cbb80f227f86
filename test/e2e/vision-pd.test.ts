/**
 * Vision chats in P/D mode through a real Envoy 1.40: the router runs each request's prefill leg
 * itself, with the image in it, on the prefill worker the cache-aware policy picks; the image
 * weighs its tokens there as in regular mode (request/media-tokens.ts), so a chat's next prefill
 * runs where its image is cached, and the decode worker streams the answer. Every load is back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { pngDataUrl } from '../support/image-data-url.js';

let s: PdStack;
beforeAll(async () => {
  s = await startPdStack({ prefill: 2, decode: 1, router: { prefillPolicy: 'cache_aware' } });
});
afterAll(async () => s?.close());
afterEach(async () => expectAllLoadsZero(s.router));

async function ask(messages: unknown[]): Promise<string> {
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages, max_tokens: 4, stream: true }),
  });
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toContain('data: [DONE]');
  return text;
}

describe('vision chats in P/D mode', () => {
  it("prefills each chat's follow-up where its image is cached, and decodes it on the decode worker", async () => {
    const chats = [0, 1].map((c) => [
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: pngDataUrl(1536, 1536, `chat ${c}`) } },
          { type: 'text', text: `Chat ${c}: what is on the whiteboard?` },
        ],
      },
    ]);
    for (const chat of chats) await ask(chat);
    for (const [c, chat] of chats.entries()) {
      chat.push({ role: 'assistant', content: 'Equations.' } as never);
      chat.push({ role: 'user', content: `Chat ${c}: which one is circled?` } as never);
      await ask(chat);
    }
    // Each follow-up's prefill leg ran where its chat's first one did, with the image (55 x 55 = 3,025
    // tokens) cached there.
    // The prefill leg whose last message asks `text` (a follow-up's body repeats the first question).
    const legOf = (text: string) => {
      const asks = (body: unknown) =>
        JSON.stringify(
          (body as { messages?: Array<{ content: unknown }> }).messages?.at(-1)?.content,
        ).includes(text);
      for (const p of s.prefill) {
        const r = p.records.find((x) => asks(x.body));
        if (r !== undefined) return { worker: p.url, r };
      }
      throw new Error(`no prefill leg for ${text}`);
    };
    const firsts = [0, 1].map((c) => legOf(`Chat ${c}: what is on the whiteboard?`));
    for (const c of [0, 1]) {
      const follow = legOf(`Chat ${c}: which one is circled?`);
      expect(follow.worker).toBe(firsts[c]!.worker);
      expect(follow.r.promptTokens).toBeGreaterThan(3_025);
      expect(follow.r.cachedTokens / follow.r.promptTokens).toBeGreaterThan(0.9);
    }
    expect(s.decode[0]!.records).toHaveLength(4);
    expect(await metricsText(s.router)).toContain('vllm_router_media_parts_total{size="read"} 4');
  });
});
