/**
 * Two simulated workers of mixed hardware behind real Envoy and the router: worker 0 runs every
 * duration six times slower (an older GPU, a GPU shared with another job). ~200-token prompts take
 * the fast one ~12 ms to a first token, the slow one ~70 ms. The router runs the default policy
 * (cache_aware, cost mode), learns from every response (streamed or not), and names its choice in a
 * header.
 */
import { expect } from 'vitest';
import type { RouterDeps } from '../../src/router.js';
import { adminJson } from './router-fixture.js';
import { postThrough, startStack, type Stack } from './stack.js';

export async function startMixedFleet(routerDeps?: Omit<RouterDeps, 'logger'>): Promise<Stack> {
  return startStack({
    workers: 2,
    sim: (i) => ({
      timeScale: i === 0 ? 6 : 1,
      timing: { overheadMs: 2, prefillMsPerToken: 0.05, baseItlMs: 5 },
    }),
    // Every response teaches the estimates (the default watches one in 8 per worker).
    router: { policy: 'cache_aware', decisionHeader: true, responseBodySample: 1 },
    ...(routerDeps !== undefined ? { routerDeps } : {}),
  });
}

/**
 * A completion of a prompt nobody holds (~200 tokens), through Envoy, streamed unless `stream` is
 * false; the worker that served it.
 */
export async function uniqueRequest(stack: Stack, i: number, stream = true): Promise<string> {
  const prompt = `request ${i} ${'x'.repeat(i % 7)}: ` + `tell me about item ${i}. `.repeat(36);
  const answer = await postThrough(stack, { model: 'sim-model', prompt, max_tokens: 2, stream });
  expect(answer.status).toBe(200);
  return answer.worker;
}

/** The worker's pace on /workers now. */
export async function paceOnWorkers(stack: Stack, url: string): Promise<number> {
  const view = (
    await adminJson<Array<{ url: string; estimates: { pace: number } }>>(stack.router, '/workers')
  ).body;
  return view.find((w) => w.url === url)!.estimates.pace;
}
