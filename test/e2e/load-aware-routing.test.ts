/**
 * End to end through a real Envoy: the default policy (cache_aware, cost mode) routes by the load the
 * workers themselves report on /metrics, blended with the router's own in-flight requests.
 *
 * - A worker kept busy by DIRECT traffic (clients that bypass the router) is avoided: only its scraped
 *   /metrics shows that load.
 * - 60 identical concurrent chat requests with one short prompt spread over both workers (a tiny shared
 *   prompt saves ~1 ms of prefill; a queue costs more).
 * Both end with every load back to 0, the direct clients aborted and the simulators idle.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { directLoad } from '../support/direct-load.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    // Real pacing so requests overlap: 30 ms per token.
    sim: { timeScale: 1, timing: { baseItlMs: 30, overheadMs: 1 } },
    // Every response body watched, so every response teaches the timing estimates (asserted below;
    // the default watched share, one streamed response in 8, is test/e2e/response-body-skip.test.ts's).
    // loadStaleMs: a scrape gap of over a second on a starved machine must not turn the routing back
    // to in-flight counts mid-test (staleness has its own unit tests).
    router: {
      policy: 'cache_aware',
      scrapeIntervalMs: 50,
      loadStaleMs: 60_000,
      decisionHeader: true,
      responseBodySample: 1,
    },
  });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

interface WorkerInfo {
  url: string;
  loadSample: { running?: number; waiting?: number; ageMs: number } | null;
  routingLoad: { source: string; ahead: number; foreignShare: number };
  estimates: { ttftSamples: number; interChunkMs: number };
}

const workersView = async () => (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body;

async function chat(content: string, maxTokens: number): Promise<{ worker: string; decision: string }> {
  const res = await fetch(`${stack.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      messages: [{ role: 'user', content }],
      max_tokens: maxTokens,
      stream: true,
    }),
  });
  expect(res.status).toBe(200);
  await res.text();
  const decision = res.headers.get('x-vllm-router-decision') ?? '';
  const worker = /worker=(\S+?);/.exec(decision)?.[1] ?? '';
  return { worker, decision };
}

describe('load-aware routing (cache_aware cost mode, scraped /metrics)', () => {
  it('avoids a worker made busy by direct traffic the router never saw', async () => {
    const [busy, idle] = stack.sims as [Simulator, Simulator];
    const direct = await directLoad(busy, 8);
    try {
      // Wait for a scrape that shows the direct load (an event the router exposes on /workers).
      await waitFor(
        async () => {
          const w = (await workersView()).find((x) => x.url === busy.url);
          return (w?.loadSample?.running ?? 0) >= 8 && w?.routingLoad.source === 'scraped';
        },
        { timeoutMs: 10_000, message: 'a scrape showing the direct load' },
      );
      const routed: string[] = [];
      for (let i = 0; i < 10; i++) {
        const { worker, decision } = await chat(`question ${i}: what is ${i} + ${i}?`, 3);
        expect(decision).toContain('policy=cache_aware');
        expect(decision).toContain('load=scraped');
        routed.push(worker);
      }
      expect(routed).toEqual(Array(10).fill(idle.url));
      // The router's own view: it sent nothing to the busy worker, which is loaded anyway.
      const view = await workersView();
      const busyView = view.find((x) => x.url === busy.url)!;
      expect(busyView.routingLoad.ahead).toBeGreaterThanOrEqual(8);
      // ... and known as load from elsewhere: most of the busy worker's (a moving average over a few
      // scrapes), little of the idle one's.
      await waitFor(
        async () =>
          ((await workersView()).find((x) => x.url === busy.url)?.routingLoad.foreignShare ?? 0) > 0.5,
        { timeoutMs: 10_000, message: "the busy worker's load reported as foreign" },
      );
      expect(view.find((x) => x.url === idle.url)!.routingLoad.foreignShare).toBeLessThan(0.5);
      expect(view.find((x) => x.url === idle.url)!.estimates.ttftSamples).toBeGreaterThanOrEqual(10);
      const metrics = await metricsText(stack.router);
      expect(metrics).toMatch(
        new RegExp(`vllm_router_worker_scraped_running\\{[^}]*worker="${busy.url}"[^}]*\\} ([89]|\\d\\d)`),
      );
      expect(metrics).toContain('vllm_router_worker_estimate{');
      expect(metrics).toMatch(
        new RegExp(`vllm_router_worker_foreign_share\\{[^}]*worker="${busy.url}"[^}]*\\} (0\\.[5-9]|1)`),
      );
    } finally {
      direct.abort();
    }
    await waitFor(() => busy.inFlight() === 0, { timeoutMs: 10_000, message: 'direct load aborted' });
  });

  it('spreads 60 identical concurrent chat requests with one short prompt over both workers', async () => {
    // Both workers idle as the router sees them (the next scrapes after the previous test's direct load).
    await waitFor(async () => (await workersView()).every((w) => w.routingLoad.ahead === 0), {
      message: 'both workers idle in the routing view',
      timeoutMs: 10_000,
    });
    const results = await Promise.all(Array.from({ length: 60 }, () => chat('Hi! Who are you?', 4)));
    const counts = new Map<string, number>();
    for (const r of results) counts.set(r.worker, (counts.get(r.worker) ?? 0) + 1);
    const perWorker = stack.sims.map((s) => counts.get(s.url) ?? 0);
    expect(perWorker.reduce((a, b) => a + b, 0)).toBe(60);
    // Neither worker idles while the other queues: both take at least a third of the burst.
    for (const n of perWorker) expect(n, JSON.stringify(perWorker)).toBeGreaterThanOrEqual(20);
  });
});

describe('load-aware routing with kv_aware when no exact KV data answers (its cache_aware fallback)', () => {
  // kv_aware without KV events for these workers (none configured, a worker that publishes none, a
  // request the tokenizer cannot render): the decision is cache_aware's, which must read the same
  // scraped load as the default policy does.
  let kv: Stack;
  beforeAll(async () => {
    kv = await startStack({
      workers: 2,
      sim: { timeScale: 1, timing: { baseItlMs: 30, overheadMs: 1 } },
      router: { policy: 'kv_aware', scrapeIntervalMs: 50, loadStaleMs: 60_000, decisionHeader: true },
    });
  });
  afterAll(async () => {
    await kv?.close();
  });

  const ask = async (i: number): Promise<string> => {
    const res = await fetch(`${kv.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: `question ${i}: what is ${i} + ${i}?` }],
        max_tokens: 3,
        stream: true,
      }),
    });
    expect(res.status).toBe(200);
    await res.text();
    return /worker=(\S+?);/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '';
  };

  it('avoids a worker made busy by direct traffic the router never saw, even one that holds the prefix', async () => {
    // The first question lands on one worker, whose prefix cache (the router's picture of it) now
    // holds the questions' common opening: that worker is then kept busy by direct clients.
    const first = await ask(0);
    const busy = kv.sims.find((s) => s.url === first) as Simulator;
    const idle = kv.sims.find((s) => s !== busy) as Simulator;
    const direct = await directLoad(busy, 8);
    try {
      await waitFor(
        async () =>
          (await adminJson<WorkerInfo[]>(kv.router, '/workers')).body.some(
            (w) =>
              w.url === busy.url && (w.loadSample?.running ?? 0) >= 8 && w.routingLoad.source === 'scraped',
          ),
        { timeoutMs: 10_000, message: 'a scrape showing the direct load' },
      );
      const routed: string[] = [];
      for (let i = 1; i <= 10; i++) routed.push(await ask(i));
      expect(routed).toEqual(Array(10).fill(idle.url));
    } finally {
      direct.abort();
    }
    await waitFor(() => busy.inFlight() === 0, { timeoutMs: 10_000, message: 'direct load aborted' });
    await expectAllLoadsZero(kv.router);
    await Promise.all(kv.sims.map((s) => s.waitForIdle()));
  });
});
