/**
 * Two simulated workers of mixed hardware behind real Envoy and the router: worker 0 runs every
 * duration six times slower (an older GPU, a GPU shared with another job). ~200-token prompts take
 * the fast one ~12 ms to a first token, the slow one ~70 ms. The router runs the default policy
 * (cache_aware, cost mode), learns from every response (streamed or not), and names its choice in a
 * header.
 *
 * The pace forgets over `FLEET_PACE_FORGET_MS` of silence, not the default 30 s, so the wall clock of a
 * loaded machine (CI runs many Envoys at once) never forgets for a test mid-way. Forgetting itself is
 * tested by pace-recovery.test.ts, which moves the router's clock past this window.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import type { RouterDeps } from '../../src/router.js';
import { adminJson, expectAllLoadsZero } from './router-fixture.js';
import { postThrough, startStack, type Stack } from './stack.js';

/** How long a worker's pace keeps without samples, ms: longer than any of these tests runs. */
export const FLEET_PACE_FORGET_MS = 600_000;

async function startMixedFleet(routerDeps?: Omit<RouterDeps, 'logger'>): Promise<Stack> {
  return startStack({
    workers: 2,
    sim: (i) => ({
      timeScale: i === 0 ? 6 : 1,
      timing: { overheadMs: 2, prefillMsPerToken: 0.05, baseItlMs: 5 },
    }),
    // Every response teaches the estimates (the default watches one in 8 per worker).
    router: {
      policy: 'cache_aware',
      decisionHeader: true,
      responseBodySample: 1,
      costWorkerPaceForgetMs: FLEET_PACE_FORGET_MS,
    },
    ...(routerDeps !== undefined ? { routerDeps } : {}),
  });
}

/**
 * One mixed fleet for a test file: started before its tests, closed after them, and after each test
 * every load back to 0 and both simulators idle. `fleet.stack` is the running stack.
 */
export function useMixedFleet(routerDeps?: Omit<RouterDeps, 'logger'>): { readonly stack: Stack } {
  let stack: Stack | undefined;
  beforeAll(async () => {
    stack = await startMixedFleet(routerDeps);
  });
  afterAll(async () => {
    await stack?.close();
  });
  afterEach(async () => {
    await expectAllLoadsZero(stack!.router);
    await Promise.all(stack!.sims.map((s) => s.waitForIdle()));
  });
  return {
    get stack(): Stack {
      return stack!;
    },
  };
}

/**
 * A completion of a prompt nobody holds (~200 tokens; `i` below 20,000), through Envoy, streamed unless `stream` is
 * false; the worker that served it.
 */
export async function uniqueRequest(stack: Stack, i: number, stream = true): Promise<string> {
  // Opens with a character of its own (CJK, one per index): no other prompt shares even its first
  // character, so idle workers of one pace score exactly alike (the approximate tree matches
  // characters: 'request 12' would share 'request 1' with some earlier prompt on one of them).
  const prompt =
    `${String.fromCodePoint(0x4e00 + i)} request ${i} ${'x'.repeat(i % 7)}: ` +
    `tell me about item ${i}. `.repeat(36);
  const answer = await postThrough(stack, { model: 'sim-model', prompt, max_tokens: 2, stream });
  expect(answer.status).toBe(200);
  return answer.worker;
}

/** The worker's pace on /workers now. */
export async function paceOnWorkers(stack: Stack, url: string): Promise<number> {
  const view = (
    await adminJson<Array<{ url: string; estimates: { pace: number } }>>(stack.router, '/workers')
  ).body;
  return view.find((w) => w.url === url)!.estimates.pace;
}

/**
 * Learning, streamed unless `stream` is false. Returns the number of requests sent (the next unique
 * index).
 *
 * One request at a time, idle workers of one pace tie and the prefix home (prefix-home.ts) sends
 * each prompt to its rendezvous home, either worker by the prompt's hash, so both are seen. The slow
 * one is tried until its pace reads past the dead band (often by a few hundredths only) and then only
 * when the fast one's pace climbs back to 1 as the pool's estimate comes to be made of its samples.
 * `sequential` sends at least 100 requests that way, until the slow worker's pace is above the fast
 * one's (at most 600).
 *
 * That edge is too close for a test of where single requests go: the home's margin covers a score
 * that close now and then, as it is meant to, and the fast one's pace climbs back towards 1 with
 * every request it serves. `bursts` (the default) sends 40 requests one at a time, then bursts of 24,
 * as real traffic has, which give the slow worker requests to learn from, until its pace reads at
 * least 1.1 and above the fast one's (at most 10 bursts).
 */
export async function learnPaces(
  stack: Stack,
  opts: { mode?: 'bursts' | 'sequential'; stream?: boolean } = {},
): Promise<number> {
  const [slow, fast] = stack.sims;
  const { mode = 'bursts', stream = true } = opts;
  const paces = async (): Promise<[number, number]> => [
    await paceOnWorkers(stack, slow!.url),
    await paceOnWorkers(stack, fast!.url),
  ];
  let sent = 0;
  if (mode === 'sequential') {
    for (;;) {
      const [s, f] = await paces();
      if (sent >= 100 && s > f) return sent;
      expect(sent, `paces after ${sent} requests: slow ${s}, fast ${f}`).toBeLessThan(600);
      await uniqueRequest(stack, sent++, stream);
    }
  }
  for (; sent < 40; sent++) await uniqueRequest(stack, sent, stream);
  for (let burst = 0; ; burst++) {
    const [s, f] = await paces();
    if (s >= 1.1 && s > f) return sent;
    expect(burst, `paces after ${burst} bursts: slow ${s}, fast ${f}`).toBeLessThan(10);
    await Promise.all(Array.from({ length: 24 }, (_, k) => uniqueRequest(stack, sent + k, stream)));
    sent += 24;
  }
}
