/**
 * a sequential Mooncake prefill attempt that gets no DP-rank lease (BootstrapDirectory
 * acquireRank() -> undefined: e.g. a data-parallel rank Worker whose rank the bootstrap server does not
 * list yet, or an untracked worker) must not keep the prefill worker's load. The overlapped path
 * releases it; the sequential path (`--pd-dispatch sequential`) does not.
 */
import { describe, expect, it } from 'vitest';
import { PdDispatcher } from '../../../src/pd/pd-dispatcher.js';
import type { PrefillClient } from '../../../src/pd/prefill-client.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import type { BootstrapDirectory } from '../../../src/pd/mooncake-bootstrap.js';
import type { PdDispatchMode } from '../../../src/pd/kv-transfer.js';
import { harness, register } from '../workers/pool-harness.js';

const REQ: RouteRequest = COMPLETION_REQ;

function setup(mode: PdDispatchMode) {
  const h = harness();
  register(h.registry, 'prefill', 8000);
  register(h.registry, 'decode', 9000);
  const prefillPool = h.pool('prefill', 'round_robin');
  const decodePool = h.pool('decode', 'round_robin');
  // Selectable (not in notReady), but no lease: what the real directory does for a rank Worker whose
  // rank the bootstrap answer lacks.
  const bootstrap = {
    notReady: new Set(),
    acquireRank: () => undefined,
    invalidate: () => undefined,
    recheck: () => undefined,
  } as unknown as BootstrapDirectory;
  const calls: unknown[] = [];
  const client = { send: (...a: unknown[]) => (calls.push(a), new Promise(() => undefined)) };
  const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
    client: client as unknown as PrefillClient,
    connector: 'mooncake',
    dispatch: mode,
    prefillTimeoutMs: 1000,
    prefillRetries: 0,
    decisionHeader: false,
    bootstrap,
  });
  prefillPool.reconcile();
  decodePool.reconcile();
  const loads = () => ({
    prefill: prefillPool.workers.map((w) => w.load),
    decode: decodePool.workers.map((w) => w.load),
  });
  return { dispatcher, loads, calls };
}

describe('Mooncake prefill attempt without a rank lease', () => {
  it('sequential: 502, and the prefill guard is released', async () => {
    const s = setup('sequential');
    const err = await (s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ status: 502 });
    expect(s.calls).toHaveLength(0);
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it('auto (overlapped), for comparison: same 502, no load left', async () => {
    const s = setup('auto' as PdDispatchMode);
    const err = await (s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({ status: 502 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });
});

// The same with the real pieces: a prefill server of 2 data-parallel ranks (one Worker per rank,
// --intra-node-data-parallel-size 2) whose Mooncake bootstrap server lists rank 0 only so far (ranks
// register one by one). The directory marks both rank Workers ready; rank 1 gets no lease.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { BootstrapDirectory as RealDirectory } from '../../../src/pd/mooncake-bootstrap.js';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';

describe('real BootstrapDirectory, a DP rank the bootstrap server does not list yet', () => {
  it('sequential: no prefill load is left behind by the rank without an engine id', async () => {
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ '0': { engine_id: 'engine-0' } }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as AddressInfo).port;
    const now = 1000;
    const registry = new ServiceRegistry({ ttlMs: 5000, clock: () => now });
    const readyOnce: Array<() => void> = [];
    const bootstrap = new RealDirectory({
      onChange: (_w, v) => {
        if (v.state === 'ready') for (const r of readyOnce.splice(0)) r();
      },
    });
    registry.register({
      role: 'prefill',
      url: 'http://127.0.0.1:1',
      endpoint: '127.0.0.1:1',
      bootstrapPort: port,
    });
    registry.register({ role: 'decode', url: 'http://10.0.0.1:9000', endpoint: '10.0.0.1:9000' });
    const prefillPool = new WorkerPool('prefill', createPolicy('round_robin', {}), registry, {
      dataParallelSize: 2,
      onAdded: (w) => bootstrap.track(w),
    });
    const decodePool = new WorkerPool('decode', createPolicy('round_robin', {}), registry);
    const bothReady = new Promise<void>((r) => {
      let n = 0;
      readyOnce.push(() => (++n === 2 ? r() : readyOnce.push(() => r())));
    });
    prefillPool.reconcile();
    decodePool.reconcile();
    await bothReady;
    expect(prefillPool.workers.map((w) => [w.dpRank, bootstrap.isReady(w)])).toEqual([
      [0, true],
      [1, true],
    ]);
    const client = { send: () => new Promise(() => undefined) }; // a leg that reaches a worker never ends here
    const observer = {};
    const dispatcher = new PdDispatcher({
      prefillPool,
      decodePool,
      passthrough: new PoolDispatcher({
        pool: decodePool,
        observer,
        clock: () => now,
        decisionHeader: false,
      }),
      observer,
      client: client as unknown as PrefillClient,
      clock: () => now,
      connector: 'mooncake',
      dispatch: 'sequential',
      prefillTimeoutMs: 1000,
      prefillRetries: 0,
      decisionHeader: false,
      bootstrap,
    });
    const rank1 = prefillPool.workers.find((w) => w.dpRank === 1)!;
    // Round robin reaches rank 1 within two requests; the rank-0 leg stays in flight (never answered),
    // so the first request to settle is the one that went to rank 1.
    const p1 = dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    const p2 = dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    const failed = await Promise.race([p1.catch((e: unknown) => e), p2.catch((e: unknown) => e)]);
    expect(failed).toMatchObject({ status: 502 });
    expect(rank1.load).toBe(0);
    await bootstrap.close();
    await new Promise<void>((r) => server.close(() => r()));
  });
});
