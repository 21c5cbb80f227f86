/**
 * Context length: in a fleet whose workers of one model report different `max_model_len` on their
 * /v1/models cards, a request estimated longer than some of them goes only to those long enough
 * (WorkerPool.candidatesFor with a ContextNeed); when none is, every candidate stays.
 */
import { describe, expect, it } from 'vitest';
import { createPolicy } from '../../../src/routing/create-policy.js';
import type { RoutingContext } from '../../../src/routing/selector.js';
import { ModelCatalog, parseModelList } from '../../../src/workers/served-models.js';
import type { Worker } from '../../../src/workers/worker.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { harness, register, route } from './pool-harness.js';

const port = (w: Worker): number => Number(new URL(w.url).port);

/** Workers on `lens`' ports serving model `m` with those max_model_len (undefined: no length on the card). */
function fleet(lens: Record<number, number | undefined>, charsPerToken = 4) {
  const h = harness();
  const catalog = new ModelCatalog();
  const fits: boolean[] = [];
  for (const [p, len] of Object.entries(lens)) {
    const { url } = register(h.registry, 'regular', Number(p));
    catalog.recordListed(
      url,
      parseModelList(
        JSON.stringify({ data: [{ id: 'm', parent: null, ...(len ? { max_model_len: len } : {}) }] }),
      ),
    );
  }
  const pool = new WorkerPool('regular', createPolicy('round_robin', {}), h.registry, {
    models: {
      get version() {
        return catalog.version;
      },
      of: (w) => catalog.of(w.url),
    },
    tokensOf: (_model, chars) => Math.ceil(chars / charsPerToken),
    onContextFit: (_role, fitted) => fits.push(fitted),
  });
  pool.reconcile();
  return { pool, fits };
}

const request = (tokens: number, outputTokens = 0, model = 'm'): RoutingContext => ({
  model,
  text: 'x'.repeat(tokens * 4),
  headers: {},
  outputTokens,
});

/** The ports `n` requests go to (round robin over the candidates). */
function ports(pool: WorkerPool, c: RoutingContext, n = 6): number[] {
  const out = new Set<number>();
  for (let i = 0; i < n; i++) {
    const r = route(pool, c, 0)!;
    out.add(port(r.decision.worker));
    r.guard.release();
  }
  return [...out].sort();
}

describe('WorkerPool.candidatesFor: context length', () => {
  it.each([
    { name: 'a short request: every worker', tokens: 1000, out: 0, want: [8000, 8001, 8002], fit: [] },
    {
      name: 'longer than the 4k worker: the two long ones',
      tokens: 5000,
      out: 0,
      want: [8001, 8002],
      fit: [true],
    },
    { name: 'prompt + max_tokens count', tokens: 3000, out: 2000, want: [8001, 8002], fit: [true] },
    { name: 'exactly the length fits', tokens: 4000, out: 96, want: [8000, 8001, 8002], fit: [] },
    { name: 'longer than 32k: the 128k worker only', tokens: 40_000, out: 0, want: [8002], fit: [true] },
    {
      name: 'longer than all: every worker (its 400 says why)',
      tokens: 200_000,
      out: 0,
      want: [8000, 8001, 8002],
      fit: [false],
    },
  ])('$name', ({ tokens, out, want, fit }) => {
    const { pool, fits } = fleet({ 8000: 4096, 8001: 32768, 8002: 131072 });
    expect(ports(pool, request(tokens, out))).toEqual(want);
    // Counted once per selection, not per candidates() read.
    expect(fits).toEqual(Array.from({ length: 6 }, () => fit).flat());
  });

  it('a worker whose card has no length counts as long enough', () => {
    const { pool } = fleet({ 8000: 4096, 8001: undefined });
    expect(ports(pool, request(5000))).toEqual([8001]);
  });

  it('a fleet of one length returns the memoized candidates array itself', () => {
    const { pool, fits } = fleet({ 8000: 8192, 8001: 8192 });
    const all = pool.candidatesFor('m');
    expect(pool.candidatesFor('m', { chars: 400, outputTokens: 16 })).toBe(all);
    expect(fits).toEqual([]);
  });

  it('a request that is not an inference request (no output tokens known) is never filtered', () => {
    const { pool } = fleet({ 8000: 4096, 8001: 32768 });
    const c: RoutingContext = { model: 'm', text: 'x'.repeat(80_000), headers: {} };
    expect(ports(pool, c)).toEqual([8000, 8001]);
  });

  it("a prefill pool counts the leg's one output token, not the request's max_tokens", () => {
    const h = harness();
    const catalog = new ModelCatalog();
    for (const [p, len] of [
      [8000, 4096],
      [8001, 32768],
    ] as const) {
      const { url } = register(h.registry, 'prefill', p);
      catalog.recordListed(url, parseModelList(JSON.stringify({ data: [{ id: 'm', max_model_len: len }] })));
    }
    const pool = new WorkerPool('prefill', createPolicy('round_robin', {}), h.registry, {
      models: {
        get version() {
          return catalog.version;
        },
        of: (w) => catalog.of(w.url),
      },
      tokensOf: (_model, chars) => Math.ceil(chars / 4),
    });
    pool.reconcile();
    // 3,000 prompt tokens + 2,000 max_tokens: too long for 4,096 as a whole request, not as a prefill leg.
    expect(ports(pool, request(3000, 2000))).toEqual([8000, 8001]);
    expect(ports(pool, request(5000, 0))).toEqual([8001]);
  });
});
