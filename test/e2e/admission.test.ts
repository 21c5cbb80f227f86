/**
 * End to end through a real Envoy: request objectives (`x-gateway-inference-objective`) and shedding.
 * The router knows three objectives: `batch` (priority -1, sheddable), `realtime` (5) and the default
 * (an absent header, priority 0). Both workers are kept saturated by DIRECT clients (more requests
 * waiting than --saturation-waiting), a load only their scraped /metrics shows:
 * - a batch request gets a JSON 429 `pool_saturated` from the router, and no worker sees it;
 * - a realtime request and one without an objective are still routed (they queue on a worker);
 * - once one worker has room again, batch requests are routed there.
 * Ends with every load back to 0, the direct clients aborted and the simulators idle.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { directLoad, SATURABLE_SIM } from '../support/direct-load.js';
import { objectiveChat } from '../support/objective-chat.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    sim: SATURABLE_SIM,
    // loadStaleMs: a scrape gap on a starved machine must not make the samples stale mid-test
    // (a stale sample counts as no room: staleness has its own unit tests).
    router: {
      scrapeIntervalMs: 50,
      loadStaleMs: 60_000,
      decisionHeader: true,
      objective: ['batch=-1', 'realtime=5'],
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

const chat = (objective: string | undefined, signal?: AbortSignal): Promise<Response> =>
  objectiveChat(stack.url, objective, signal);

interface WorkerInfo {
  url: string;
  loadSample: { waiting?: number } | null;
}

const gauge = async (): Promise<string | undefined> =>
  /vllm_router_pool_saturated\{role="regular"\} (\d)/.exec(await metricsText(stack.router))?.[1];

describe('request objectives: sheddable requests while the workers are saturated', () => {
  it('answers a batch request 429 while every worker is saturated, and routes the others', async () => {
    const [a, b] = stack.sims as [Simulator, Simulator];
    const directA = await directLoad(a, 10);
    const directB = await directLoad(b, 10);
    const admitted = new AbortController();
    try {
      await waitFor(async () => (await gauge()) === '1', {
        timeoutMs: 10_000,
        message: 'a scrape showing both workers saturated',
      });
      const seenBefore = a.inFlight() + b.inFlight();

      const shed = await chat('batch');
      expect(shed.status).toBe(429);
      expect(shed.headers.get('content-type')).toContain('application/json');
      // OpenAI's clients wait this long before they retry.
      expect(shed.headers.get('retry-after')).toBe('1');
      const body = (await shed.json()) as { error: { code: string; type: string; message: string } };
      expect(body.error.code).toBe('pool_saturated');
      expect(body.error.message).toContain('objective "batch" (priority -1)');
      // No worker saw it.
      expect(a.inFlight() + b.inFlight()).toBe(seenBefore);

      // A realtime request and one without an objective are routed: they wait in a worker's queue.
      const pending = [chat('realtime', admitted.signal), chat(undefined, admitted.signal)].map((p) =>
        p.catch(() => undefined),
      );
      await waitFor(() => a.inFlight() + b.inFlight() === seenBefore + 2, {
        timeoutMs: 10_000,
        message: 'the realtime and default requests reached the workers',
      });
      expect(stack.router.workers().reduce((n, w) => n + w.load, 0)).toBe(2);
      admitted.abort();
      await Promise.all(pending);

      const metrics = await metricsText(stack.router);
      expect(metrics).toMatch(/vllm_router_requests_shed_total\{objective="batch",role="regular"\} 1\b/);
      expect(metrics).toMatch(/vllm_router_requests_total\{route="chat",outcome="shed"\} 1\b/);
    } finally {
      admitted.abort();
      directA.abort();
      directB.abort();
    }
    await waitFor(() => a.inFlight() + b.inFlight() === 0, {
      timeoutMs: 10_000,
      message: 'direct load aborted',
    });
  });

  it('routes batch requests again once a worker has room', async () => {
    const [a, b] = stack.sims as [Simulator, Simulator];
    // Samples taken after the last test's direct load ended (an older one would still show it).
    await waitFor(
      async () =>
        (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body.every(
          (w) => w.loadSample?.waiting === 0,
        ),
      { timeoutMs: 10_000, message: 'both workers idle in their samples' },
    );
    const directA = await directLoad(a, 10);
    try {
      // A scrape shows a saturated; b idles, so the pool has room and the batch requests go to b.
      await waitFor(
        async () => {
          const view = await adminJson<WorkerInfo[]>(stack.router, '/workers');
          return (view.body.find((w) => w.url === a.url)?.loadSample?.waiting ?? 0) > 5;
        },
        { timeoutMs: 10_000, message: 'a scrape showing a saturated' },
      );
      expect(await gauge()).toBe('0');
      for (let i = 0; i < 3; i++) {
        const res = await chat('batch');
        expect(res.status).toBe(200);
        await res.text();
        expect(res.headers.get('x-vllm-router-decision')).toContain(`worker=${b.url}`);
      }
    } finally {
      directA.abort();
    }
    await waitFor(() => a.inFlight() === 0, { timeoutMs: 10_000, message: 'direct load aborted' });
  });
});

describe('request objectives in a fleet whose workers export no /metrics', () => {
  // SGLang without --enable-metrics, or vLLM behind a proxy that forwards only /v1: /metrics is 404,
  // inference works. Nothing says such a worker is saturated: a sheddable request must be routed.
  let bare: Stack;
  beforeAll(async () => {
    bare = await startStack({
      workers: 2,
      sim: { metrics: false },
      router: { scrapeIntervalMs: 50, objective: ['batch=-1'] },
    });
  });
  afterAll(async () => {
    await bare?.close();
  });

  it('routes batch requests instead of shedding them as if every worker were saturated', async () => {
    // Ready: warm-up waits until every worker's /metrics was tried (here: a 404 each).
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${bare.router.adminPort}/readyz`)).status === 200,
      { timeoutMs: 10_000, message: 'router ready' },
    );
    for (let i = 0; i < 3; i++) {
      const res = await objectiveChat(bare.url, 'batch');
      const body = await res.text();
      expect(res.status, body).toBe(200);
    }
    const metrics = await metricsText(bare.router);
    expect(metrics).not.toMatch(/vllm_router_requests_shed_total\{[^}]*\} [1-9]/);
    expect(metrics).toMatch(/vllm_router_pool_saturated\{role="regular"\} 0/);
    await waitFor(() => bare.sims.every((s) => s.inFlight() === 0), {
      timeoutMs: 10_000,
      message: 'all done',
    });
    await expectAllLoadsZero(bare.router);
  });
});
