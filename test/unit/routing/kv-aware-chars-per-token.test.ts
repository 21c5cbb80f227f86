/**
 * kv_aware's radix fallback (workers that publish no KV events, next to some that do) ignores
 * the configured `charsPerToken`: KvAwarePolicy builds its RadixPrefixSource and calls resolvePrefix
 * with the default 4 characters per token, while cache_aware (and its own fallback) use the option.
 */
import { describe, expect, it } from 'vitest';
import { KvAwarePolicy, type ExactPrefixSource } from '../../../src/routing/kv-aware.js';
import { input, makeWorkers } from '../routing/fixtures.js';
import { createPolicy } from '../../../src/routing/create-policy.js';

describe('kv_aware radix fallback uses the configured charsPerToken', () => {
  it('a worker without events that holds the whole prompt (1 char per token) is an exact_hit', () => {
    const [a, b] = makeWorkers(2, [1, 0]) as [
      ReturnType<typeof makeWorkers>[number],
      ReturnType<typeof makeWorkers>[number],
    ];
    const text = 'x'.repeat(100); // 100 tokens at 1 char/token
    // B publishes events (holds nothing of the prompt); A publishes none (undefined).
    const exact: ExactPrefixSource = {
      name: 'kv_events',
      exact: true,
      cachedTokens: (_in, ws) => ws.map((w) => (w === b ? 0 : undefined)),
      promptTokens: () => 100,
    };
    const policy = new KvAwarePolicy({
      cacheAware: { charsPerToken: 1, prefixHomeMargin: 0 },
      exact,
    });
    policy.addWorker(a);
    policy.addWorker(b);
    const sel = input([a, b], { text });
    policy.routed({ worker: a, branch: 'seed' }, sel, 1); // A's picture holds the whole prompt
    const d = policy.select(input([a, b], { text }));
    // A holds 100 of 100 tokens: match rate 1, A is the owner (load 1 vs mean 0.5 is no imbalance).
    expect(d.matchRate).toBe(1);
    expect(d.worker).toBe(a);
    expect(d.branch).toBe('exact_hit');
  });
});

describe('kv_aware uses the learned characters per token (--chars-per-token-learn)', () => {
  it('a worker without events that holds a CJK-like prompt (1 char per token learned) is an exact_hit', () => {
    const [a, b] = makeWorkers(2, [1, 0]) as [
      ReturnType<typeof makeWorkers>[number],
      ReturnType<typeof makeWorkers>[number],
    ];
    const text = 'x'.repeat(100); // the workers counted 100 tokens: 1 char per token, learned
    const exact: ExactPrefixSource = {
      name: 'kv_events',
      exact: true,
      cachedTokens: (_in, ws) => ws.map((w) => (w === b ? 0 : undefined)),
      promptTokens: () => 100,
    };
    // As the composition root builds it: the configured prior (4) and the learned ratio per model.
    const policy = createPolicy('kv_aware', {
      cacheAware: { charsPerToken: 4, prefixHomeMargin: 0 },
      exactPrefix: exact,
      cacheAwareDeps: { charsPerToken: () => 1 },
    });
    policy.addWorker?.(a);
    policy.addWorker?.(b);
    policy.routed?.({ worker: a, branch: 'seed' }, input([a, b], { text }), 1);
    const d = policy.select(input([a, b], { text }));
    // At the prior A would seem to hold 25 of 100 tokens (below the 0.3 threshold): a miss to B.
    expect(d.matchRate).toBe(1);
    expect(d.worker).toBe(a);
    expect(d.branch).toBe('exact_hit');
  });
});
