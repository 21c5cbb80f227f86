/**
 * End to end through a real Envoy: `--forward-priority` with a worker started as vLLM's
 * `--scheduling-policy priority` (the simulator, one running sequence at a time). While one long
 * request runs, requests of the batch objective, of no objective, and of the interactive objective
 * queue at the worker in that order; once the long one ends, the worker serves the interactive one
 * first and the batch ones last, because the router wrote each objective's priority into its body. A
 * client's own `priority` does not let it jump the queue: the router replaces it. Without the flag the
 * bodies keep what the client sent, and the same worker takes them first come, first served. In P/D
 * mode both legs carry the priority (each worker orders its own queue). Embedding requests (vLLM's
 * pooling requests take the same `priority`) carry it too.
 * Ends with every load back to 0.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Simulator } from '../../src/sim/simulator.js';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startPdStack } from '../support/pd-stack.js';

let stack: Stack | undefined;
afterEach(async () => {
  if (stack) {
    await expectAllLoadsZero(stack.router);
    await stack.close();
  }
  stack = undefined;
});

const start = (forwardPriority: boolean) =>
  startStack({
    workers: 1,
    sim: {
      model: 'm',
      schedulingPolicy: 'priority',
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 1, maxRunningSeqs: 1 },
    },
    router: { objective: ['interactive=1', 'batch=-1'], forwardPriority },
  });

async function chat(
  s: Stack,
  name: string,
  opts: { objective?: string; priority?: number; maxTokens?: number; signal?: AbortSignal } = {},
): Promise<number> {
  try {
    const r = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        ...(opts.objective ? { 'x-gateway-inference-objective': opts.objective } : {}),
      },
      body: JSON.stringify({
        model: 'm',
        messages: [{ role: 'user', content: name }],
        max_tokens: opts.maxTokens ?? 2,
        stream: true,
        ...(opts.priority === undefined ? {} : { priority: opts.priority }),
      }),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    await r.text();
    return r.status;
  } catch {
    return 0; // aborted by the test
  }
}

const named = (sim: Simulator, name: string) =>
  sim.records.find((r) => JSON.stringify(r.body).includes(`"content":"${name}"`));

/**
 * Sends the queued requests one by one (each reaches the worker before the next), then frees the worker.
 * `order`: the order the worker served them in (its first token of each; one running sequence at a
 * time, so they never overlap), not the order their answers happened to reach the client through Envoy.
 */
async function queueBehindLongRequest(
  s: Stack,
  queued: [string, { objective?: string; priority?: number }][],
): Promise<{ order: string[]; statuses: number[] }> {
  const sim = s.sims[0]!;
  const long = new AbortController();
  const blocker = chat(s, 'long', { maxTokens: 1_000_000, signal: long.signal });
  await waitFor(() => named(sim, 'long')?.firstByteMs !== undefined);
  const done: Promise<number>[] = [];
  for (const [name, opts] of queued) {
    done.push(chat(s, name, opts));
    // In the worker's queue, not merely arrived: its record is taken before its body is read, so a
    // request whose body comes late (a loaded machine) could otherwise join the queue after the long
    // one ends and be served behind requests sent after it.
    const inQueue = done.length;
    await waitFor(() => named(sim, name) !== undefined && sim.waiting() >= inQueue);
  }
  long.abort(); // the worker's one running slot frees; the queue goes in the worker's order
  await blocker;
  const statuses = await Promise.all(done);
  // In the order of their first bytes (several can fall in one millisecond: not firstByteMs).
  const served = (name: string) => named(sim, name)?.firstByteSeq ?? Number.POSITIVE_INFINITY;
  const order = queued.map(([name]) => name).sort((x, y) => served(x) - served(y));
  return { order, statuses };
}

describe('--forward-priority: the objective priority orders the worker queue', () => {
  it("serves the interactive objective first and batch last; a client's own priority is replaced", async () => {
    stack = await start(true);
    const { order, statuses } = await queueBehindLongRequest(stack, [
      ['batch-1', { objective: 'batch' }],
      ['batch-2', { objective: 'batch' }],
      ['pushy', { priority: -50 }], // no objective: the router removes the priority it claims
      ['interactive', { objective: 'interactive' }],
    ]);
    expect(statuses).toEqual([200, 200, 200, 200]);
    expect(order).toEqual(['interactive', 'pushy', 'batch-1', 'batch-2']);
    const sim = stack.sims[0]!;
    const priorityOf = (name: string) => (named(sim, name)?.body as { priority?: number }).priority;
    expect(['batch-1', 'pushy', 'interactive'].map(priorityOf)).toEqual([1, undefined, -1]);
  });

  it('off: bodies go as the client sent them, first come first served', async () => {
    stack = await start(false);
    const { order, statuses } = await queueBehindLongRequest(stack, [
      ['batch-1', { objective: 'batch' }],
      ['plain', {}],
      ['interactive', { objective: 'interactive' }],
    ]);
    expect(statuses).toEqual([200, 200, 200]);
    expect(order).toEqual(['batch-1', 'plain', 'interactive']);
  });
});

describe('--forward-priority on embedding requests', () => {
  it("writes the objective's priority into /v1/embeddings bodies, and removes a client's own", async () => {
    stack = await start(true);
    const embed = async (input: string, objective?: string, priority?: number) => {
      const r = await fetch(`${stack!.url}/v1/embeddings`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          ...(objective ? { 'x-gateway-inference-objective': objective } : {}),
        },
        body: JSON.stringify({ model: 'm', input, ...(priority === undefined ? {} : { priority }) }),
      });
      const body = (await r.json()) as { data?: unknown[] };
      expect(r.status, JSON.stringify(body)).toBe(200);
      expect(body.data).toHaveLength(1);
      const rec = stack!.sims[0]!.records.find(
        (x) => x.path === '/v1/embeddings' && JSON.stringify(x.body).includes(input),
      );
      return (rec?.body as { priority?: number }).priority;
    };
    expect(await embed('for search', 'interactive')).toBe(-1);
    expect(await embed('nightly index', 'batch')).toBe(1);
    expect(await embed('jump the queue', undefined, -5)).toBeUndefined();
  });
});

describe('--forward-priority in P/D mode', () => {
  it('sends the priority on the prefill leg and on the decode request', async () => {
    const sim = { schedulingPolicy: 'priority' as const };
    const pd = await startPdStack({
      prefillSim: sim,
      decodeSim: sim,
      router: { objective: ['batch=-1'], forwardPriority: true },
    });
    try {
      const res = await fetch(`${pd.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-gateway-inference-objective': 'batch' },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'pd batch' }],
          max_tokens: 3,
        }),
      });
      expect(res.status, await res.text()).toBe(200);
      const legs = [...pd.prefill, ...pd.decode].map(
        (s) => (s.records.at(-1)?.body as { priority?: number } | undefined)?.priority,
      );
      expect(legs).toEqual([1, 1]);
      await expectAllLoadsZero(pd.router);
    } finally {
      await pd.close();
    }
  });
});
