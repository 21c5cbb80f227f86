/**
 * The blocks of prompts routed to a worker count as pending there (kv-prefix-source.ts, for
 * --kv-pending-ttl-ms) under its Worker id. A worker that leaves its pool (deregistered, expired, or
 * replaced by a new process: a new generation, a new id) is never read under that id again, so its
 * entries were only ever dropped when the whole table reached its cap: with pod churn the router kept
 * up to 2^18 dead entries, sorted on every overflow. (Found by
 * test/unit/properties/worker-churn-fuzz.test.ts.)
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import type { Dispatch, Dispatcher } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { testConfig } from '../../support/router-fixture.js';

const TOKENIZER = `m=${new URL('../../fixtures/tokenizer', import.meta.url).pathname}`;

describe('pending KV blocks of a worker that left', () => {
  it('are dropped when it leaves its pool', async () => {
    let now = 1000;
    const c = wireRouter(
      testConfig({ policy: 'cache_aware', kvEventPort: 5557, kvEventBlockSize: 4, tokenizer: [TOKENIZER] }),
      { logger: pino({ level: 'silent' }), clock: () => now },
    );
    c.exact.start();
    const dispatcher = (c.grpc as unknown as { opts: { dispatcher: Dispatcher } }).opts.dispatcher;
    const pending = (c.exact.source!.pending as unknown as { byWorker: Map<string, unknown> }).byWorker;
    const url = 'http://127.0.0.1:19401';
    c.registry.register({ role: 'regular', url, endpoint: '127.0.0.1:19401' });
    const raw = Buffer.from(
      JSON.stringify({ model: 'm', prompt: 'the quick brown fox jumps over the lazy dog' }),
    );
    const d = dispatcher.dispatch(
      {
        method: 'POST',
        path: '/v1/completions',
        headers: {},
        body: raw,
        inference: parseInferenceRequest('completions', undefined, raw),
      },
      new AbortController(),
    ) as Dispatch;
    expect([...pending.keys()]).toEqual([d.worker.id]);
    d.finish({ kind: 'response', status: 200 });

    c.registry.deregister('regular', url); // the pod is deleted
    now += 60_000;
    expect([...pending.keys()]).toEqual([]);
    expect(c.pools.byRole.regular.workers.every((w) => w.load === 0)).toBe(true);
    await c.exact.close();
  });
});
