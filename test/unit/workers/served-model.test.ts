/**
 * A fleet mixing models behind one router: the pool narrows candidates to the workers known to serve
 * the request's model (WorkerPool.candidatesFor), and only on that positive knowledge.
 */
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../../../src/routing/create-policy.js';
import type { Worker } from '../../../src/workers/worker.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { ctx, harness, register, route } from './pool-harness.js';

const PORTS = [8000, 8001, 8002, 8003];

function mixedPool(served: (w: Worker) => string | undefined): WorkerPool {
  const h = harness();
  for (const p of PORTS) register(h.registry, 'regular', p);
  const pool = new WorkerPool('regular', createPolicy('round_robin', {}), h.registry, {
    servedModel: served,
  });
  pool.reconcile();
  return pool;
}

const port = (w: Worker): number => Number(new URL(w.url).port);

describe('WorkerPool.candidatesFor (served models)', () => {
  it('routes each model only to the workers serving it (round robin within them)', () => {
    const pool = mixedPool((w) => (port(w) < 8002 ? 'llama' : 'qwen'));
    const seen = { llama: new Set<number>(), qwen: new Set<number>() };
    for (const model of ['llama', 'qwen'] as const) {
      for (let i = 0; i < 8; i++) {
        const r = route(pool, ctx('', model), 0);
        seen[model].add(port(r!.decision.worker));
        r!.guard.release();
      }
    }
    expect([...seen.llama].sort()).toEqual([8000, 8001]);
    expect([...seen.qwen].sort()).toEqual([8002, 8003]);
  });

  it.each([
    { name: 'a model no worker is known to serve (an adapter, an alias): every candidate', model: 'sql' },
    { name: 'no model in the request: every candidate', model: '' },
  ])('$name', ({ model }) => {
    const pool = mixedPool((w) => (port(w) < 8002 ? 'llama' : 'qwen'));
    expect(pool.candidatesFor(model)).toBe(pool.candidates());
  });

  it('workers not scraped yet do not narrow anything until some worker is known to serve the model', () => {
    let known = false;
    const pool = mixedPool((w) => (known && port(w) === 8003 ? 'qwen' : undefined));
    expect(pool.candidatesFor('qwen')).toBe(pool.candidates());
    known = true;
    expect(pool.candidatesFor('qwen').map(port)).toEqual([8003]);
  });

  it('a fleet serving one model gets the same array back (the policies memoize on it)', () => {
    const pool = mixedPool(() => 'llama');
    expect(pool.candidatesFor('llama')).toBe(pool.candidates());
  });
});

describe('WorkerPool.candidatesFor when the workers serving a model are down', () => {
  it("its requests get no worker (a 503) rather than another model's", () => {
    const pool = mixedPool((w) => (port(w) < 8002 ? 'llama' : 'qwen'));
    for (const w of pool.workers) if (port(w) < 8002) w.healthy = false;
    expect(pool.candidatesFor('llama')).toEqual([]);
    expect(pool.candidatesFor('qwen').map(port)).toEqual([8002, 8003]);
    expect(route(pool, ctx('', 'llama'), 0)).toBeUndefined();
  });
});
