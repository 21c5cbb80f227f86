/**
 * End to end through a real Envoy, on the approximate prefix tree (the default policy, no tokenizer):
 * batched completions prompts, as an evaluation harness sends them (a list of few-shot prompts, each a
 * task's preamble and one question). vLLM runs each prompt of the list as an engine request of its
 * own, and its prefix cache holds each prompt's own prefix; so does the router's tree
 * (SelectionInput.prompts). Before, the router matched and recorded the prompts joined, whose prefix
 * is the first prompt's alone: a batch listing the same tasks in another order matched nothing.
 *
 * - A batch of two tasks' prompts goes to a worker; the next batch, the same tasks in the other order,
 *   goes to the same worker, scored with both preambles cached (the decision header's `uncached`),
 *   and the worker reports them as cache hits.
 * Ends with every load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    router: { policy: 'cache_aware', decisionHeader: true },
  });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

/** A task's few-shot preamble: ~2,400 characters of its own. */
const preamble = (task: string): string =>
  Array.from({ length: 40 }, (_, i) => `${task} example ${i}: answer ${i * 7}. `).join('');

const batch = (prompt: string[]) => postThrough(stack, { model: 'sim-model', prompt, max_tokens: 2 });

describe('batched completions prompts (cache_aware, approximate tree)', () => {
  it('scores each prompt of a batch by its own prefix: another order of the same tasks is a hit', async () => {
    const [arith, geo] = [preamble('arithmetic'), preamble('geography')];
    const first = await batch([`${arith}Q: 1 + 1?`, `${geo}Q: capital of France?`]);
    expect(first.status).toBe(200);

    const next = await batch([`${geo}Q: capital of Peru?`, `${arith}Q: 2 + 3?`]);
    expect(next.status).toBe(200);
    expect(next.worker).toBe(first.worker);
    // The router's view: both preambles cached there, only the questions not.
    const [, uncached, prompt] = /uncached=(\d+)\/(\d+)/.exec(next.decision)!.map(Number);
    expect(uncached! * 10, next.decision).toBeLessThan(prompt!);
    // The worker's own: its prefix cache served both preambles.
    const usage = JSON.parse(next.text).usage as {
      prompt_tokens: number;
      prompt_tokens_details: { cached_tokens: number };
    };
    expect(usage.prompt_tokens_details.cached_tokens * 10).toBeGreaterThan(usage.prompt_tokens * 8);
  });
});
