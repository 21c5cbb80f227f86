/**
 * End to end through a real Envoy, P/D mode with two decode workers (vLLM's `kv_both`) and the
 * cache-aware policy on the decode pool: requests with parallel sampling go whole to a decode worker,
 * which prefills them itself, so the decode pool prices their prefill and its workers' prefix caches.
 * An RL trainer's groups on one task prompt stay on the decode worker that holds it. Ends with every
 * load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';

let s: PdStack;
beforeAll(async () => {
  s = await startPdStack({ decode: 2, decodeSim: { kvBoth: true }, router: { decodePolicy: 'cache_aware' } });
});
afterAll(async () => {
  await s?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(s.router);
});

const TASK = 'You are solving competition mathematics. Show every step, then box the answer. '.repeat(40);

describe('parallel sampling in P/D mode, decode pool cache_aware', () => {
  it("keeps a task prompt's groups on the decode worker that prefilled it", async () => {
    const before = s.decode.map((d) => d.records.length);
    for (let k = 0; k < 3; k++) {
      const res = await fetch(`${s.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'm',
          messages: [
            { role: 'system', content: TASK },
            { role: 'user', content: `Problem ${k}: find the sum of the first ${k + 10} primes.` },
          ],
          n: 2,
          max_tokens: 3,
        }),
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { choices: unknown[] }).choices).toHaveLength(2);
    }
    const served = s.decode.map((d, i) => d.records.slice(before[i]));
    expect(s.prefill[0]!.records).toHaveLength(0); // no prefill legs
    const holder = served.find((r) => r.length > 0)!;
    expect(holder).toHaveLength(3);
    // The second and third groups found the task prompt cached there.
    for (const r of holder.slice(1)) expect(r.cachedTokens).toBeGreaterThan(r.promptTokens / 2);
  });
});
