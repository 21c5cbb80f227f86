/**
 * The cache_aware tree checked against the workers' own reports (routing/cache-report.ts): a prefix
 * the tree believed a worker held, that the worker's usage shows it had lost, drops from the tree with
 * everything the router sent that worker before it; the timing dispatcher delivers the reports from
 * the responses it watches.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { withTiming } from '../../../src/load/timing-dispatcher.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { isStale } from '../../../src/routing/cache-report.js';
import type { CacheFeedback, Decision } from '../../../src/routing/policy.js';
import { RadixPrefixSource } from '../../../src/routing/prefix-source.js';
import { RadixTree } from '../../../src/routing/radix-tree.js';
import { innerDispatcher, respond } from '../../support/respond.js';
import { input, makeWorkers } from './fixtures.js';

const SYS = 'You are a helpful assistant. '.repeat(20); // a shared opening, 580 chars
const A = SYS + 'tenant a: ' + 'a'.repeat(400);
const B = SYS + 'tenant b: ' + 'b'.repeat(400);
const C = SYS + 'tenant c: ' + 'c'.repeat(400);

function expectCountsConsistent(tree: RadixTree): void {
  const r = tree.recount();
  expect(r.totalChars).toBe(tree.totalChars());
  for (const t of tree.tenants()) expect(r.tenantChars.get(t) ?? 0).toBe(tree.tenantCharCount(t));
}

describe('RadixTree: what a tenant held before an insert, and eviction up to a tick', () => {
  it('insert returns the held prefix and the tick of its last insert', () => {
    const tree = new RadixTree();
    expect(tree.insert(A, 't', 0)).toEqual({ heldChars: 0, heldTick: 0 });
    expect(tree.insert(B, 't', 0)).toEqual({ heldChars: SYS.length + 'tenant '.length, heldTick: 1 });
    expect(tree.insert(A, 't', 0)).toEqual({ heldChars: A.length, heldTick: 1 });
    expect(tree.insert(A + ' more', 'u', 0)).toEqual({ heldChars: 0, heldTick: 0 });
    expect(tree.insert(A + ' more', 't', 0)).toEqual({ heldChars: A.length, heldTick: 3 });
  });

  it('evictTenantUpTo drops what the tenant last used at or before the tick, nothing newer, no other tenant', () => {
    const tree = new RadixTree();
    tree.insert(A, 't', 0); // tick 1
    tree.insert(B, 't', 0); // tick 2
    tree.insert(C, 't', 0); // tick 3 (also re-stamps the shared opening)
    tree.insert(A, 'u', 0); // tick 4
    const dropped = tree.evictTenantUpTo('t', 2);
    expect(dropped).toBe(2 * 'a: '.length + 800); // the tails of A and B; the opening is C's too
    const held = (text: string, tenant: string) => {
      let n = 0;
      tree.matchEachTenant(text, (t, chars) => {
        if (t === tenant) n = chars;
      });
      return n;
    };
    expect(held(A, 't')).toBe(SYS.length + 'tenant '.length);
    expect(held(B, 't')).toBe(SYS.length + 'tenant '.length);
    expect(held(C, 't')).toBe(C.length);
    expect(held(A, 'u')).toBe(A.length);
    expectCountsConsistent(tree);
    expect(tree.evictTenantUpTo('t', 3)).toBe(C.length);
    expect(tree.tenantCharCount('t')).toBe(0);
    expect(tree.evictTenantUpTo('nobody', 10)).toBe(0);
    expectCountsConsistent(tree);
  });
});

describe('isStale', () => {
  it.each<[number, number, boolean]>([
    [3000, 0, true], // the worker lost all of it
    [3000, 1024, true], // only the shared opening was left
    [3000, 1600, false], // most of it was there (estimates are approximate)
    [3000, 3000, false],
    [12, 0, false], // under one block: rounding, not an eviction
    [40, 0, true],
  ])('believed %d, reported %d -> %s', (believed, cached, want) => {
    expect(isStale(believed, cached)).toBe(want);
  });
});

describe('cache_aware: routed() returns a check of its belief, and a stale report corrects the tree', () => {
  const workers = makeWorkers(2);
  const [w0, w1] = workers as [(typeof workers)[0], (typeof workers)[0]];
  const decide = (w: typeof w0): Decision => ({ worker: w, branch: 'test' });
  const cachedOn = (policy: CacheAwarePolicy, text: string) =>
    new RadixPrefixSource((m) => policy.treeOf(m), 1).cachedTokens(input(workers, { text }), workers);

  it('asks for a report only when the tree believed the worker held part of the prompt', () => {
    const policy = new CacheAwarePolicy();
    expect(policy.routed(decide(w0), input(workers, { text: A }), 0)).toBeUndefined();
    expect(policy.routed(decide(w0), input(workers, { text: A }), 0)).toBeDefined();
    expect(policy.routed(decide(w1), input(workers, { text: A }), 0)).toBeUndefined();
    expect(policy.routed(decide(w1), input(workers, { text: '' }), 0)).toBeUndefined();
  });

  it('a stale report drops the prefix and what was sent to that worker before its last use', () => {
    const policy = new CacheAwarePolicy();
    policy.routed(decide(w0), input(workers, { text: A }), 0);
    policy.routed(decide(w0), input(workers, { text: B }), 0);
    policy.routed(decide(w0), input(workers, { text: C }), 0);
    policy.routed(decide(w1), input(workers, { text: A }), 0);
    const check = policy.routed(decide(w0), input(workers, { text: B }), 0) as CacheFeedback;
    // The worker found only the shared opening of B: B had been evicted there, and so had A (older).
    check.observe(500, 100);
    check.observe(500, 100); // one report per request
    expect(policy.cacheReports).toEqual({ checked: 1, stale: 1, droppedChars: 'a: '.length + 400 });
    expect(cachedOn(policy, A)).toEqual([SYS.length + 'tenant '.length, A.length]);
    expect(cachedOn(policy, B)).toEqual([B.length, SYS.length + 'tenant '.length]); // routed just now
    expect(cachedOn(policy, C)).toEqual([C.length, SYS.length + 'tenant '.length]); // used after B's last use
    expectCountsConsistent(policy.treeOf('m') as RadixTree);
  });

  it('a report that confirms the belief changes nothing', () => {
    const policy = new CacheAwarePolicy();
    policy.routed(decide(w0), input(workers, { text: A }), 0);
    policy.routed(decide(w0), input(workers, { text: B }), 0);
    const check = policy.routed(decide(w0), input(workers, { text: A }), 0) as CacheFeedback;
    check.observe(500, 480);
    expect(policy.cacheReports).toEqual({ checked: 1, stale: 0, droppedChars: 0 });
    expect(cachedOn(policy, B)?.[0]).toBe(B.length);
  });

  it('reports on a worker that has left since change nothing', () => {
    const policy = new CacheAwarePolicy();
    for (const w of workers) policy.addWorker(w);
    policy.routed(decide(w0), input(workers, { text: A }), 0);
    const check = policy.routed(decide(w0), input(workers, { text: A }), 0) as CacheFeedback;
    policy.removeWorker(w0);
    check.observe(500, 0);
    expect(policy.cacheReports).toEqual({ checked: 1, stale: 1, droppedChars: 0 });
  });

  it('off with cacheReports: false, and in a decode pool (it does not prefill)', () => {
    const off = new CacheAwarePolicy({ cacheReports: false });
    off.routed(decide(w0), input(workers, { text: A }), 0);
    expect(off.routed(decide(w0), input(workers, { text: A }), 0)).toBeUndefined();
    const decode = new CacheAwarePolicy({}, { role: 'decode' });
    decode.routed(decide(w0), input(workers, { text: A }), 0);
    expect(decode.routed(decide(w0), input(workers, { text: A }), 0)).toBeUndefined();
    expect(() => new CacheAwarePolicy({ cacheReports: 'yes' as unknown as boolean })).toThrow(RangeError);
  });
});

describe('withTiming delivers the workers usage reports to the policy', () => {
  const [w] = makeWorkers(1);
  const reports: Array<[number, number]> = [];
  const feedback: CacheFeedback = { observe: (p, c) => void reports.push([p, c]) };
  const inner = innerDispatcher(w!, { worker: w!, branch: 'test' }, { cacheFeedback: feedback });
  const req = (stream: boolean): RouteRequest => ({
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    inference: { stream, model: 'm', text: A } as RouteRequest['inference'],
  });
  const usage = (prompt: number, cached: number) =>
    Buffer.from(
      `data: {"choices":[],"usage":{"prompt_tokens":${prompt},"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":${cached}}}}\n\ndata: [DONE]\n\n`,
    );

  it('from a watched stream and a watched non-streamed response, not from an error; a body without details is a miss once the worker sent details', () => {
    reports.length = 0;
    // Every response watched; no characters-per-token learner: the report alone is reason to watch.
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 1);
    const noDetails = (n: number) =>
      Buffer.from(`data: {"choices":[],"usage":{"prompt_tokens":${n},"prompt_tokens_details":null}}\n\n`);
    // Before the worker ever sent details (it may run without --enable-prompt-tokens-details): nothing.
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 200, [noDetails(249)]);
    const first = Buffer.from('data: {"choices":[{"text":"a"}]}\n\n');
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 200, [first, usage(250, 16)]);
    respond(d.dispatch(req(false), new AbortController()) as Dispatch, 200, [usage(251, 240)]);
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 503, [usage(252, 0)]);
    // vLLM writes the details only when something was cached: now a miss.
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 200, [noDetails(253)]);
    expect(reports).toEqual([
      [250, 16],
      [251, 240],
      [253, 0],
    ]);
  });
});
