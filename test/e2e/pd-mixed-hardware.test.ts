/**
 * End to end through a real Envoy, in P/D mode: a prefill pool of mixed hardware. One prefill worker
 * computes six times slower than the other. The router runs every prefill leg itself, so each leg's
 * duration teaches that worker's pace (load/timing-estimates.ts), and the prefill pool's cost model
 * (cache_aware, the default prefill policy) then sends the legs one at a time to the fast worker,
 * where two idle workers scored alike would alternate. Ends with every load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { FLEET_PACE_FORGET_MS } from '../support/mixed-fleet.js';
import { adminJson, expectAllLoadsZero } from '../support/router-fixture.js';
import { postThrough } from '../support/stack.js';

let s: PdStack;
beforeAll(async () => {
  s = await startPdStack({
    prefill: 2,
    decode: 1,
    // Prefill worker 0 the slow one; ~200-token prompts: fast ~12 ms per leg, slow ~70 ms.
    prefillSim: (i) => ({ timeScale: i === 0 ? 6 : 1, timing: { overheadMs: 2, prefillMsPerToken: 0.05 } }),
    // The production default for the prefill pool (the P/D test stack's is round robin).
    router: { prefillPolicy: 'cache_aware', costWorkerPaceForgetMs: FLEET_PACE_FORGET_MS },
  });
});
afterAll(async () => {
  await s?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(s.router);
});

async function chat(i: number): Promise<void> {
  const content = `question ${i} ${'y'.repeat(i % 5)}: ` + `about item ${i}. `.repeat(50);
  const body = { model: 'm', messages: [{ role: 'user', content }], max_tokens: 2 };
  const answer = await postThrough(s, body, '/v1/chat/completions');
  expect(answer.status, answer.text).toBe(200);
}

/** The prefill workers' paces on /workers (slow, fast). */
async function paces(slow: string, fast: string): Promise<[number, number]> {
  const view = (
    await adminJson<Array<{ role: string; url: string; estimates: { pace: number } }>>(s.router, '/workers')
  ).body;
  const pace = (url: string) => view.find((w) => w.role === 'prefill' && w.url === url)!.estimates.pace;
  return [pace(slow), pace(fast)];
}

describe('a prefill pool of mixed hardware (P/D)', () => {
  it('sends the prefill legs to the faster prefill worker once it has seen both', async () => {
    const [slow, fast] = s.prefill;
    // Learning as mixed-fleet.ts `learnPaces` does: one leg at a time stops trying the slow worker as
    // soon as its pace reads past the dead band (often by a few hundredths), an edge too close for a
    // test of where single legs go; bursts, as real traffic has, give it legs to learn from until it
    // reads at least 1.1 and above the fast one.
    let sent = 0;
    for (; sent < 40; sent++) await chat(sent);
    for (let burst = 0; ; burst++) {
      const [sp, fp] = await paces(slow!.url, fast!.url);
      if (sp >= 1.1 && sp > fp) break;
      expect(burst, `paces after ${burst} bursts: slow ${sp}, fast ${fp}`).toBeLessThan(10);
      await Promise.all(Array.from({ length: 24 }, (_, k) => chat(sent + k)));
      sent += 24;
    }
    const before = [slow!.records.length, fast!.records.length];
    for (let i = sent; i < sent + 10; i++) await chat(i);
    expect([slow!.records.length - before[0]!, fast!.records.length - before[1]!]).toEqual([0, 10]);
    const [sp, fp] = await paces(slow!.url, fast!.url);
    // /workers: the fast one at its pool's pace or below (its legs now make the pool's estimate), the
    // slow one above it.
    expect(fp).toBeLessThanOrEqual(1);
    expect(sp).toBeGreaterThan(fp);
  });
});
