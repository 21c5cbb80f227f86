/**
 * the KV-event counters and the lag histogram are labelled by worker
 * (observability/kv-event-metrics.ts) and nothing removes a worker's series when it leaves: the
 * subscription is closed (kv-event-subscriptions.ts sync) but vllm_router_kv_events_received_total,
 * ..._applied_total, vllm_router_kv_event_lag_seconds (14 series per worker) etc. stay on /metrics for
 * the life of the process. With pod churn (each new pod a new URL) /metrics grows without bound.
 * (vllm_router_kv_index_blocks is read at scrape time and does leave.)
 */
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { createExactPrefix } from '../../../src/kv-events/exact-prefix.js';
import { KvEventPublisher } from '../../../src/sim/kv-event-publisher.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';
import { DEPARTED_SERIES_MS } from '../../../src/observability/metrics.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

describe('KV-event series of a departed worker', () => {
  it('leave /metrics once the worker has left', async () => {
    const pub = new KvEventPublisher();
    const { endpoint } = await pub.start();
    closers.push(() => pub.close());
    const worker = new Worker({
      role: 'regular',
      url: 'http://127.0.0.1:8000',
      endpoint: '127.0.0.1:8000',
      generation: 1,
    });
    let members: Worker[] = [worker];
    let now = 0;
    const registry = new Registry();
    const exact = createExactPrefix(
      {
        kvEventSource: [`${worker.url}=${endpoint}`],
        kvEventReplay: [],
        kvEventPort: 0,
        kvEventReplayPort: 0,
        kvEventDpSize: 1,
        kvEventBlockSize: 4,
        kvIndexMaxBlocks: 10_000,
        kvTierCredit: ['GPU=1'],
        tokenizer: [],
        serviceDiscovery: false,
        kvEventTopic: '',
        kvPendingTtlMs: 60_000,
        tokenizerCacheChars: 1 << 20,
      },
      registry,
      () => members,
      pino({ level: 'silent' }),
      () => now,
    );
    closers.push(() => exact.close());
    exact.start();
    exact.sync();
    let h = 1n;
    await waitFor(async () => {
      if ((exact.subscriptions!.sizes().get(worker.url) ?? 0) > 0) return true;
      await pub.publish([
        { type: 'stored', hashes: [h++], parent: undefined, tokens: [1, 2, 3, 4], blockSize: 4 },
      ]);
      return false;
    });
    expect(await registry.metrics()).toMatch(
      /vllm_router_kv_events_received_total\{worker="http:\/\/127\.0\.0\.1:8000"\}/,
    );

    members = []; // the worker left (the registry change reconciles the subscriptions)
    exact.sync();
    expect(exact.subscriptions!.publishes(worker.url)).toBe(false);
    // Kept a few scrapes (its last counts), then gone at a registry change after DEPARTED_SERIES_MS.
    expect(await registry.metrics()).toContain('worker="http://127.0.0.1:8000"');
    now += DEPARTED_SERIES_MS;
    exact.sync();
    const left = (await registry.metrics())
      .split('\n')
      .filter((l) => !l.startsWith('#') && l.includes('worker="http://127.0.0.1:8000"'));
    expect(left).toEqual([]);
  });
});
