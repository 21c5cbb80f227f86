/**
 * Cache-aware routing through a real Envoy, reference mode (`--cache-aware-mode per_request`):
 * requests that share a long prompt prefix stick to the worker that holds it, until that worker's live
 * load crosses both overload thresholds; then they spill to the least-loaded worker. (The default cost
 * mode is covered by load-aware-routing.test.ts.) A worker whose process restarts at its URL under
 * the same registration (a static worker), whether or not the router saw it down meanwhile, is known
 * by its later process start time and holds no prefix any more.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { freePorts } from '../support/free-ports.js';
import { startSimulator } from '../../src/sim/simulator.js';

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

describe('a worker restarted at its URL', () => {
  it.each([
    ['between two scrapes (nothing saw it down)', false],
    ['after failed scrapes took it out', true],
  ])(
    '%s is not sent the prefixes its old process held: its later process start time',
    async (_, seenDown) => {
      const ports = await freePorts(2);
      const s = await startStack({
        workers: 2,
        sim: (i) => ({ port: ports[i]! }),
        router: {
          policy: 'cache_aware',
          cacheAwareMode: 'per_request',
          decisionHeader: true,
          scrapeIntervalMs: 20,
          healthCheckIntervalMs: 60_000, // the restart falls between two checks
        },
      });
      try {
        const ask = async (i: number): Promise<{ branch: string; worker: string }> => {
          const res = await fetch(`${s.url}/v1/chat/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({
              model: 'sim-model',
              messages: [
                { role: 'system', content: SYSTEM },
                { role: 'user', content: `question number ${i}` },
              ],
              max_tokens: 2,
            }),
          });
          expect(res.status).toBe(200);
          await res.arrayBuffer();
          const d = res.headers.get('x-vllm-router-decision') ?? '';
          return { branch: /branch=(\w+)/.exec(d)?.[1] ?? '', worker: /worker=(\S+)/.exec(d)?.[1] ?? '' };
        };
        const first = await ask(0);
        expect((await ask(1)).branch).toBe('cache_hit');
        const index = s.sims.findIndex((sim) => first.worker.startsWith(sim.url));
        expect(index).toBeGreaterThanOrEqual(0);
        const old = s.sims[index]!;
        const before = s.router.workers().find((w) => w.url === old.url)!.generation;

        // Its vLLM restarts (an OOM kill, a `docker restart`): a new process, an empty prefix cache.
        await old.close();
        if (seenDown) {
          await waitFor(() => s.router.workers().find((w) => w.url === old.url)?.healthy === false, {
            message: 'the worker seen down',
          });
        }
        const restarted = await startSimulator({ timeScale: 0, port: ports[index]! });
        s.sims[index] = restarted;
        expect(restarted.url).toBe(old.url);
        // The router has read the new process's metrics twice (its restart is on the first page).
        await waitFor(() => restarted.metricsReads >= 2, { message: 'the restarted worker scraped' });
        await waitFor(() => s.router.workers().every((w) => w.healthy), { message: 'the worker back' });

        const after = await ask(2);
        expect(after.branch, 'the router still believed the restarted worker held the prefix').toBe(
          'low_match',
        );
        expect(s.router.workers().find((w) => w.url === old.url)!.generation).toBeGreaterThan(before);
        await expectAllLoadsZero(s.router);
      } finally {
        await s.close();
      }
    },
  );
});
