/**
 * End to end through a real Envoy: a fleet whose workers of one model were started with different
 * `--max-model-len` (the simulator's `maxModelLen`, on its /v1/models cards as vLLM's are). A request
 * longer than the short worker's length goes to the long one instead of getting the short one's 400;
 * short requests still use both; a request too long for every worker reaches one and gets vLLM's own
 * 400, which says by how much.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    // 4 characters per token in the simulators, as the router assumes before it learns the ratio.
    sim: (i) => ({ maxModelLen: i === 0 ? 2048 : 32768, cache: { charsPerToken: 4 } }),
    router: { policy: 'round_robin', modelsIntervalMs: 100, decisionHeader: true },
  });
  await waitFor(
    async () =>
      (await adminJson<Array<{ servedModels: unknown }>>(stack.router, '/workers')).body.every(
        (w) => w.servedModels !== null,
      ),
    { timeoutMs: 10_000, message: "every worker's model list read" },
  );
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

const complete = (chars: number, i: number, maxTokens = 4) =>
  postThrough(stack, { model: 'sim-model', prompt: `${i} ${'x'.repeat(chars)}`, max_tokens: maxTokens });

const fits = async (outcome: string): Promise<number> =>
  Number(
    new RegExp(`^vllm_router_context_fits_total\\{[^}]*outcome="${outcome}"[^}]*\\} (\\S+)$`, 'm').exec(
      await metricsText(stack.router),
    )?.[1] ?? 0,
  );

describe('context length (max_model_len per worker)', () => {
  it('a request longer than the short worker goes to the long one; short ones use both', async () => {
    const [short, long] = stack.sims as [Simulator, Simulator];
    const longRoutes: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await complete(12_000, i); // ~3,000 tokens: over 2,048, under 32,768
      expect(r.status, r.text).toBe(200);
      longRoutes.push(r.worker);
    }
    expect(longRoutes).toEqual(Array(6).fill(long.url));
    // prompt + max_tokens: ~1,500 + 1,000 tokens do not fit in 2,048 either.
    expect((await complete(6_000, 7, 1_000)).worker).toBe(long.url);
    expect(await fits('fitted')).toBe(7);

    const shortRoutes = new Set<string>();
    for (let i = 0; i < 6; i++) {
      const r = await complete(400, i);
      expect(r.status).toBe(200);
      shortRoutes.add(r.worker);
    }
    expect([...shortRoutes].sort()).toEqual([short.url, long.url].sort());
    expect(short.records.every((r) => r.status === undefined || r.status === 200)).toBe(true);
  });

  it("a request too long for every worker gets the worker's own 400, and is counted", async () => {
    const before = await fits('none_long_enough');
    const r = await complete(200_000, 1); // ~50,000 tokens
    expect(r.status).toBe(400);
    expect(r.text).toContain('maximum context length');
    expect(await fits('none_long_enough')).toBe(before + 1);
  });
});
