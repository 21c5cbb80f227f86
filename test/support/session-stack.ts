/**
 * The stack of the session e2e tests (vision chats, coding agents): simulated workers with real
 * pacing, so concurrent sessions overlap (30 ms per output token, 0.05 ms per prompt token: an
 * uncached 10,000-token prompt is 500 ms of prefill, several times what a queue of the other sessions
 * costs), behind real Envoy and the router with its decision header. Registered with vitest's hooks:
 * started before the file's tests; after each, every load is back to 0 and every simulator idle;
 * closed after all. Returns the running stack.
 */
import { afterAll, afterEach, beforeAll, expect } from 'vitest';
import { startStack, type Stack } from './stack.js';
import { expectAllLoadsZero } from './router-fixture.js';

export function sessionStack(workers = 4): () => Stack {
  let stack: Stack | undefined;
  beforeAll(async () => {
    stack = await startStack({
      workers,
      sim: { timeScale: 1, timing: { baseItlMs: 30, overheadMs: 1 } },
      router: { decisionHeader: true },
    });
  });
  afterAll(async () => stack?.close());
  afterEach(async () => {
    await expectAllLoadsZero(stack!.router);
    await Promise.all(stack!.sims.map((s) => s.waitForIdle()));
  });
  return () => stack!;
}

/** One request of a session: the worker the router chose, and a text only its request added. */
export interface SessionTurn {
  readonly worker: string;
  readonly marker: string;
}

/** The worker a routed request's decision header names ('' when it has none). */
export function decidedWorker(res: Response): string {
  return /worker=(\S+?);/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '';
}

/** Follow-ups (every turn after a session's first) that ran elsewhere than their session's first turn. */
export function movedFollowUps(sessions: readonly (readonly SessionTurn[])[]): string[] {
  const moved: string[] = [];
  for (const turns of sessions) {
    const home = turns[0]!.worker;
    for (const t of turns.slice(1))
      if (t.worker !== home) moved.push(`${t.marker} -> ${t.worker} (home ${home})`);
  }
  return moved;
}

/**
 * Every follow-up's prompt, as the worker that ran it reports it (its first request whose body holds the
 * turn's marker), had over `minPromptTokens` tokens, over 90% of them cached.
 */
export function expectFollowUpsCached(
  stack: Stack,
  sessions: readonly (readonly SessionTurn[])[],
  minPromptTokens: number,
): void {
  for (const turns of sessions) {
    for (const t of turns.slice(1)) {
      const sim = stack.sims.find((x) => x.url === t.worker)!;
      const record = sim.records.find((r) => JSON.stringify(r.body).includes(t.marker))!;
      expect(record.promptTokens, t.marker).toBeGreaterThan(minPromptTokens);
      expect(record.cachedTokens / record.promptTokens, t.marker).toBeGreaterThan(0.9);
    }
  }
}
