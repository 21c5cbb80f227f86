/**
 * A sequential P/D request chooses its decode worker with its prefill worker, before the prefill leg;
 * the decode leg goes out when that leg ends, up to --prefill-timeout-ms later. A decode worker that
 * left the fleet meanwhile (deregistered: a Kubernetes pod deleted; expired: its process died; or
 * another process registered at its URL: a new generation) must not get the decode leg: Envoy would
 * dial a gone process (a 503 after a prefill that succeeded, while other decode workers are up), or
 * hand a new process a request whose load counts on the departed Worker. With NIXL the decode worker
 * pulls the KV blocks the prefill worker named, so another decode worker is chosen; with a connector
 * whose prefill pushed the KV toward the chosen one (P2P NCCL), the request fails at once (503).
 * (Found by test/unit/properties/worker-churn-fuzz.test.ts.)
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch } from '../../../src/extproc/dispatch.js';
import type { KvConnector } from '../../../src/pd/kv-transfer.js';
import type { PrefillClient, PrefillResult } from '../../../src/pd/prefill-client.js';
import { harness, register, urlOf } from '../workers/pool-harness.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';

const NIXL_PARAMS = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_engine_id: 'e1',
  remote_block_ids: [1],
  remote_host: '10.0.0.1',
  remote_port: 5600,
};

function setup(connector: KvConnector) {
  const h = harness();
  register(h.registry, 'prefill', 8000);
  register(h.registry, 'decode', 9000);
  const prefillPool = h.pool('prefill', 'round_robin');
  const decodePool = h.pool('decode', 'round_robin');
  let answer!: (r: PrefillResult) => void;
  const client = {
    send: () => new Promise<PrefillResult>((resolve) => (answer = resolve)),
  } as unknown as PrefillClient;
  const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
    client,
    connector,
    dispatch: 'sequential',
    prefillTimeoutMs: 60_000,
    prefillRetries: 0,
    decisionHeader: false,
  });
  const dispatch = async (during: () => void): Promise<Dispatch> => {
    const pending = dispatcher.dispatch(COMPLETION_REQ, new AbortController()) as Promise<Dispatch>;
    during();
    answer({ status: 200, kvTransferParams: NIXL_PARAMS, cachedTokens: 0, stopped: false });
    return pending;
  };
  return { h, decodePool, dispatch };
}

describe('sequential P/D: the decode worker left during the prefill leg', () => {
  it('NIXL: the decode leg goes to a decode worker still in the fleet', async () => {
    const s = setup('nixl');
    s.decodePool.reconcile();
    const chosen = s.decodePool.workers[0]!;
    const d = await s.dispatch(() => {
      s.h.registry.deregister('decode', urlOf(9000).url); // the pod is deleted
      register(s.h.registry, 'decode', 9001);
    });
    expect(d.worker.url).toBe(urlOf(9001).url);
    expect(d.setHeaders['x-gateway-destination-endpoint']).toBe(urlOf(9001).endpoint);
    expect(chosen.load).toBe(0);
    expect(d.worker.load).toBe(1);
    d.finish({ kind: 'response', status: 200 });
    expect(s.decodePool.workers.map((w) => w.load)).toEqual([0]);
  });

  it('NIXL: a new process at the URL is a new decode worker, and carries the load', async () => {
    const s = setup('nixl');
    s.decodePool.reconcile();
    const old = s.decodePool.workers[0]!;
    const d = await s.dispatch(() => {
      s.h.clock.advance(6000); // the old process's heartbeats stopped: expired
      register(s.h.registry, 'decode', 9000); // a new process at the URL
    });
    expect(d.worker).not.toBe(old);
    expect(d.worker.generation).toBeGreaterThan(old.generation);
    expect(s.decodePool.workers).toEqual([d.worker]);
    expect(d.worker.load).toBe(1);
    expect(old.load).toBe(0);
    d.finish({ kind: 'response', status: 200 });
    expect(d.worker.load).toBe(0);
  });

  it('P2P NCCL (the KV went toward the chosen worker): 503, no guard on the departed worker', async () => {
    const s = setup('p2pnccl');
    s.decodePool.reconcile();
    const chosen = s.decodePool.workers[0]!;
    const err = await s
      .dispatch(() => {
        s.h.registry.deregister('decode', urlOf(9000).url);
        register(s.h.registry, 'decode', 9001);
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: 503 });
    expect(chosen.load).toBe(0);
    expect(s.decodePool.workers.map((w) => w.load)).toEqual([0]);
  });
});
