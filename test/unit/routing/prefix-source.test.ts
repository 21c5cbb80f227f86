import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import {
  RadixPrefixSource,
  resolvePrefix,
  tokensFromChars,
  type PrefixSource,
} from '../../../src/routing/prefix-source.js';
import { RadixTree } from '../../../src/routing/radix-tree.js';
import type { SelectionInput } from '../../../src/routing/policy.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorkers } from './fixtures.js';

const DOC = 'd'.repeat(400);

describe('RadixTree.matchEachTenant', () => {
  it.each([
    { name: 'full holder and partial holder', text: `${DOC}xyz`, want: { a: 403, b: 400 } },
    { name: 'divergence inside an edge', text: `${'d'.repeat(100)}q`, want: { a: 100, b: 100 } },
    { name: 'no match', text: 'zzz', want: {} },
    { name: 'empty text', text: '', want: {} },
  ])('$name', ({ text, want }) => {
    const tree = new RadixTree();
    tree.insert(`${DOC}xyz`, 'a', 1);
    tree.insert(`${DOC}abc`, 'b', 2);
    const got: Record<string, number> = {};
    tree.matchEachTenant(text, (t, n) => (got[t] = n));
    expect(got).toEqual(want);
  });
});

describe('RadixPrefixSource', () => {
  it('turns each candidate own matched chars into tokens (floor), 0 for unseen workers', () => {
    const workers = makeWorkers(3);
    const policy = new CacheAwarePolicy();
    for (const w of workers) policy.addWorker(w);
    policy.routed({ worker: workers[1]!, branch: 'seed' }, input(workers, { text: `${DOC}one` }), 1);
    const source = new RadixPrefixSource((m) => policy.treeOf(m), 4);
    const sel = input(workers, { text: `${DOC}two!` });
    expect(source.cachedTokens(sel, workers)).toEqual([0, 100, 0]);
    expect(source.promptTokens(sel)).toBe(101); // ceil(404 / 4)
    // Unknown model: no tree yet, every worker holds 0. Empty text: no knowledge.
    expect(source.cachedTokens(input(workers, { text: 'x', model: 'other' }), workers)).toEqual([0, 0, 0]);
    expect(source.cachedTokens(input(workers, { text: '' }), workers)).toBeUndefined();
  });

  it('matches each prompt of a batch on its own and sums them; routed() records each', () => {
    // vLLM runs a batched completions request as one engine request per prompt: each prompt's own
    // prefix is what a worker's cache holds of it (a few-shot evaluation: one shared preamble, many
    // questions per request). Their join matched the first prompt's prefix alone.
    const workers = makeWorkers(2);
    const policy = new CacheAwarePolicy();
    for (const w of workers) policy.addWorker(w);
    const batch = (...prompts: string[]): SelectionInput => {
      const req = parseInferenceRequest(
        'completions',
        'application/json',
        Buffer.from(JSON.stringify({ model: 'm', prompt: prompts })),
      );
      return input(workers, { text: req.text, ...(req.prompts ? { prompts: req.prompts } : {}) });
    };
    policy.routed({ worker: workers[1]!, branch: 'seed' }, batch(`${DOC}q1`, `${DOC}q2`), 1);
    const source = new RadixPrefixSource((m) => policy.treeOf(m), 4);
    // Three prompts, two opening with DOC + 'q' (401 characters each): 802 / 4 on worker 1, not 401 / 4.
    const next = batch(`${DOC}q3`, `${DOC}q4`, 'other');
    expect(source.cachedTokens(next, workers)).toEqual([0, 200]);
    // Every prompt was recorded whole: the second one sent alone is held to its end.
    const second = input(workers, { text: `${DOC}q2` });
    expect(source.cachedTokens(second, workers)).toEqual([0, 100]); // floor(403 / 4)
    // The tree holds their shared opening once, and each ending.
    expect(policy.treeOf('m')!.tenantCharCount(workers[1]!.id)).toBe(401 + 2);
  });

  it('rejects a non-positive chars-per-token', () => {
    expect(() => new RadixPrefixSource(() => undefined, 0)).toThrow(RangeError);
  });
});

describe('resolvePrefix', () => {
  const workers = makeWorkers(3);
  const sel = input(workers, { text: 'x'.repeat(40) });
  const fixed = (
    name: string,
    cached: readonly (number | undefined)[] | undefined,
    prompt?: number,
    exact?: boolean,
  ): PrefixSource => ({
    name,
    ...(exact === undefined ? {} : { exact }),
    cachedTokens: (_i: SelectionInput, _w: readonly Worker[]) => cached,
    ...(prompt === undefined ? {} : { promptTokens: () => prompt }),
  });

  it.each([
    {
      name: 'no source: zeros, prompt from chars',
      sources: [],
      want: {
        promptTokens: 10,
        cached: [0, 0, 0],
        sourceOf: [undefined, undefined, undefined],
        exact: false,
      },
    },
    {
      name: 'exact first, approximate fills the workers it does not know',
      sources: [fixed('exact', [8, undefined, 0], 12), fixed('radix', [1, 5, 9])],
      want: { promptTokens: 12, cached: [8, 5, 0], sourceOf: ['exact', 'radix', 'exact'], exact: false },
    },
    {
      name: 'an exact source that knows every worker makes an exact view',
      sources: [fixed('kv_events', [8, 0, 3], 12, true), fixed('radix', [1, 5, 9])],
      want: {
        promptTokens: 12,
        cached: [8, 0, 3],
        sourceOf: ['kv_events', 'kv_events', 'kv_events'],
        exact: true,
      },
    },
    {
      name: 'an exact source that misses one worker does not',
      sources: [fixed('kv_events', [8, undefined, 3], 12, true), fixed('radix', [1, 5, 9])],
      want: {
        promptTokens: 12,
        cached: [8, 5, 3],
        sourceOf: ['kv_events', 'radix', 'kv_events'],
        exact: false,
      },
    },
    {
      name: 'a source with no knowledge of the request is skipped; values clamped to the prompt',
      sources: [fixed('exact', undefined, 6), fixed('radix', [-3, 99, Number.NaN])],
      want: { promptTokens: 6, cached: [0, 6, 0], sourceOf: ['radix', 'radix', undefined], exact: false },
    },
  ])('$name', ({ sources, want }) => {
    expect(resolvePrefix(sources, sel, workers, 4)).toEqual(want);
  });

  it("a worker whose exact index misses a chain it holds (a partial replay) is credited the tree's larger answer, and the view is not exact", () => {
    // The exact index is blind to a system prompt worker 1 cached before this router's replay window;
    // the tree knows this router sent it there. Worker 0's exact answer stays, worker 2's too.
    const partial: PrefixSource = {
      ...fixed('kv_events', [8, 0, 3], 12, true),
      lowerBound: (w) => w === workers[1] || w === workers[2],
    };
    expect(resolvePrefix([partial, fixed('radix', [1, 9, 2])], sel, workers, 4)).toEqual({
      promptTokens: 12,
      cached: [8, 9, 3],
      sourceOf: ['kv_events', 'radix', 'kv_events'],
      exact: false,
    });
  });

  it('tokensFromChars rounds up', () => {
    expect([tokensFromChars(0, 4), tokensFromChars(1, 4), tokensFromChars(8, 4)]).toEqual([0, 1, 2]);
  });
});
