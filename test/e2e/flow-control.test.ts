/**
 * End to end through a real Envoy: flow control (`--flow-control`). Both workers are kept saturated by
 * direct clients (more requests waiting than --saturation-waiting), a load only their scraped /metrics
 * shows. Requests that arrive meanwhile wait in the router: no worker sees them, Envoy waits for the
 * ext_proc reply. A client that gives up while held leaves nothing behind. Once the direct load ends,
 * the held requests are served. Ends with every load back to 0 and the simulators idle.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
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
