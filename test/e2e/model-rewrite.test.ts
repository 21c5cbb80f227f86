/**
 * End to end through a real Envoy: the endpoint picker's model-name rewrite. Two simulated vLLM
 * workers serve two versions of an adapter (`food-review-1`, `food-review-2`) and, as vLLM, answer a
 * model they do not serve with a 404. A gateway doing a canary sets `x-gateway-model-name-rewrite` on
 * some requests for `food-review`: those are served as the version it names, by the worker serving
 * it, streamed or not, an audio upload's form too; a request without the header keeps its model.
 * Ends with every load back to 0 and the simulators idle.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, waitAllScraped } from '../support/router-fixture.js';

let stack: Stack;
const MODELS = ['food-review-1', 'food-review-2'];

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    sim: (i) => ({ model: MODELS[i]!, strictModels: true, timeScale: 0 }),
    router: { scrapeIntervalMs: 50, decisionHeader: true },
  });
  // Every worker scraped once: the router knows what each serves.
  await waitAllScraped(stack.router);
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

async function chat(rewrite: string | undefined, stream: boolean) {
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      ...(rewrite === undefined ? {} : { 'x-gateway-model-name-rewrite': rewrite }),
    },
    body: JSON.stringify({
      model: 'food-review',
      messages: [{ role: 'user', content: 'Is the soup good?' }],
      max_tokens: 3,
      stream,
    }),
  });
  const text = await res.text();
  const decision = res.headers.get('x-vllm-router-decision') ?? '';
  return { status: res.status, text, worker: /worker=(\S+?);/.exec(decision)?.[1] ?? '' };
}

describe('x-gateway-model-name-rewrite', () => {
  it.each([false, true])('serves the request as the model the gateway names (stream: %s)', async (stream) => {
    const [v1, v2] = stack.sims;
    for (const [target, sim] of [
      ['food-review-2', v2!],
      ['food-review-1', v1!],
    ] as const) {
      for (let i = 0; i < 3; i++) {
        const r = await chat(target, stream);
        expect(r.status, r.text).toBe(200);
        expect(r.worker).toBe(sim.url);
        // The worker answered as the target model: it got the rewritten body.
        expect(r.text).toContain(`"model":"${target}"`);
      }
    }
  });

  it.each(['/v1/audio/transcriptions', '/v1/audio/translations'])(
    "%s: an audio upload is served as the model the gateway names (the form's model field)",
    async (path) => {
      // Audio bytes with line breaks and dashes, as real audio has.
      const audio = new Uint8Array(4096).map((_, i) => (i % 7 === 0 ? 0x0d : i % 5 === 0 ? 0x2d : i % 251));
      for (const [target, sim] of [
        ['food-review-2', stack.sims[1]!],
        ['food-review-1', stack.sims[0]!],
      ] as const) {
        const form = new FormData();
        form.append('file', new Blob([audio], { type: 'audio/wav' }), 'speech.wav');
        form.append('model', 'food-review');
        const res = await fetch(`${stack.url}${path}`, {
          method: 'POST',
          headers: { 'x-gateway-model-name-rewrite': target },
          body: form,
        });
        const text = await res.text();
        expect(res.status, text).toBe(200);
        expect(res.headers.get('x-vllm-router-decision')).toContain(`worker=${sim.url};`);
        expect(JSON.parse(text)).toEqual({ text: `${target} heard ${audio.length} bytes of audio` });
      }
    },
  );

  it('keeps the model of a request without the header (which these workers do not serve)', async () => {
    const r = await chat(undefined, false);
    expect(r.status).toBe(404);
    expect(r.text).toContain('The model `food-review` does not exist.');
  });
});
