/**
 * End to end through a real Envoy: a request that makes vLLM run several sequences (parallel sampling
 * `n`, as RL rollouts and best-of-n ask; a batched completions prompt) weighs them all on its worker,
 * as the worker itself counts them (vLLM splits it into one engine request per sequence).
 *
 * - A rollout of n = 16 counts 16 on its worker in the router's load (the gauge a platform team
 *   watches), equal to what the worker's /metrics report running, and the router does not mistake
 *   its own rollout's sequences for load from elsewhere.
 * - A batched completions prompt of 3 prompts with n = 2 counts 6.
 * - Without scraped metrics (in-flight counts only: a worker whose /metrics the router cannot read,
 *   or the moment between two scrapes), plain chats sent while a rollout runs go to the other worker.
 * Every test ends with all loads back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Config } from '../../src/config.js';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Simulator } from '../../src/sim/simulator.js';

/** A stack of 2 simulators with real pacing: 30 ms per decode step, so a long answer runs until aborted. */
function stackOf(router: Partial<Config>): { get(): Stack } {
  let stack: Stack | undefined;
  beforeAll(async () => {
    stack = await startStack({
      workers: 2,
      sim: { timeScale: 1, timing: { baseItlMs: 30, overheadMs: 1 } },
      router: { policy: 'cache_aware', decisionHeader: true, ...router },
    });
  });
  afterAll(async () => {
    await stack?.close();
  });
  afterEach(async () => {
    await expectAllLoadsZero(stack!.router);
    await Promise.all(stack!.sims.map((s) => s.waitForIdle()));
  });
  return { get: () => stack! };
}

interface WorkerInfo {
  url: string;
  load: number;
  loadSample: { running?: number; waiting?: number; localAtSample: number } | null;
  routingLoad: { source: string; ahead: number; foreignShare: number };
}

const workerView = async (stack: Stack, url: string): Promise<WorkerInfo> =>
  (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body.find((w) => w.url === url)!;

const decidedWorker = (res: Response): string =>
  /worker=(\S+?);/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '';

/** Starts a long streamed generation; resolves once its response has begun (the worker is known). */
async function start(
  stack: Stack,
  path: string,
  body: Record<string, unknown>,
): Promise<{ sim: Simulator; stop(): Promise<void> }> {
  const ac = new AbortController();
  const res = await fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', max_tokens: 2000, stream: true, ...body }),
    signal: ac.signal,
  });
  expect(res.status).toBe(200);
  const url = decidedWorker(res);
  const sim = stack.sims.find((s) => s.url === url)!;
  expect(sim, `decision header names a worker: ${url}`).toBeDefined();
  const reading = res.text().catch(() => undefined);
  return {
    sim,
    async stop() {
      ac.abort();
      await reading;
    },
  };
}

const rolloutBody = {
  messages: [{ role: 'user', content: 'Solve: 17 * 23 = ? Think step by step.' }],
  n: 16,
  temperature: 1,
};

async function chat(stack: Stack, content: string): Promise<string> {
  const body = { model: 'sim-model', messages: [{ role: 'user', content }], max_tokens: 4, stream: true };
  const r = await postThrough(stack, body, '/v1/chat/completions');
  expect(r.status).toBe(200);
  return r.worker;
}

describe('requests of several sequences, with scraped /metrics', () => {
  // loadStaleMs: a scrape gap on a starved machine must not turn the view back to in-flight counts.
  const s = stackOf({ scrapeIntervalMs: 50, loadStaleMs: 60_000 });

  it("counts a rollout's 16 sequences on its worker, as the worker does, all of them its own", async () => {
    const stack = s.get();
    const rollout = await start(stack, '/v1/chat/completions', rolloutBody);
    try {
      const { sim } = rollout;
      expect(stack.load(sim)).toBe(16);
      // The worker's own report, scraped: 16 running, and the router counted 16 of its own when it
      // sent that scrape, so none of them reads as load from elsewhere.
      let view: WorkerInfo | undefined;
      await waitFor(
        async () => {
          view = await workerView(stack, sim.url);
          return view.loadSample?.running === 16;
        },
        { timeoutMs: 10_000, message: 'a scrape showing the rollout running' },
      );
      expect(view).toMatchObject({
        load: 16,
        loadSample: { localAtSample: 16 },
        routingLoad: { source: 'scraped', ahead: 16 },
      });
      expect(view!.routingLoad.foreignShare).toBeLessThan(0.1);
      const metrics = await metricsText(stack.router);
      expect(metrics).toMatch(new RegExp(`vllm_router_worker_load\\{[^}]*worker="${sim.url}"[^}]*\\} 16\\n`));
    } finally {
      await rollout.stop();
    }
  });

  it('counts a batched completions prompt as its prompts times n', async () => {
    const stack = s.get();
    const batch = await start(stack, '/v1/completions', { prompt: ['one', 'two', 'three'], n: 2 });
    try {
      expect(stack.load(batch.sim)).toBe(6);
      await waitFor(() => batch.sim.running() === 6, { timeoutMs: 10_000, message: 'six sequences running' });
    } finally {
      await batch.stop();
    }
  });
});

describe('requests of several sequences, in-flight counts only (--scrape-interval-ms 0)', () => {
  const s = stackOf({ scrapeIntervalMs: 0 });

  it('sends the chats that arrive while a rollout of 16 runs to the other worker', async () => {
    const stack = s.get();
    const rollout = await start(stack, '/v1/chat/completions', rolloutBody);
    try {
      const other = stack.sims.find((x) => x !== rollout.sim)!;
      // Eight chats at once: a one-sequence chat is better off beside 0-7 others than beside 16.
      const routed = await Promise.all(
        Array.from({ length: 8 }, (_, i) => chat(stack, `question ${i}: what is ${i} + ${i}?`)),
      );
      expect(routed).toEqual(Array(8).fill(other.url));
    } finally {
      await rollout.stop();
    }
  });
});
