/**
 * the per-worker counters bumped on the request path (wiring.ts: prefill legs and decode legs
 * per worker in P/D mode, failovers per chosen worker) keep their `worker` series after the worker
 * left the pools. Every other per-worker series is read from the live pools at scrape time and goes
 * with the worker (metrics.ts header); these never do, so with pod churn (each new pod a new URL)
 * /metrics grows without bound.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import { DEPARTED_SERIES_MS } from '../../../src/observability/metrics.js';
import { testConfig } from '../../support/router-fixture.js';

describe('per-worker counters of a departed worker', () => {
  it('stay for several scrapes after the worker left (its failovers count then), then leave /metrics', async () => {
    let now = 0;
    const c = wireRouter(testConfig({ mode: 'pd' }), { logger: pino({ level: 'silent' }), clock: () => now });
    const prefill = 'http://127.0.0.1:9811';
    const decode = 'http://127.0.0.1:9812';
    c.registry.register({ role: 'prefill', url: prefill, endpoint: '127.0.0.1:9811' });
    c.registry.register({ role: 'decode', url: decode, endpoint: '127.0.0.1:9812' });
    const [p] = c.pools.byRole.prefill.workers;
    const [d] = c.pools.byRole.decode.workers;
    // What the request path records (wiring.ts: pd.prefillEnded, pd.decodeRouted, onFailover).
    c.metrics.pdPrefillRequests.inc({ worker: p!.key });
    c.metrics.pdDecodeRequests.inc({ worker: d!.key });
    c.metrics.failovers.inc({ worker: d!.key, adopted: 'true' });
    expect(await c.metrics.text()).toContain(`worker="${decode}"`);

    c.registry.deregister('prefill', prefill);
    c.registry.deregister('decode', decode);
    expect(c.pools.workers()).toEqual([]);
    const left = async () =>
      (await c.metrics.text())
        .split('\n')
        .filter((l) => !l.startsWith('#') && /worker="http:\/\/127\.0\.0\.1:981[12]"/.test(l));
    expect(await left()).toHaveLength(3); // a dead worker's failovers are what an operator looks for
    now += DEPARTED_SERIES_MS;
    c.registry.register({ role: 'regular', url: 'http://127.0.0.1:9819', endpoint: '127.0.0.1:9819' }); // any change
    expect(await left()).toEqual([]);
  });

  it('a worker that is still a member keeps its counts (a new generation at its URL included)', async () => {
    const c = wireRouter(testConfig({ mode: 'pd' }), { logger: pino({ level: 'silent' }), clock: () => 0 });
    const decode = 'http://127.0.0.1:9813';
    c.registry.register({ role: 'decode', url: decode, endpoint: '127.0.0.1:9813' });
    c.metrics.pdDecodeRequests.inc({ worker: c.pools.byRole.decode.workers[0]!.key });
    c.registry.register({ role: 'decode', url: decode, endpoint: '127.0.0.2:9813' }); // replaced: a new process
    expect(c.pools.byRole.decode.workers).toHaveLength(1);
    expect(await c.metrics.text()).toContain(`vllm_router_pd_decode_requests_total{worker="${decode}"} 1`);
  });
});
