/**
 * Mooncake's overlapped legs (pd-dispatcher.ts `overlapped`, what `auto` runs for Mooncake): the decode
 * leg goes to Envoy as soon as the prefill request is on a connected socket. Against real pools (the
 * decode pool on power_of_two, the default decode policy) with a prefill client whose every leg waits
 * for the test to put it on its socket and to answer it:
 *
 *   - a burst whose prefill connections are still opening spreads over the decode workers: each
 *     request's decode load counts from its dispatch, not from its handover, else every request of the
 *     burst sees the decode workers idle and power_of_two sends them all to the first one;
 *   - every early end (the client gone before the handover, a prefill instance unreachable, a retry)
 *     releases the decode load and the DP-rank lease once;
 *   - a decode that answers an error (vLLM's 400 for a `max_tokens` too large for the prompt, which the
 *     prefill leg's one token never is; Envoy's 503 for an unreachable decode worker) aborts the prefill
 *     leg still running: vLLM aborts a request whose connection closes, and Mooncake then frees its KV
 *     blocks at once (request_finished: not FINISHED_LENGTH_CAPPED) instead of computing the prompt and
 *     holding them for a pull that never comes (VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT, 480 s).
 */
import { describe, expect, it } from 'vitest';
import {
  PrefillError,
  type PrefillClient,
  type PrefillLegOptions,
  type PrefillResult,
} from '../../../src/pd/prefill-client.js';
import type { Dispatch } from '../../../src/extproc/dispatch.js';
import type { BootstrapDirectory, RankLease } from '../../../src/pd/mooncake-bootstrap.js';
import type { PdObserver } from '../../../src/pd/pd-dispatcher.js';
import type { Worker } from '../../../src/workers/worker.js';
import { harness, register } from '../workers/pool-harness.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';

interface Leg {
  readonly worker: Worker;
  readonly signal: AbortSignal;
  /** The request is on a connected socket (undici's onRequestStart). */
  sent(): void;
  resolve(r: PrefillResult): void;
  reject(e: unknown): void;
}

/** A prefill client whose legs wait for the test: to be sent, then answered. */
class LegClient {
  readonly legs: Leg[] = [];
  send(
    worker: Worker,
    _path: string,
    _body: Buffer,
    _headers: Readonly<Record<string, string>>,
    _requestId: string,
    signal: AbortSignal,
    _timeoutMs: number,
    leg: PrefillLegOptions = {},
  ): Promise<PrefillResult> {
    return new Promise((resolve, reject) => {
      this.legs.push({ worker, signal, sent: () => leg.onSent?.(), resolve, reject });
      signal.addEventListener('abort', () => reject(new PrefillError('aborted', 'aborted')), { once: true });
    });
  }
}

const OK: PrefillResult = { status: 200, kvTransferParams: undefined, cachedTokens: 0, stopped: false };

function setup(opts: { prefill?: number; retries?: number } = {}) {
  const h = harness();
  for (let i = 0; i < (opts.prefill ?? 1); i++) register(h.registry, 'prefill', 8000 + i);
  for (let i = 0; i < 2; i++) register(h.registry, 'decode', 9000 + i);
  const prefillPool = h.pool('prefill', 'round_robin');
  const decodePool = h.pool('decode', 'power_of_two');
  const client = new LegClient();
  const events: string[] = [];
  let leases = 0;
  const bootstrap = {
    notReady: new Set<Worker>(),
    acquireRank: (w: Worker): RankLease => {
      leases += 1;
      let released = false;
      return {
        rank: 0,
        engineId: `engine-${w.url}`,
        addr: 'http://10.0.0.1:8998',
        release: () => {
          if (!released) leases -= 1;
          released = true;
        },
      };
    },
    invalidate: (w: Worker) => events.push(`invalidate:${w.url}`),
    recheck: (w: Worker) => events.push(`recheck:${w.url}`),
  } as unknown as BootstrapDirectory;
  const pd: PdObserver = {
    prefillEnded: (w, outcome) => events.push(`prefillEnded:${w.url}:${outcome}`),
    decodeRouted: (w) => events.push(`decodeRouted:${w.url}`),
    decodeAbandoned: (w) => events.push(`decodeAbandoned:${w.url}`),
  };
  const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
    pd,
    client: client as unknown as PrefillClient,
    connector: 'mooncake',
    dispatch: 'auto',
    prefillTimeoutMs: 1000,
    prefillRetries: opts.retries ?? 0,
    decisionHeader: false,
    bootstrap,
  });
  prefillPool.reconcile();
  decodePool.reconcile();
  const loads = () => ({
    prefill: prefillPool.workers.map((w) => w.load),
    decode: decodePool.workers.map((w) => w.load),
    leases,
  });
  const dispatch = () => dispatcher.dispatch(COMPLETION_REQ, new AbortController()) as Promise<Dispatch>;
  return { dispatcher, dispatch, client, events, loads, decodePool };
}

const IDLE = { prefill: [0], decode: [0, 0], leases: 0 };

describe('Mooncake overlapped legs: a burst', () => {
  it('spreads over the decode workers while its prefill connections are still opening', async () => {
    const s = setup();
    const p1 = s.dispatch();
    const p2 = s.dispatch();
    // Neither prefill request is on a socket yet; each decode worker has one decode leg coming.
    expect(s.loads()).toEqual({ prefill: [2], decode: [1, 1], leases: 2 });
    for (const leg of s.client.legs) leg.sent();
    const [d1, d2] = await Promise.all([p1, p2]);
    expect(d1.worker).not.toBe(d2.worker);
    expect(s.loads()).toEqual({ prefill: [2], decode: [1, 1], leases: 2 });
    for (const leg of s.client.legs) leg.resolve(OK);
    await Promise.all([d1.failure, d2.failure]);
    d1.finish({ kind: 'response', status: 200 });
    d2.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual(IDLE);
  });
});

describe('Mooncake overlapped legs: ended before the handover', () => {
  it('the client going away: 499, the leg aborted, decode load and lease released once', async () => {
    const s = setup();
    const cancel = new AbortController();
    const pending = s.dispatcher.dispatch(COMPLETION_REQ, cancel) as Promise<Dispatch>;
    cancel.abort();
    await expect(pending).rejects.toMatchObject({ status: 499 });
    expect(s.client.legs[0]!.signal.aborted).toBe(true);
    expect(s.events).toContain('decodeAbandoned:http://10.0.0.1:9000');
    expect(s.events.filter((e) => e.startsWith('decodeRouted'))).toEqual([]);
    expect(s.loads()).toEqual(IDLE);
  });

  it('a prefill instance unreachable, nothing to retry on: 502, nothing left held', async () => {
    const s = setup();
    const pending = s.dispatch();
    s.client.legs[0]!.reject(new PrefillError('transport', 'connect ECONNREFUSED'));
    await expect(pending).rejects.toMatchObject({ status: 502 });
    expect(s.events).toContain('invalidate:http://10.0.0.1:8000');
    expect(s.loads()).toEqual(IDLE);
  });

  it('a prefill instance unreachable, retried on another: the decode load stays one request', async () => {
    const s = setup({ prefill: 2, retries: 1 });
    const prefillLoad = () => s.loads().prefill.reduce((a, b) => a + b, 0);
    const pending = s.dispatch();
    expect(prefillLoad()).toBe(1);
    expect(s.loads().decode).toEqual([1, 0]);
    s.client.legs[0]!.reject(new PrefillError('transport', 'connect ECONNREFUSED'));
    await new Promise((r) => setImmediate(r));
    expect(s.client.legs).toHaveLength(2);
    expect(s.client.legs[1]!.worker).not.toBe(s.client.legs[0]!.worker);
    expect(prefillLoad()).toBe(1);
    expect(s.loads().decode).toEqual([1, 0]);
    expect(s.loads().leases).toBe(1);
    s.client.legs[1]!.sent();
    const d = await pending;
    s.client.legs[1]!.resolve(OK);
    await d.failure;
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0, 0], leases: 0 });
  });
});

describe('Mooncake overlapped legs: the decode answered while the prefill leg runs', () => {
  it.each([400, 500, 503])('%i: the prefill leg is aborted and nothing is left held', async (status) => {
    const s = setup();
    const pending = s.dispatch();
    s.client.legs[0]!.sent();
    const d = await pending;
    d.finish({ kind: 'response', status });
    expect(s.client.legs[0]!.signal.aborted).toBe(true);
    await expect(d.failure).rejects.toMatchObject({ code: 'client_cancelled' });
    expect(s.events).toContain('prefillEnded:http://10.0.0.1:8000:aborted');
    // A 5xx may mean stale engine ids (a restarted prefill instance): asked again, as before.
    expect(s.events.includes('recheck:http://10.0.0.1:8000')).toBe(status >= 500);
    expect(s.loads()).toEqual(IDLE);
  });

  it('200: the prefill leg runs to its end', async () => {
    const s = setup();
    const pending = s.dispatch();
    s.client.legs[0]!.sent();
    const d = await pending;
    d.finish({ kind: 'response', status: 200 });
    expect(s.client.legs[0]!.signal.aborted).toBe(false);
    s.client.legs[0]!.resolve(OK);
    await d.failure;
    expect(s.events).toContain('prefillEnded:http://10.0.0.1:8000:ok');
    expect(s.loads()).toEqual(IDLE);
  });
});

/**
 * The decode worker of a short answer can end it as soon as the KV arrived, before the router has read
 * the prefill worker's own response: the usage it reports (every prompt token cached, since they all
 * came by transfer) still gets the prefill worker's figure.
 */
describe("Mooncake overlapped legs: the decode's usage before the prefill worker's answer", () => {
  const USAGE = { prompt_tokens: 40, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 40 } };
  const streamedReq = {
    ...COMPLETION_REQ,
    inference: { ...COMPLETION_REQ.inference!, stream: true },
  };
  const cachedIn = (out: Buffer | undefined) => {
    const frame = (out ?? Buffer.alloc(0)).toString().split('\n\n')[0]!;
    return (JSON.parse(frame.slice('data: '.length)) as { usage: typeof USAGE }).usage.prompt_tokens_details
      .cached_tokens;
  };

  it("a streamed answer's usage frame carries the prefill worker's cached tokens", async () => {
    const s = setup();
    const pending = s.dispatcher.dispatch(streamedReq, new AbortController()) as Promise<Dispatch>;
    s.client.legs[0]!.sent();
    const d = await pending;
    d.onResponseStart?.(200, true);
    const frame = Buffer.from(`data: ${JSON.stringify({ choices: [], usage: USAGE })}\n\ndata: [DONE]\n\n`);
    const out = d.transformResponseChunk?.(frame, true);
    s.client.legs[0]!.resolve({ ...OK, cachedTokens: 16 });
    expect(cachedIn(await out)).toBe(16);
    await d.failure;
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual(IDLE);
  });

  it("a whole JSON answer carries the prefill worker's cached tokens", async () => {
    const s = setup();
    const pending = s.dispatch();
    s.client.legs[0]!.sent();
    const d = await pending;
    d.onResponseStart?.(200, true);
    const body = Buffer.from(JSON.stringify({ choices: [{ text: 'a' }], usage: USAGE }));
    const out = d.transformResponseChunk?.(body, true);
    s.client.legs[0]!.resolve({ ...OK, cachedTokens: 16 });
    const json = JSON.parse(((await out) ?? body).toString()) as { usage: typeof USAGE };
    expect(json.usage.prompt_tokens_details.cached_tokens).toBe(16);
    await d.failure;
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual(IDLE);
  });

  it('a prefill leg failing after the decode answered whole: the answer goes on, without cached_tokens', async () => {
    const s = setup();
    const pending = s.dispatcher.dispatch(streamedReq, new AbortController()) as Promise<Dispatch>;
    s.client.legs[0]!.sent();
    const d = await pending;
    d.onResponseStart?.(200, true);
    const frame = Buffer.from(`data: ${JSON.stringify({ choices: [], usage: USAGE })}\n\n`);
    const out = d.transformResponseChunk?.(frame, false);
    s.client.legs[0]!.reject(new PrefillError('timeout', 'prefill timed out'));
    expect(cachedIn(await out)).toBeUndefined();
    // Not a failure the session resets the whole answer for.
    await expect(d.failure).resolves.toBeUndefined();
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual(IDLE);
  });
});
