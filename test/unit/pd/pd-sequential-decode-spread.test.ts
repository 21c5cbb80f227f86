/**
 * A sequential P/D request (NIXL: the default connector's default dispatch) chooses its decode worker
 * with its prefill worker, but the decode guard is taken only when the prefill leg ends, up to
 * --prefill-timeout-ms later (design section 5: decode load is not counted during the prefill). A burst
 * that arrives while the first prefill legs still run must not see every decode worker idle: each
 * would be chosen as if the others had not been, and the burst would land on the pool's first
 * decode worker (power_of_two, the default decode policy, and least_load: 8 of 8; cache_aware: 6 of 8
 * here, 8 of 8 through the wiring's signals, test/e2e/pd.test.ts), the others idle. The decodes already chosen and waiting for their prefill count in the decode
 * policies' view of the load (`Worker.pending`), not in the load itself (nothing runs there yet: the
 * load gauge and the scrape blend keep counting what reached the worker), and each request releases
 * its pending decode exactly once: when its decode guard is taken, when its prefill leg fails, when
 * its client goes away, or when its decode worker left and another one is chosen.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { PrefillError, type PrefillClient, type PrefillResult } from '../../../src/pd/prefill-client.js';
import type { PolicyName } from '../../../src/routing/policy.js';
import type { Worker } from '../../../src/workers/worker.js';
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

const OK: PrefillResult = { status: 200, kvTransferParams: NIXL_PARAMS, cachedTokens: 0, stopped: false };

interface HeldLeg {
  answer(r: PrefillResult): void;
  fail(e: PrefillError): void;
}

/** A completion with its own prompt (cold traffic: no prefix shared with the others). */
function request(i: number): RouteRequest {
  const prompt = `request ${i}: ${'lorem ipsum '.repeat(20 + i)}`;
  const json = { model: 'm', prompt, max_tokens: 4 };
  return {
    ...COMPLETION_REQ,
    inference: { ...COMPLETION_REQ.inference!, text: prompt, json, promptBody: json },
  };
}

function setup(decodePolicy: PolicyName, decodeWorkers = 2) {
  const h = harness();
  register(h.registry, 'prefill', 8000);
  for (let i = 0; i < decodeWorkers; i++) register(h.registry, 'decode', 9000 + i);
  const prefillPool = h.pool('prefill', 'round_robin');
  const decodePool = h.pool('decode', decodePolicy);
  // Every prefill leg is held until the test answers it; a leg whose signal aborts rejects as the
  // real client does (PrefillError 'aborted').
  const legs: HeldLeg[] = [];
  const client = {
    send: (_w: unknown, _p: unknown, _b: unknown, _h: unknown, _id: unknown, signal: AbortSignal) =>
      new Promise<PrefillResult>((resolve, reject) => {
        legs.push({ answer: resolve, fail: reject });
        signal.addEventListener('abort', () => reject(new PrefillError('aborted', 'client went away')), {
          once: true,
        });
      }),
  } as unknown as PrefillClient;
  const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
    client,
    connector: 'nixl',
    dispatch: 'auto',
    prefillTimeoutMs: 60_000,
    prefillRetries: 0,
    decisionHeader: false,
  });
  decodePool.reconcile();
  const decodes = (): readonly Worker[] => decodePool.workers;
  const settled = (): void => {
    for (const w of [...prefillPool.workers, ...decodePool.workers]) {
      expect(w.load).toBe(0);
      expect(w.pending).toBe(0);
      expect(dispatcher.pendingDecodes(w)).toBe(0);
    }
  };
  return { h, dispatcher, decodePool, decodes, legs, settled };
}

/** Sends `n` requests before any prefill leg answers, then answers them all. */
async function burst(s: ReturnType<typeof setup>, n: number): Promise<Dispatch[]> {
  const pending = Array.from(
    { length: n },
    (_, i) => s.dispatcher.dispatch(request(i), new AbortController()) as Promise<Dispatch>,
  );
  await Promise.resolve();
  expect(s.legs).toHaveLength(n);
  for (const leg of s.legs) leg.answer(OK);
  return Promise.all(pending);
}

describe('sequential P/D: a burst spreads over the decode workers while its prefill legs run', () => {
  for (const policy of ['power_of_two', 'least_load', 'cache_aware'] as const) {
    it(`${policy}: 8 requests over 2 idle decode workers load each with 4, not one with 8`, async () => {
      const s = setup(policy);
      const done = await burst(s, 8);
      expect(s.decodes().map((w) => w.load)).toEqual([4, 4]);
      for (const d of done) d.finish({ kind: 'response', status: 200 });
      s.settled();
    });
  }

  it('the decodes waiting for their prefill count for selection, not as load', async () => {
    const s = setup('least_load');
    const first = s.dispatcher.dispatch(request(0), new AbortController()) as Promise<Dispatch>;
    await Promise.resolve();
    const [w0, w1] = s.decodes() as [Worker, Worker];
    // Nothing runs on the decode worker yet (design section 5): its load, what the gauge shows, is 0.
    expect([w0.load, w0.pending, s.dispatcher.pendingDecodes(w0)]).toEqual([0, 1, 1]);
    const second = s.dispatcher.dispatch(request(1), new AbortController()) as Promise<Dispatch>;
    await Promise.resolve();
    expect([w1.load, w1.pending]).toEqual([0, 1]);
    for (const leg of s.legs) leg.answer(OK);
    const done = await Promise.all([first, second]);
    expect(done.map((d) => d.worker)).toEqual([w0, w1]);
    expect([w0.load, w0.pending, w1.load, w1.pending]).toEqual([1, 0, 1, 0]);
    for (const d of done) d.finish({ kind: 'response', status: 200 });
    s.settled();
  });
});

describe('sequential P/D: a pending decode is released once on every path', () => {
  it('the prefill leg fails', async () => {
    const s = setup('least_load');
    const pending = s.dispatcher.dispatch(request(0), new AbortController()) as Promise<Dispatch>;
    await Promise.resolve();
    expect(s.decodes()[0]!.pending).toBe(1);
    s.legs[0]!.fail(new PrefillError('status', 'prefill worker answered 500', 500));
    await expect(pending).rejects.toMatchObject({ status: 502 });
    s.settled();
  });

  it('the client goes away during the prefill leg', async () => {
    const s = setup('least_load');
    const cancel = new AbortController();
    const pending = s.dispatcher.dispatch(request(0), cancel) as Promise<Dispatch>;
    await Promise.resolve();
    expect(s.decodes()[0]!.pending).toBe(1);
    cancel.abort();
    await expect(pending).rejects.toMatchObject({ status: 499 });
    s.settled();
  });

  it('the decode worker left during the prefill leg: another one takes the decode', async () => {
    const s = setup('least_load', 1);
    const chosen = s.decodes()[0]!;
    const pending = s.dispatcher.dispatch(request(0), new AbortController()) as Promise<Dispatch>;
    await Promise.resolve();
    expect(chosen.pending).toBe(1);
    s.h.registry.deregister('decode', urlOf(9000).url);
    register(s.h.registry, 'decode', 9001);
    s.legs[0]!.answer(OK);
    const d = await pending;
    expect(d.worker).not.toBe(chosen);
    expect([chosen.load, chosen.pending, d.worker.load, d.worker.pending]).toEqual([0, 0, 1, 0]);
    d.finish({ kind: 'response', status: 200 });
    s.settled();
    expect([chosen.load, chosen.pending]).toEqual([0, 0]);
  });
});
