/**
 * Cache-aware routing through a real Envoy, reference mode (`--cache-aware-mode per_request`):
 * requests that share a long prompt prefix stick to the worker that holds it, until that worker's live
 * load crosses both overload thresholds; then they spill to the least-loaded worker. (The default cost
 * mode is covered by load-aware-routing.test.ts.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    workers: 4,
    router: {
      policy: 'cache_aware',
      cacheAwareMode: 'per_request',
      balanceAbsThreshold: 2,
      balanceRelThreshold: 1.5,
      decisionHeader: true,
    },
  });
});
afterAll(async () => stack.close());

const SYSTEM = 'You are a meticulous assistant for the ACME support desk. '.repeat(20);

describe('cache-aware routing through Envoy', () => {
  it('sticks to the prefix owner until its load crosses the thresholds, then spills', async () => {
    const controllers: AbortController[] = [];
    const decisions: Array<{ branch: string; worker: string }> = [];
    // Every stream is held after its first event, so earlier requests are still in flight (holding
    // their load) when later ones are routed.
    const holds = stack.sims.map((s) => s.hold({ afterChunks: 1, count: 5 }));
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      controllers.push(ac);
      const res = await fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim-model',
          messages: [
            { role: 'system', content: SYSTEM },
            { role: 'user', content: `question number ${i}` },
          ],
          max_tokens: 200,
          stream: true,
        }),
        signal: ac.signal,
      });
      expect(res.status).toBe(200);
      const d = res.headers.get('x-vllm-router-decision') ?? '';
      decisions.push({
        branch: /branch=(\w+)/.exec(d)?.[1] ?? '',
        worker: /worker=(\S+)/.exec(d)?.[1] ?? '',
      });
      // Do not read the body: the stream stays in flight and holds its load.
    }
    const owner = decisions[0]!.worker;
    // 1st: empty tree -> least loaded; 2nd and 3rd: affinity (owner load 1, 2 <= mean + 2);
    // 4th: owner load 3 > mean*1.5 and > mean+2 -> yields; 5th: follows the best match among the
    // now two holders of the prefix, the least loaded of them.
    expect(decisions.map((d) => d.branch)).toEqual([
      'low_match',
      'cache_hit',
      'cache_hit',
      'imbalance',
      'cache_hit',
    ]);
    expect(decisions.slice(0, 3).every((d) => d.worker === owner)).toBe(true);
    expect(decisions[3]!.worker).not.toBe(owner);
    expect(decisions[4]!.worker).toBe(decisions[3]!.worker);
    const loads = stack.router.workers().map((w) => w.load);
    expect(loads.reduce((a, b) => a + b, 0)).toBe(5);
    for (const ac of controllers) ac.abort();
    await waitFor(() => stack.router.workers().every((w) => w.load === 0));
    for (const h of holds) h.release();
    await expectAllLoadsZero(stack.router);
  });
});
