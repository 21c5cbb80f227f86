/**
 * PdDispatcher against real pools (ServiceRegistry on a fake clock, real policies) with a scripted
 * prefill client standing in for the HTTP leg, so every step of each dispatch mode can be observed:
 * which guard is held when, what the observer hears, and that every way a request ends returns all
 * loads to 0. (The leg over real HTTP and Envoy is covered by test/integration/pd and test/e2e/pd.)
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import type { PdObserver } from '../../../src/pd/pd-dispatcher.js';
import { PrefillError, type PrefillClient, type PrefillResult } from '../../../src/pd/prefill-client.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { RouterError } from '../../../src/request/router-error.js';
import type { Worker } from '../../../src/workers/worker.js';
import type { KvConnector, PdDispatchMode } from '../../../src/pd/kv-transfer.js';
import { harness, register } from '../workers/pool-harness.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { holderToken, responseIdFor, workerToken } from '../../../src/routing/response-affinity.js';
import { COMPLETION_REQ, pdDispatcherOver } from './pd-fixtures.js';
import { pino, type Logger } from 'pino';
import { prefillFailureLog } from '../../../src/pd/prefill-failure-log.js';

interface Call {
  worker: Worker;
  body: Buffer;
  requestId: string;
  signal: AbortSignal;
  resolve(r: PrefillResult): void;
  reject(e: unknown): void;
}

/** A prefill client whose every call waits for the test to answer it. */
class ScriptedClient {
  readonly calls: Call[] = [];
  private waiters: Array<() => void> = [];
  send(
    worker: Worker,
    _path: string,
    body: Buffer,
    _headers: Readonly<Record<string, string>>,
    requestId: string,
    signal: AbortSignal,
  ): Promise<PrefillResult> {
    return new Promise((resolve, reject) => {
      this.calls.push({ worker, body, requestId, signal, resolve, reject });
      for (const w of this.waiters.splice(0)) w();
      signal.addEventListener('abort', () => reject(new PrefillError('aborted', 'aborted')), { once: true });
    });
  }
  /** Resolves once the n-th call (1-based) was made. */
  async call(n: number): Promise<Call> {
    while (this.calls.length < n) await new Promise<void>((r) => this.waiters.push(r));
    return this.calls[n - 1] as Call;
  }
  async close(): Promise<void> {}
}

const OK: PrefillResult = {
  status: 200,
  kvTransferParams: { remote_engine_id: 'p', remote_block_ids: [1], remote_host: 'h', remote_port: 1 },
  cachedTokens: 3,
  stopped: false,
};

const REQ: RouteRequest = COMPLETION_REQ;

function setup(
  opts: {
    mode?: PdDispatchMode;
    connector?: KvConnector;
    prefill?: number;
    decode?: number;
    retries?: number;
    localMax?: number;
    fallbackSlots?: number;
    /** Failed legs are logged here (prefill-failure-log.ts), at most once per worker per `intervalMs`. */
    failureLog?: { logger: Logger; intervalMs: number };
  } = {},
) {
  const h = harness();
  for (let i = 0; i < (opts.prefill ?? 2); i++) register(h.registry, 'prefill', 8000 + i);
  for (let i = 0; i < (opts.decode ?? 1); i++) register(h.registry, 'decode', 9000 + i);
  const prefillPool = h.pool('prefill', 'round_robin');
  const decodePool = h.pool('decode', 'round_robin');
  const client = new ScriptedClient();
  const events: string[] = [];
  const durations: Array<number | undefined> = [];
  const pd: PdObserver = {
    prefillStarted: (w, decision) => {
      events.push(`prefillStarted:${w.url}:${decision.worker === w}`);
      return (ok) => events.push(`prefillLeg:${w.url}:${ok}`);
    },
    prefillEnded: (w, outcome, ms, status) => {
      events.push(`prefillEnded:${w.url}:${outcome}${status ? `:${status}` : ''}`);
      durations.push(ms);
    },
    decodeRouted: (w) => events.push(`decodeRouted:${w.url}`),
    localPrefill: (reason) => events.push(`localPrefill:${reason}`),
    decodeAbandoned: (w) => events.push(`decodeAbandoned:${w.url}`),
    error: (type) => events.push(`error:${type}`),
    ...(opts.failureLog
      ? { prefillFailed: prefillFailureLog(opts.failureLog.logger, h.clock.read, opts.failureLog.intervalMs) }
      : {}),
  };
  const dispatcher = pdDispatcherOver(h.clock.read, prefillPool, decodePool, {
    pd,
    client: client as unknown as PrefillClient,
    connector: opts.connector ?? 'nixl',
    dispatch: opts.mode ?? 'sequential',
    prefillTimeoutMs: 1000,
    prefillRetries: opts.retries ?? 1,
    decisionHeader: false,
    ...(opts.fallbackSlots !== undefined ? { fallbackSlots: opts.fallbackSlots } : {}),
    ...(opts.localMax !== undefined
      ? { localPrefill: { maxTokens: opts.localMax, tokensOf: (chars: number) => Math.ceil(chars / 4) } }
      : {}),
  });
  prefillPool.reconcile();
  decodePool.reconcile();
  const loads = () => ({
    prefill: prefillPool.workers.map((w) => w.load),
    decode: decodePool.workers.map((w) => w.load),
  });
  return { dispatcher, client, events, durations, loads, prefillPool, decodePool, clock: h.clock };
}

describe('PdDispatcher: sequential', () => {
  it('holds the prefill guard during the leg, then the decode guard until finish', async () => {
    const s = setup();
    const pending = s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    const call = await s.client.call(1);
    expect(s.loads()).toEqual({ prefill: [1, 0], decode: [0] });
    call.resolve(OK);
    const d = await pending;
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
    expect(d.worker).toBe(s.decodePool.workers[0]);
    expect(d.setHeaders['x-request-id']).toBe(call.requestId);
    expect(d.setHeaders['x-gateway-destination-endpoint']).toBe(s.decodePool.workers[0]?.endpoint);
    expect(JSON.parse((d.body as Buffer).toString()).kv_transfer_params).toMatchObject({
      remote_engine_id: 'p',
    });
    d.finish({ kind: 'response', status: 200 });
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
    expect(s.events).toEqual([
      `prefillStarted:${call.worker.url}:true`,
      `prefillLeg:${call.worker.url}:true`,
      `prefillEnded:${call.worker.url}:ok`,
      `decodeRouted:${d.worker.url}`,
    ]);
    expect(typeof s.durations[0]).toBe('number'); // the router ran this leg: it measured it
  });

  it.each([
    ['its one token ended the request (EOS, a stop): vLLM keeps no KV', true, []],
    ['capped at one token: its connector is not configured', false, ['error:prefill_no_kv_transfer_params']],
  ] as const)(
    'a prefill answering without kv_transfer_params sends the request whole to its decode worker, not a 502 (%s)',
    async (_what, stopped, errors) => {
      // vLLM's NIXL proxy (toy_proxy_server.py) sends the decode leg without them; the decode worker
      // prefills the prompt itself. NIXL's request_finished gives params only to a length-capped prefill.
      const s = setup();
      const req = {
        ...REQ,
        inference: { ...REQ.inference!, json: { ...REQ.inference!.json, kv_transfer_params: { x: 1 } } },
      };
      const pending = s.dispatcher.dispatch(req, new AbortController()) as Promise<Dispatch>;
      const call = await s.client.call(1);
      call.resolve({ status: 200, kvTransferParams: undefined, cachedTokens: 0, stopped });
      const d = await pending;
      expect(d.worker).toBe(s.decodePool.workers[0]);
      expect(d.setHeaders['x-request-id']).toBe(call.requestId);
      expect(JSON.parse((d.body as Buffer).toString())).toEqual({
        model: 'm',
        prompt: 'hello',
        max_tokens: 4,
      });
      expect(d.transformResponseChunk).toBeUndefined(); // the decode worker's own cached_tokens are honest
      expect(s.events.filter((e) => e.startsWith('error:'))).toEqual(errors);
      expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
      d.finish({ kind: 'response', status: 200 });
      expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
    },
  );

  it('with fallback endpoints, names the one decode worker in every slot (no retry reaches another)', async () => {
    const s = setup({ decode: 2, fallbackSlots: 2 });
    const pending = s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    (await s.client.call(1)).resolve(OK);
    const d = await pending;
    const ep = d.worker.endpoint;
    expect(d.setHeaders['x-gateway-destination-endpoint']).toBe(`${ep},${ep},${ep}`);
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0, 0] });
  });

  it('counts the decode worker as awaited while the leg runs (a drain for sleep waits for it)', async () => {
    const s = setup();
    const decode = s.decodePool.workers[0]!;
    const pending = s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    const call = await s.client.call(1);
    expect([decode.load, s.dispatcher.pendingDecodes(decode)]).toEqual([0, 1]);
    call.resolve(OK);
    const d = await pending;
    expect([decode.load, s.dispatcher.pendingDecodes(decode)]).toEqual([1, 0]);
    d.finish({ kind: 'response', status: 200 });
    // A failed leg gives it up too.
    const f = setup({ retries: 0 });
    const failing = f.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    (await f.client.call(1)).reject(new PrefillError('status', 'boom', 503));
    await failing.catch(() => undefined);
    const fd = f.decodePool.workers[0]!;
    expect([fd.load, f.dispatcher.pendingDecodes(fd)]).toEqual([0, 0]);
  });

  it('retries a failed leg on the other prefill worker', async () => {
    const s = setup();
    const pending = s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    const first = await s.client.call(1);
    first.reject(new PrefillError('status', 'boom', 503));
    const second = await s.client.call(2);
    expect(second.worker).not.toBe(first.worker);
    expect([first.worker.load, second.worker.load, s.decodePool.workers[0]?.load]).toEqual([0, 1, 0]);
    second.resolve(OK);
    const d = await pending;
    d.finish({ kind: 'cancelled', afterHeaders: true, status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
    expect(s.events).toContain('error:prefill_retry');
    expect(s.events).toContain(`prefillEnded:${first.worker.url}:status:503`);
    // Each attempt is its own leg (the cost model learns the successful one only).
    expect(s.events).toContain(`prefillLeg:${first.worker.url}:false`);
    expect(s.events).toContain(`prefillLeg:${second.worker.url}:true`);
  });

  it('every attempt failing is a 502 naming the last prefill worker; the decode worker is abandoned', async () => {
    const s = setup({ retries: 1 });
    const pending = s.dispatcher.dispatch(REQ, new AbortController()) as Promise<Dispatch>;
    (await s.client.call(1)).reject(new PrefillError('transport', 'refused'));
    const last = await s.client.call(2);
    last.reject(new PrefillError('timeout', 'slow'));
    const err = await pending.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RouterError);
    expect(err).toMatchObject({ status: 502, code: 'prefill_timeout' });
    expect((err as RouterError).message).toContain(last.worker.url);
    expect(s.events).toContain(`decodeAbandoned:${s.decodePool.workers[0]?.url}`);
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });

  it('the client going away aborts the leg: 499, nothing retried, no load left', async () => {
    const s = setup();
    const cancel = new AbortController();
    const pending = s.dispatcher.dispatch(REQ, cancel) as Promise<Dispatch>;
    await s.client.call(1);
    cancel.abort();
    await expect(pending).rejects.toMatchObject({ code: 'client_cancelled', status: 499 });
    expect(s.client.calls).toHaveLength(1);
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
    expect(s.events.find((e) => e.startsWith('prefillEnded'))).toMatch(/:aborted$/);
  });

  it('an empty role is a 503 naming the counts, with nothing reserved', () => {
    const s = setup({ decode: 0 });
    expect(() => s.dispatcher.dispatch(REQ, new AbortController())).toThrow(
      'No workers available: 2 prefill, 0 decode',
    );
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [] });
    expect(s.client.calls).toHaveLength(0);
  });

  it('a request without an inference body goes to a decode worker unchanged', () => {
    const s = setup();
    const d = s.dispatcher.dispatch(
      { method: 'GET', path: '/v1/models', headers: {} },
      new AbortController(),
    ) as Dispatch;
    expect(d.worker.role).toBe('decode');
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
    d.finish({ kind: 'response', status: 200 });
    expect(s.client.calls).toHaveLength(0);
    expect(s.loads().decode).toEqual([0]);
  });
});

describe('PdDispatcher: a failed prefill leg in the log', () => {
  it('logs a warn line naming the prefill worker, the error and the request ids; a burst logs one line', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const s = setup({ prefill: 1, retries: 0, failureLog: { logger, intervalMs: 1000 } });
    const fail = async (id: string, error: PrefillError) => {
      const n = s.client.calls.length + 1;
      const pending = s.dispatcher.dispatch(
        { ...REQ, headers: { 'x-request-id': id } },
        new AbortController(),
      ) as Promise<Dispatch>;
      const call = await s.client.call(n);
      call.reject(error);
      await expect(pending).rejects.toMatchObject({ status: 502 });
      return call;
    };
    const first = await fail('req-1', new PrefillError('transport', 'connect ECONNREFUSED'));
    expect(lines).toEqual([
      expect.objectContaining({
        level: 40,
        msg: 'prefill leg failed',
        worker: first.worker.url,
        error: 'transport',
        requestId: 'req-1',
        prefillRequestId: first.requestId,
        suppressed: 0,
      }),
    ]);
    // The worker is dead: every request fails on it. One line for the whole burst.
    for (let i = 0; i < 20; i++)
      await fail(`burst-${i}`, new PrefillError('transport', 'connect ECONNREFUSED'));
    s.clock.advance(999);
    await fail('late', new PrefillError('status', 'answered 503', 503));
    expect(lines).toHaveLength(1);
    // An interval later: the next failure is logged, with the count held back meanwhile.
    s.clock.advance(1);
    await fail('next', new PrefillError('status', 'answered 503', 503));
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatchObject({
      worker: first.worker.url,
      error: 'status',
      status: 503,
      requestId: 'next',
    });
    expect(lines[1]!.suppressed).toBe(21);
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it('logs nothing for a leg the client cut short', async () => {
    const lines: unknown[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => lines.push(line) });
    const s = setup({ failureLog: { logger, intervalMs: 1000 } });
    const cancel = new AbortController();
    const pending = s.dispatcher.dispatch(REQ, cancel) as Promise<Dispatch>;
    await s.client.call(1);
    cancel.abort();
    await expect(pending).rejects.toMatchObject({ code: 'client_cancelled' });
    expect(lines).toEqual([]);
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });
});

describe('PdDispatcher: /v1/responses', () => {
  const responsesRequest = (body: Record<string, unknown>): RouteRequest => {
    const raw = Buffer.from(JSON.stringify(body));
    return {
      method: 'POST',
      path: '/v1/responses',
      headers: {},
      body: raw,
      inference: parseInferenceRequest('responses', undefined, raw),
    };
  };

  it('runs a prefill leg that stores nothing, and names the response after the decode worker', async () => {
    const s = setup();
    const req = responsesRequest({ model: 'm', input: 'hi', max_output_tokens: 64, stream: true });
    const pending = s.dispatcher.dispatch(req, new AbortController()) as Promise<Dispatch>;
    const call = await s.client.call(1);
    expect(JSON.parse(call.body.toString())).toMatchObject({
      input: 'hi',
      max_output_tokens: 1,
      stream: false,
      store: false,
    });
    call.resolve(OK);
    const d = await pending;
    const decodeBody = JSON.parse((d.body as Buffer).toString());
    expect(decodeBody).toMatchObject({ input: 'hi', max_output_tokens: 64, stream: true });
    expect(holderToken(decodeBody.request_id)).toBe(workerToken(d.worker));
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });

  it.each(['p2pnccl', 'moriio'] as const)(
    '%s: both legs name their engine request after the P/D request id, which vLLM reads from the body',
    async (connector) => {
      // vLLM's Responses API names the engine request after the body's `request_id` (X-Request-Id is
      // ignored there); P2P NCCL and MoRI-IO parse the peers' addresses from that name.
      for (const body of [{}, { request_id: 'mine' }]) {
        const s = setup({ connector });
        const req = responsesRequest({ model: 'm', input: 'hi', stream: true, ...body });
        const pending = s.dispatcher.dispatch(req, new AbortController()) as Promise<Dispatch>;
        const call = await s.client.call(1);
        expect(call.requestId).toMatch(/^___prefill_addr_.+___decode_addr_.+_[0-9a-f]{32}$/);
        expect(JSON.parse(call.body.toString()).request_id).toBe(call.requestId);
        call.resolve(OK);
        const d = await pending;
        expect(d.setHeaders['x-request-id']).toBe(call.requestId);
        expect(JSON.parse((d.body as Buffer).toString()).request_id).toBe(call.requestId);
        d.finish({ kind: 'response', status: 200 });
        expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
      }
    },
  );

  it.each(['p2pnccl', 'moriio'] as const)(
    '%s: a follow-up of a response named after the P/D request id goes to the decode worker holding it',
    async (connector) => {
      // The response id the client sees is the P/D request id (vLLM names the response after the body's
      // `request_id`); only the decode worker that served it stored it.
      const s = setup({ connector, decode: 3 });
      const first = s.dispatcher.dispatch(
        responsesRequest({ model: 'm', input: 'hi', stream: true }),
        new AbortController(),
      ) as Promise<Dispatch>;
      (await s.client.call(1)).resolve(OK);
      const d = await first;
      const holder = d.worker;
      const id = JSON.parse((d.body as Buffer).toString()).request_id as string;
      d.finish({ kind: 'response', status: 200 });
      for (let i = 0; i < 3; i++) {
        const next = s.dispatcher.dispatch(
          responsesRequest({ model: 'm', input: `turn ${i}`, previous_response_id: id }),
          new AbortController(),
        ) as Dispatch;
        expect(next.worker).toBe(holder);
        next.finish({ kind: 'response', status: 200 });
      }
      expect(s.client.calls).toHaveLength(1);
      expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0, 0, 0] });
    },
  );

  it('sends a request that continues a stored response to its decode worker alone', () => {
    const s = setup({ decode: 3 });
    const holder = s.decodePool.workers[2]!;
    const previous = responseIdFor(holder);
    for (let i = 0; i < 3; i++) {
      const d = s.dispatcher.dispatch(
        responsesRequest({ model: 'm', input: `turn ${i}`, previous_response_id: previous }),
        new AbortController(),
      ) as Dispatch;
      expect(d.worker).toBe(holder);
      expect(holderToken(JSON.parse((d.body as Buffer).toString()).request_id)).toBe(workerToken(holder));
      d.finish({ kind: 'response', status: 200 });
    }
    expect(s.client.calls).toHaveLength(0);
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0, 0, 0] });
  });
});

describe('PdDispatcher: concurrent', () => {
  it('takes both guards at dispatch; each ends with its own phase', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    const call = await s.client.call(1);
    expect(s.loads()).toEqual({ prefill: [1], decode: [1] });
    call.resolve(OK);
    await d.failure;
    expect(s.loads()).toEqual({ prefill: [0], decode: [1] });
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it('a failed leg rejects `failure` with a 502 and leaves the decode guard to the session', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    (await s.client.call(1)).reject(new PrefillError('status', 'boom', 500));
    await expect(d.failure).rejects.toMatchObject({ code: 'prefill_failed', status: 502 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [1] });
    d.finish({ kind: 'rejected', status: 502, code: 'prefill_failed' });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it('a request that ends without a response aborts the running leg', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    const call = await s.client.call(1);
    d.finish({ kind: 'cancelled', afterHeaders: false });
    expect(call.signal.aborted).toBe(true);
    await expect(d.failure).rejects.toMatchObject({ code: 'client_cancelled' });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it.each([400, 503])(
    'a decode that answered %i (refused, or unreachable) aborts the leg still running: the prefill worker stops',
    async (status) => {
      const s = setup({ mode: 'concurrent', prefill: 1 });
      const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
      const call = await s.client.call(1);
      // e.g. vLLM's 400 "'max_tokens' ... is too large": the decode leg asks for them, the prefill leg for 1.
      d.finish({ kind: 'response', status });
      expect(call.signal.aborted).toBe(true);
      await expect(d.failure).rejects.toMatchObject({ code: 'client_cancelled' });
      expect(s.events).toContain('prefillEnded:http://10.0.0.1:8000:aborted');
      expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
    },
  );

  it('a decode that answered 200 keeps the leg to its end', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    const call = await s.client.call(1);
    d.finish({ kind: 'response', status: 200 });
    expect(call.signal.aborted).toBe(false);
    expect(s.loads()).toEqual({ prefill: [1], decode: [0] });
    call.resolve(OK);
    await d.failure;
    expect(s.events).toContain('prefillEnded:http://10.0.0.1:8000:ok');
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });

  it('a decode the gateway served on another decode worker keeps the leg; the load moves there', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1, decode: 2 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    const call = await s.client.call(1);
    const other = s.decodePool.workers.find((w) => w !== d.worker) as Worker;
    const req = { method: 'POST', path: '/v1/completions', headers: {} };
    const adopted = s.dispatcher.adopt(req, d, other.endpoint) as Dispatch;
    d.finish({ kind: 'failed_over', served: other.endpoint });
    expect(call.signal.aborted).toBe(false);
    expect(adopted.worker).toBe(other);
    expect(s.loads()).toEqual({
      prefill: [1],
      decode: s.decodePool.workers.map((w) => (w === other ? 1 : 0)),
    });
    call.resolve(OK);
    await d.failure;
    adopted.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0, 0] });
  });
});

describe('PdDispatcher: sidecar', () => {
  it('names the prefill worker; prefill ends at the first response byte with no duration recorded', () => {
    const s = setup({ mode: 'sidecar', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    const [pw] = s.prefillPool.workers;
    expect(d.setHeaders['x-prefiller-host-port']).toBe(pw?.endpoint);
    expect(s.loads()).toEqual({ prefill: [1], decode: [1] });
    d.onResponseStart?.(200, true);
    expect(s.loads()).toEqual({ prefill: [0], decode: [1] });
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
    expect(s.events).toContain(`prefillEnded:${pw?.url}:ok:200`);
    // The sidecar ran the prefill, not the router: no duration was measured, none is reported.
    expect(s.durations).toEqual([undefined]);
    expect(s.client.calls).toHaveLength(0);
  });

  it.each([
    ['a 5xx from the decode host', 503, 'status:503'],
    ['no response at all', undefined, 'aborted'],
  ])('%s ends the prefill as %s', (_name, status, outcome) => {
    const s = setup({ mode: 'sidecar', prefill: 1 });
    const d = s.dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    if (status !== undefined) d.onResponseStart?.(status, true);
    d.finish(
      status !== undefined ? { kind: 'response', status } : { kind: 'cancelled', afterHeaders: false },
    );
    expect(s.events).toContain(`prefillEnded:${s.prefillPool.workers[0]?.url}:${outcome}`);
    expect(s.durations).toEqual([undefined]);
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });
});

/** Node's gc(), exposed at run time (as the soak harness does). */
function exposeGc(): () => void {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}

describe('PdDispatcher: an open decode response does not keep the request alive', () => {
  // A 220 KB prompt held for the whole response survives young-generation GCs and waits for a full
  // one: the Dispatch may keep the decision and guards, never the request, its text or parsed body.
  it.each(['sequential', 'concurrent', 'sidecar'] as const)('%s', async (mode) => {
    const s = setup({ mode, prefill: 1 });
    const gc = exposeGc();
    const start = async (): Promise<{ d: Dispatch; body: WeakRef<object> }> => {
      const json = { model: 'm', prompt: 'x'.repeat(1000), max_tokens: 4 };
      const req: RouteRequest = {
        ...REQ,
        inference: { ...REQ.inference!, text: json.prompt, json },
      };
      const pending = s.dispatcher.dispatch(req, new AbortController());
      if (mode !== 'sidecar') (await s.client.call(1)).resolve(OK);
      const d = await pending;
      await d.failure;
      return { d, body: new WeakRef(json) };
    };
    const { d, body } = await start();
    for (let i = 0; i < 3 && body.deref() !== undefined; i++) {
      await new Promise((r) => setImmediate(r));
      gc();
    }
    expect(body.deref()).toBeUndefined();
    expect(s.loads().decode).toEqual([1]);
    d.onResponseStart?.(200, true);
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0], decode: [0] });
  });
});

describe("PdDispatcher: the gateway's endpoint subset", () => {
  it('narrows the decode workers, never the prefill leg; none allowed is a 503 that says so', async () => {
    const s = setup({ mode: 'concurrent', prefill: 1, decode: 2 });
    const allowed = s.decodePool.workers[1] as Worker;
    for (let n = 0; n < 3; n++) {
      const d = s.dispatcher.dispatch({ ...REQ, subset: new Set([allowed.endpoint]) }, new AbortController());
      const call = await s.client.call(n + 1);
      expect((d as Dispatch).worker).toBe(allowed);
      call.resolve(OK);
      await (d as Dispatch).failure;
      (d as Dispatch).finish({ kind: 'response', status: 200 });
    }
    expect(() =>
      s.dispatcher.dispatch({ ...REQ, subset: new Set(['10.9.9.9:1']) }, new AbortController()),
    ).toThrow(
      expect.objectContaining({
        status: 503,
        message: expect.stringContaining('endpoints the gateway allows'),
      }),
    );
    expect(s.loads()).toEqual({ prefill: [0], decode: [0, 0] });
  });
});

describe('PdDispatcher: selective disaggregation (localPrefill)', () => {
  const withPrompt = (prompt: string): RouteRequest => ({
    ...REQ,
    inference: {
      ...REQ.inference!,
      text: prompt,
      json: { model: 'm', prompt },
      promptBody: { model: 'm', prompt },
    },
  });

  it('sends a prompt of at most maxTokens to a decode worker whole; one token more gets its leg', async () => {
    const s = setup({ localMax: 2 });
    const d = (await s.dispatcher.dispatch(withPrompt('12345678'), new AbortController())) as Dispatch;
    expect(s.client.calls).toHaveLength(0);
    expect(d.worker).toBe(s.decodePool.workers[0]);
    expect(d.body).toBeUndefined(); // the body goes as the client sent it: no kv_transfer_params
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
    expect(s.events).toEqual(['localPrefill:short_prompt']);
    d.finish({ kind: 'response', status: 200 });

    const pending = s.dispatcher.dispatch(
      withPrompt('123456789'),
      new AbortController(),
    ) as Promise<Dispatch>;
    (await s.client.call(1)).resolve(OK);
    const leg = await pending;
    expect(JSON.parse((leg.body as Buffer).toString()).kv_transfer_params).toBeDefined();
    leg.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });
});

describe('PdDispatcher: requests a decode worker serves whole (several sequences, beam search, prompt logprobs)', () => {
  const sampled = (sequences: number): RouteRequest => ({
    ...REQ,
    inference: { ...REQ.inference!, sequences, json: { ...REQ.inference!.json, n: sequences } },
  });

  it('serves n > 1 on a decode worker alone, its load weighing every sequence; n = 1 gets its leg', async () => {
    const s = setup();
    const d = (await s.dispatcher.dispatch(sampled(4), new AbortController())) as Dispatch;
    expect(s.client.calls).toHaveLength(0); // no prefill leg: vLLM's connectors carry one child's KV
    expect(d.body).toBeUndefined();
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [4] });
    expect(s.events).toEqual(['localPrefill:parallel_sampling']);
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });

    const pending = s.dispatcher.dispatch(sampled(1), new AbortController()) as Promise<Dispatch>;
    (await s.client.call(1)).resolve(OK);
    const leg = await pending;
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
    leg.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });

  it('P2P NCCL: n > 1 gets its prefill leg (a P2P NCCL decode worker cannot prefill; each child keeps its id)', async () => {
    const s = setup({ connector: 'p2pnccl' });
    const pending = s.dispatcher.dispatch(sampled(4), new AbortController()) as Promise<Dispatch>;
    expect(s.events).not.toContain('localPrefill:parallel_sampling');
    const call = await s.client.call(1);
    expect(JSON.parse(call.body.toString())).toMatchObject({ n: 4, max_tokens: 1 });
    call.resolve({ ...OK, kvTransferParams: undefined });
    const d = await pending;
    expect(d.setHeaders['x-request-id']).toBe(call.requestId);
    expect(JSON.parse((d.body as Buffer).toString())).toMatchObject({ n: 4, max_tokens: 4 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [4] });
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });

  it.each([
    ['a beam search (vLLM runs it without kv_transfer_params)', { use_beam_search: true }, 'beam_search'],
    [
      'prompt_logprobs (a decode worker given the KV never ran the prompt)',
      { prompt_logprobs: 1 },
      'prompt_logprobs',
    ],
    ['echo with logprobs (an lm-eval loglikelihood request)', { echo: true, logprobs: 1 }, 'prompt_logprobs'],
  ] as const)('serves %s on a decode worker alone', async (_what, fields, reason) => {
    // vLLM: beam_search builds each step's SamplingParams itself (a prefill leg answers without
    // kv_transfer_params: a 502 under NIXL before); prompt logprobs crash a decode engine whose
    // prompt KV came from a prefill worker (vllm-project/vllm#50792).
    const s = setup();
    const req: RouteRequest = {
      ...REQ,
      inference: { ...REQ.inference!, json: { ...REQ.inference!.json, ...fields } },
    };
    const d = (await s.dispatcher.dispatch(req, new AbortController())) as Dispatch;
    expect(s.client.calls).toHaveLength(0);
    expect(d.body).toBeUndefined();
    expect(s.events).toEqual([`localPrefill:${reason}`]);
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [1] });
    d.finish({ kind: 'response', status: 200 });
    expect(s.loads()).toEqual({ prefill: [0, 0], decode: [0] });
  });
});
