/**
 * Vision requests through a real Envoy 1.40 with the default policy: vLLM hashes each image into its
 * prefix-cache block keys, so two requests that differ only in their image share no cache past it,
 * and the same image sent again is a hit. The routing text keys each image by what it is
 * (request/media-key.ts), so the router neither predicts a hit for another image nor loses the
 * conversation that holds this one. Every load is back to 0 after each test.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ workers: 4, router: { decisionHeader: true } });
});
afterAll(async () => stack.close());
afterEach(async () => expectAllLoadsZero(stack.router));

const INSTRUCTION = 'Describe this photograph for a visually impaired reader, in careful detail. '.repeat(30);
/** A data URL standing for one image (its bytes differ from every other seed's). */
const image = (seed: number) =>
  `data:image/png;base64,${Buffer.from(Array.from({ length: 30_000 }, (_, i) => (i * 31 + seed * 97) % 251)).toString('base64')}`;

async function ask(messages: unknown[]): Promise<{ decision: string; worker: string }> {
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages, max_tokens: 8 }),
  });
  expect(res.status).toBe(200);
  await res.json();
  const decision = res.headers.get('x-vllm-router-decision') ?? '';
  return { decision, worker: /worker=(\S+?);/.exec(decision)?.[1] ?? '' };
}

const turn = (seed: number) => ({
  role: 'user',
  content: [
    { type: 'image_url', image_url: { url: image(seed) } },
    { type: 'text', text: INSTRUCTION },
  ],
});

describe('vision requests (images in the prompt)', () => {
  it('predicts no hit for another image under the same text; a follow-up on the same image returns to it', async () => {
    const first = await ask([turn(1)]);
    expect(first.worker).not.toBe('');
    // Another image, the same instruction: nothing of it is cached anywhere (vLLM hashes the image).
    const other = await ask([turn(2)]);
    // (Only `user` and the part's type match where the first image went: under one KV block, no hit.)
    expect(other.decision).toContain('branch=low_match');
    const [uncached, prompt] = (/uncached=(\d+)\/(\d+)/.exec(other.decision) ?? []).slice(1).map(Number);
    expect(prompt).toBeGreaterThan(500);
    expect(uncached! / prompt!).toBeGreaterThan(0.95);
    // The first conversation goes on: its image and instruction are cached where it ran.
    const followUp = await ask([
      turn(1),
      { role: 'assistant', content: 'A harbour at dusk.' },
      { role: 'user', content: 'What colour is the boat?' },
    ]);
    expect(followUp.worker).toBe(first.worker);
    expect(followUp.decision).toContain('branch=cache_hit');
    const sim = stack.sims.find((s) => s.url === first.worker)!;
    const record = sim.records.find((r) => JSON.stringify(r.body).includes('What colour is the boat?'))!;
    expect(record.cachedTokens / record.promptTokens).toBeGreaterThan(0.5);
  });
});
