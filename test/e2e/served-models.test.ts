/**
 * End to end through a real Envoy: one router in front of a fleet that serves two models (two
 * simulated vLLM workers each). Each worker's scraped /metrics names its model (`model_name`), and a
 * request goes only to workers serving the model it names (workers/worker-pool.ts `candidatesFor`);
 * a name no worker is known to serve (a LoRA adapter, a second served name) is routed as before.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, waitAllScraped } from '../support/router-fixture.js';

let stack: Stack;
const MODELS = ['llama', 'llama', 'qwen', 'qwen'];

beforeAll(async () => {
  stack = await startStack({
    workers: 4,
    sim: (i) => ({ model: MODELS[i]!, timeScale: 1, timing: { baseItlMs: 5, overheadMs: 1 } }),
    router: { policy: 'cache_aware', scrapeIntervalMs: 50, decisionHeader: true },
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

async function complete(model: string, prompt: string): Promise<{ status: number; servedBy: string }> {
  const r = await postThrough(stack, { model, prompt, max_tokens: 4 });
  expect((JSON.parse(r.text) as { model?: string }).model).toBe(model);
  return { status: r.status, servedBy: r.worker };
}

const servers = (model: string): string[] =>
  stack.sims.filter((_, i) => MODELS[i] === model).map((s) => s.url);

describe('a fleet serving two models behind one router', () => {
  it('each request reaches only workers serving its model, spread over them', async () => {
    const results = await Promise.all(
      Array.from({ length: 24 }, (_, i) =>
        complete(i % 2 === 0 ? 'llama' : 'qwen', `${'abcdefghijklmnopqrstuvwx'[i]} question ${i}`).then(
          (r) => ({ ...r, model: i % 2 === 0 ? 'llama' : 'qwen' }),
        ),
      ),
    );
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(servers(r.model)).toContain(r.servedBy);
    }
    for (const model of ['llama', 'qwen']) {
      expect(new Set(results.filter((r) => r.model === model).map((r) => r.servedBy))).toEqual(
        new Set(servers(model)),
      );
    }
  });

  it('a model name no worker is known to serve is routed over the whole fleet, as before', async () => {
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        complete('some-adapter', `${'abcdefghijklmnop'[i]} adapter question`),
      ),
    );
    expect(new Set(results.map((r) => r.servedBy))).toEqual(new Set(stack.sims.map((s) => s.url)));
  });
});

describe('the other OpenAI endpoints in a fleet serving two models', () => {
  it("a JSON body's model sends /tokenize and /v1/responses to the workers serving it", async () => {
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) => {
        const model = i % 2 === 0 ? 'llama' : 'qwen';
        const [path, body] =
          i % 4 < 2
            ? ['/tokenize', { model, prompt: `tokenize me ${i}` }]
            : ['/v1/responses', { model, input: `respond ${i}`, max_output_tokens: 2 }];
        return postThrough(stack, body, path).then((r) => ({ ...r, model }));
      }),
    );
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(servers(r.model)).toContain(r.worker);
    }
  });

  it('a body that names no model, or is not JSON, is routed over the whole fleet and answered by a worker', async () => {
    const plain = async (i: number) => {
      const res = await fetch(`${stack.url}/tokenize`, {
        method: 'POST',
        headers: { 'content-type': 'text/plain' },
        body: `plain ${i}`,
      });
      await res.arrayBuffer();
      return /worker=([^;]+)/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1];
    };
    const servedBy = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        i % 2 === 0
          ? postThrough(stack, { prompt: `no model ${i}` }, '/tokenize').then((r) => r.worker)
          : plain(i),
      ),
    );
    // Every one reached a worker (which answered it): the router rejects nothing it does not parse.
    expect(new Set(servedBy)).toEqual(new Set(stack.sims.map((s) => s.url)));
  });
});
