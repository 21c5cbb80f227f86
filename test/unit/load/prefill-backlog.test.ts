import { describe, expect, it } from 'vitest';
import { PrefillBacklog } from '../../../src/load/prefill-backlog.js';
import { makeWorkers } from '../routing/fixtures.js';

describe('PrefillBacklog', () => {
  it('sums the queued requests and tokens per worker; done is idempotent', () => {
    const [a, b] = makeWorkers(2);
    const backlog = new PrefillBacklog();
    const e1 = backlog.add(a!, 100, 1000);
    backlog.add(a!, 20, 1000);
    backlog.add(b!, 7, 1000);
    expect(backlog.of(a!, 0)).toEqual({ requests: 2, tokens: 120 });
    expect(backlog.of(b!, 0)).toEqual({ requests: 1, tokens: 7 });
    backlog.done(a!, e1);
    backlog.done(a!, e1);
    expect(backlog.of(a!, 0)).toEqual({ requests: 1, tokens: 20 });
  });

  it('an entry past its deadline (a response that shows no first token) is dropped on read', () => {
    const [a] = makeWorkers(1);
    const backlog = new PrefillBacklog();
    backlog.add(a!, 50, 100);
    backlog.add(a!, 30, 300);
    expect(backlog.of(a!, 99)).toEqual({ requests: 2, tokens: 80 });
    expect(backlog.of(a!, 100)).toEqual({ requests: 1, tokens: 30 });
    expect(backlog.of(a!, 500)).toEqual({ requests: 0, tokens: 0 });
  });

  it('a request of several sequences counts each, as vLLM counts its child requests waiting', () => {
    const [a] = makeWorkers(1);
    const backlog = new PrefillBacklog();
    const e = backlog.add(a!, 100, 1000, 8);
    backlog.add(a!, 10, 1000, 0); // not a count: one
    expect(backlog.of(a!, 0)).toEqual({ requests: 9, tokens: 110 });
    backlog.done(a!, e);
    expect(backlog.of(a!, 0)).toEqual({ requests: 1, tokens: 10 });
  });

  it('bad token counts count as zero tokens, still one request', () => {
    const [a] = makeWorkers(1);
    const backlog = new PrefillBacklog();
    backlog.add(a!, Number.NaN, 10);
    backlog.add(a!, -5, 10);
    expect(backlog.of(a!, 0)).toEqual({ requests: 2, tokens: 0 });
  });
});

describe('prefillLegLearner (P/D prefill legs the router runs)', () => {
  it('queues the leg on its worker and learns its duration as that worker time to first token', async () => {
    const { prefillLegLearner } = await import('../../../src/load/timing-dispatcher.js');
    const { TimingEstimates } = await import('../../../src/load/timing-estimates.js');
    const { CacheAwarePolicy } = await import('../../../src/routing/cache-aware.js');
    const { input } = await import('../routing/fixtures.js');
    const [w] = makeWorkers(1);
    const timing = new TimingEstimates();
    const backlog = new PrefillBacklog();
    const decision = new CacheAwarePolicy().select(input([w!], { text: 'p'.repeat(400) }));
    const learn = prefillLegLearner(timing, backlog, () => 0);
    const end = learn(w!, decision)!;
    expect(backlog.of(w!, 0)).toEqual({ requests: 1, tokens: 100 });
    end(true, 80);
    expect(backlog.of(w!, 0)).toEqual({ requests: 0, tokens: 0 });
    expect(timing.of(w!).ttftSamples).toBe(1);
    // A failed leg ends its queue entry but teaches nothing; a decision without cost inputs is not tracked.
    learn(w!, decision)!(false, 5000);
    expect(timing.of(w!).ttftSamples).toBe(1);
    expect(learn(w!, { worker: w!, branch: 'round_robin' })).toBeUndefined();
  });
});
