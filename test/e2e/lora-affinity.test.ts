/**
 * End to end through a real Envoy: requests for LoRA adapters (vLLM `--enable-lora --max-loras 1`,
 * simulated) go where their adapter already runs or a slot is free (routing/lora-affinity.ts).
 *
 * - Two adapters requested at once over four workers: no worker is handed both in the same wave (one
 *   of them would wait there for the other's requests to drain while a worker with room idles).
 * - A worker whose only slot is taken by an adapter of DIRECT traffic (clients that bypass the
 *   router; only its /metrics shows it) gets no request for another adapter (the other workers carry
 *   as much direct load, of the base model); base-model requests are not filtered.
 * Both end with every load back to 0 and the simulators idle.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 4,
    sim: {
      model: 'base',
      lora: { maxLoras: 1, loadMs: 20 },
      timeScale: 1,
      timing: { baseItlMs: 20, overheadMs: 1 },
    },
    // loadStaleMs: a scrape gap on a starved machine must not drop the LoRA samples mid-test.
    router: { policy: 'cache_aware', scrapeIntervalMs: 50, loadStaleMs: 60_000, decisionHeader: true },
  });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

async function complete(model: string, prompt: string): Promise<{ worker: string; decision: string }> {
  const r = await postThrough(stack, { model, prompt, max_tokens: 8, stream: true });
  expect(r.status).toBe(200);
  return { worker: r.worker, decision: r.decision };
}

/** The models each simulator served among its records from index `from[i]` on. */
function modelsSince(from: readonly number[]): Map<string, Set<string>> {
  const out = new Map<string, Set<string>>();
  stack.sims.forEach((s, i) => {
    const models = new Set<string>();
    for (const r of s.records.slice(from[i])) models.add((r.body as { model: string }).model);
    out.set(s.url, models);
  });
  return out;
}

interface WorkerInfo {
  url: string;
  loadSample: { running?: number; lora?: { running: string[] } } | null;
}

describe('LoRA affinity (cache_aware cost mode, vllm:lora_requests_info)', () => {
  it('two adapters at once over four workers: no worker gets both in one wave', async () => {
    for (let wave = 0; wave < 4; wave++) {
      const from = stack.sims.map((s) => s.records.length);
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) =>
          complete(i % 2 === 0 ? 'sql' : 'chat', `wave ${wave} question ${i}: what is ${i} + ${wave}?`),
        ),
      );
      for (const [url, models] of modelsSince(from)) {
        expect([url, models.size <= 1 ? 'one adapter' : [...models].join('+')]).toEqual([url, 'one adapter']);
      }
      for (const r of results) expect(r.decision).toMatch(/lora=(active|free_slot)/);
    }
  });

  it("a worker whose only slot runs another adapter's direct traffic gets none of this adapter's requests", async () => {
    // Direct clients (not through the router) keep one request running on every worker, equal load
    // everywhere: an adapter job on the first worker, base-model jobs on the others.
    const [busy, ...others] = stack.sims as [Simulator, ...Simulator[]];
    const ac = new AbortController();
    const direct = (sim: Simulator, model: string): void =>
      void fetch(`${sim.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'batch job', max_tokens: 100_000, stream: true }),
        signal: ac.signal,
      })
        .then((res) => res.body?.pipeTo(new WritableStream(), { signal: ac.signal }))
        .catch(() => undefined);
    direct(busy, 'batch');
    for (const s of others) direct(s, 'base');
    try {
      await waitFor(() => stack.sims.every((s) => s.running() === 1), {
        timeoutMs: 10_000,
        message: 'direct load running',
      });
      await waitFor(
        async () => {
          const view = (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body;
          return (
            view.every((w) => (w.loadSample?.running ?? 0) === 1) &&
            view.find((w) => w.url === busy.url)?.loadSample?.lora?.running.includes('batch') === true
          );
        },
        { timeoutMs: 10_000, message: "a scrape showing the direct traffic's adapter" },
      );
      // At once, with prompts that share nothing: on load alone they would spread over all four.
      const sql = await Promise.all(
        Array.from({ length: 12 }, (_, i) => complete('sql', `${'abcdefghijkl'[i]} question ${i}`)),
      );
      for (const { decision } of sql) expect(decision).toContain('lora=');
      expect(sql.map((r) => r.worker)).not.toContain(busy.url);
      // Requests for the base model need no slot: the filter leaves them alone (the decision header
      // names no adapter state and no worker skipped for one).
      for (let i = 0; i < 4; i++) {
        const { decision } = await complete('base', `base question ${i}`);
        expect(decision).toContain('policy=cache_aware');
        expect(decision).not.toContain('lora');
      }
    } finally {
      ac.abort();
    }
  });
});
