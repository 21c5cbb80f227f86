/**
 * End to end through a real Envoy: flow control (`--flow-control`). Both workers are kept saturated by
 * direct clients (more requests waiting than --saturation-waiting), a load only their scraped /metrics
 * shows. Requests that arrive meanwhile wait in the router: no worker sees them, Envoy waits for the
 * ext_proc reply. A client that gives up while held leaves nothing behind. Once the direct load ends,
 * the held requests are served. Ends with every load back to 0 and the simulators idle.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText, waitAllScraped } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { directLoad, SATURABLE_SIM } from '../support/direct-load.js';
import { objectiveChat } from '../support/objective-chat.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    sim: SATURABLE_SIM,
    router: {
      scrapeIntervalMs: 50,
      loadStaleMs: 60_000,
      flowControl: true,
      objective: ['batch=-1'],
    },
  });
});
afterAll(async () => {
  await stack?.close();
});

const metric = async (re: RegExp): Promise<number | undefined> => {
  const m = re.exec(await metricsText(stack.router));
  return m ? Number(m[1]) : undefined;
};
const held = (): Promise<number | undefined> => metric(/^vllm_router_flow_held (\d+)/m);

describe('flow control: requests wait in the router while every worker is saturated', () => {
  it('holds requests (no worker sees them), drops one whose client gives up, and serves the rest once there is room', async () => {
    const [a, b] = stack.sims as [Simulator, Simulator];
    const direct = [await directLoad(a, 10), await directLoad(b, 10)];
    const gaveUp = new AbortController();
    let responses: Promise<Response>[];
    try {
      await waitFor(async () => (await metric(/vllm_router_pool_saturated\{role="regular"\} (\d)/)) === 1, {
        timeoutMs: 10_000,
        message: 'a scrape showing both workers saturated',
      });
      const seen = a.inFlight() + b.inFlight();
      responses = [objectiveChat(stack.url, 'batch'), objectiveChat(stack.url, undefined)];
      const abandoned = objectiveChat(stack.url, undefined, gaveUp.signal).catch(() => undefined);
      await waitFor(async () => (await held()) === 3, { timeoutMs: 10_000, message: 'three requests held' });
      // Held in the router: no worker has them, no load is taken.
      expect(a.inFlight() + b.inFlight()).toBe(seen);
      expect(stack.router.workers().map((w) => w.load)).toEqual([0, 0]);

      gaveUp.abort();
      await abandoned;
      await waitFor(async () => (await held()) === 2, {
        timeoutMs: 10_000,
        message: 'the abandoned one dropped',
      });
    } finally {
      for (const d of direct) d.abort();
    }
    // Room again: the held requests are served.
    const done = await Promise.all(responses);
    for (const res of done) {
      expect(res.status).toBe(200);
      await res.text();
    }
    expect(await held()).toBe(0);
    expect(await metric(/^vllm_router_flow_wait_seconds_count (\d+)/m)).toBe(2);
    await waitFor(() => a.inFlight() + b.inFlight() === 0, { timeoutMs: 10_000, message: 'all done' });
    await expectAllLoadsZero(stack.router);
    await Promise.all(stack.sims.map((s) => s.waitForIdle()));
  });
});

describe('flow control in a fleet of two models', () => {
  let mixed: Stack;
  beforeAll(async () => {
    mixed = await startStack({
      workers: 2,
      sim: (i) => ({ ...SATURABLE_SIM, model: i === 0 ? 'llama' : 'qwen' }),
      router: { scrapeIntervalMs: 50, loadStaleMs: 60_000, flowControl: true, decisionHeader: true },
    });
    await waitAllScraped(mixed.router);
  });
  afterAll(async () => {
    await mixed?.close();
  });

  const chat = (model: string): Promise<Response> =>
    fetch(`${mixed.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 2,
        stream: true,
      }),
    });

  it("holds a request for the saturated model's worker only: the other model's requests go at once", async () => {
    const [llama, qwen] = mixed.sims as [Simulator, Simulator];
    const direct = await directLoad(llama, 10, 'llama');
    let held: Promise<Response>;
    try {
      await waitFor(
        async () =>
          (
            await adminJson<Array<{ url: string; loadSample: { waiting?: number } | null }>>(
              mixed.router,
              '/workers',
            )
          ).body.some((w) => w.url === llama.url && (w.loadSample?.waiting ?? 0) > 5),
        { timeoutMs: 10_000, message: "a scrape showing llama's worker saturated" },
      );
      held = chat('llama');
      await waitFor(async () => /^vllm_router_flow_held 1$/m.test(await metricsText(mixed.router)), {
        timeoutMs: 10_000,
        message: 'the llama request held',
      });
      // qwen's worker has room: its requests are served while the llama one waits.
      for (let i = 0; i < 3; i++) {
        const res = await chat('qwen');
        expect(res.status).toBe(200);
        await res.text();
        expect(res.headers.get('x-vllm-router-decision')).toContain(`worker=${qwen.url}`);
      }
      expect(/^vllm_router_flow_held 1$/m.test(await metricsText(mixed.router))).toBe(true);
    } finally {
      direct.abort();
    }
    const res = await held;
    expect(res.status).toBe(200);
    await res.text();
    await waitFor(() => llama.inFlight() === 0, { timeoutMs: 10_000, message: 'all done' });
    await expectAllLoadsZero(mixed.router);
  });
});

describe('flow control in a fleet whose workers export no /metrics', () => {
  // SGLang without --enable-metrics, or vLLM behind a proxy that forwards only /v1: /metrics is 404,
  // inference works. Routing uses the router's own counts for such workers; so must flow control.
  let bare: Stack;
  beforeAll(async () => {
    bare = await startStack({
      workers: 2,
      sim: { metrics: false },
      router: {
        scrapeIntervalMs: 50,
        flowControl: true,
        // A request held by mistake fails in 5 s (queue_timeout) instead of the default 30 s.
        flowQueueTtlMs: 5_000,
        objective: ['batch=-1'],
      },
    });
  });
  afterAll(async () => {
    await bare?.close();
  });

  it('routes every request at once instead of holding it until --flow-queue-ttl-ms', async () => {
    // Ready: warm-up waits until every worker's /metrics was tried (here: a 404 each).
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${bare.router.adminPort}/readyz`)).status === 200,
      { timeoutMs: 10_000, message: 'router ready' },
    );
    const answers = await Promise.all(
      [undefined, 'batch', undefined, 'batch'].map(async (objective) => {
        const res = await objectiveChat(bare.url, objective);
        return { status: res.status, body: await res.text() };
      }),
    );
    for (const a of answers) expect(a.status, a.body).toBe(200);
    expect(bare.sims.reduce((n, s) => n + s.records.length, 0)).toBe(4);
    const metrics = await metricsText(bare.router);
    expect(metrics).not.toMatch(/vllm_router_flow_refused_total\{[^}]*\} [1-9]/);
    expect(metrics).toMatch(/vllm_router_pool_saturated\{role="regular"\} 0/);
    await waitFor(() => bare.sims.every((s) => s.inFlight() === 0), {
      timeoutMs: 10_000,
      message: 'all done',
    });
    await expectAllLoadsZero(bare.router);
  });
});
