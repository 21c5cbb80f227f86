import { describe, expect, it } from 'vitest';
import {
  followedResponseId,
  holderToken,
  responseIdFor,
  withRequestId,
  workerToken,
} from '../../../src/routing/response-affinity.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import { RESPONSE_AFFINITY } from '../../../src/routing/selector.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { harness, register } from '../workers/pool-harness.js';

describe('response ids', () => {
  it('name their worker by an opaque token, read back from the id alone', () => {
    const h = harness();
    for (const port of [8000, 8001]) register(h.registry, 'regular', port);
    const pool = h.pool('regular', 'round_robin');
    pool.reconcile();
    const [a, b] = pool.workers;
    const id = responseIdFor(a!);
    expect(id).toMatch(/^resp_[0-9a-f]{44}$/);
    expect(id).not.toContain('10.0.0.1');
    expect(holderToken(id)).toBe(workerToken(a!));
    expect(workerToken(a!)).not.toBe(workerToken(b!));
    expect(responseIdFor(a!)).not.toBe(id);
  });

  it.each([
    ['vLLM', `resp_${'a'.repeat(32)}`],
    ['a client', 'my-request-1'],
    ['a truncated router', `resp_${'a'.repeat(43)}`],
    ['an upper-case', `resp_${'A'.repeat(44)}`],
  ])('made by %s name no holder', (_who, id) => {
    expect(holderToken(id)).toBeUndefined();
  });

  it.each([
    ['/v1/responses', 'resp_x', 'resp_x'],
    ['/v1/responses', undefined, undefined],
    ['/v1/responses/resp_y', undefined, 'resp_y'],
    ['/v1/responses/resp_y/cancel', undefined, 'resp_y'],
    ['/v1/responses/resp_y/input_items?limit=5', undefined, 'resp_y'],
    ['/v1/responses/', undefined, undefined],
    ['/v1/chat/completions', undefined, undefined],
  ])('%s (previous %s) follows %s', (path, previous, followed) => {
    expect(followedResponseId(path, previous)).toBe(followed);
  });
});

describe('withRequestId', () => {
  it.each([
    ['{"model":"m","input":"x"}'],
    ['  \n{ "model" : "m" }  '],
    ['{}'],
    ['{ }'],
    ['{"input":"caf\u00e9 \\"quoted\\""}'],
  ])('adds request_id to %j and keeps every other member', (text) => {
    const out = withRequestId(Buffer.from(text), 'resp_1');
    expect(JSON.parse(out!.toString())).toEqual({ request_id: 'resp_1', ...JSON.parse(text) });
    expect(out!.toString().endsWith(text.slice(text.indexOf('{') + 1))).toBe(true);
  });

  it('leaves a body that is not an object alone', () => {
    expect(withRequestId(Buffer.from('[1]'), 'r')).toBeUndefined();
    expect(withRequestId(Buffer.alloc(0), 'r')).toBeUndefined();
  });
});

function setup() {
  const h = harness();
  for (const port of [8000, 8001, 8002]) register(h.registry, 'regular', port);
  const pool = h.pool('regular', 'round_robin');
  const dispatcher = new PoolDispatcher({ pool, observer: {}, clock: h.clock.read, decisionHeader: false });
  const open: Dispatch[] = [];
  const send = (method: string, path: string, body?: Record<string, unknown>): Dispatch => {
    const raw = body !== undefined ? Buffer.from(JSON.stringify(body)) : undefined;
    const req: RouteRequest = {
      method,
      path,
      headers: {},
      ...(raw !== undefined
        ? { body: raw, inference: parseInferenceRequest('responses', undefined, raw) }
        : {}),
    };
    const d = dispatcher.dispatch(req);
    open.push(d);
    return d;
  };
  const finishAll = () => {
    for (const d of open.splice(0)) d.finish({ kind: 'response', status: 200 });
  };
  return { h, pool, send, finishAll };
}

const sentId = (d: Dispatch): string => JSON.parse((d.body as Buffer).toString()).request_id as string;

describe('PoolDispatcher: response affinity', () => {
  it('sends every follow-up of a response to the worker that made it, whatever the policy says', () => {
    const s = setup();
    const first = s.send('POST', '/v1/responses', { model: 'm', input: 'hello' });
    const id = sentId(first);
    expect(holderToken(id)).toBe(workerToken(first.worker));
    let previous = id;
    for (let turn = 0; turn < 5; turn++) {
      const next = s.send('POST', '/v1/responses', {
        model: 'm',
        input: `turn ${turn}`,
        previous_response_id: previous,
      });
      expect(next.worker).toBe(first.worker);
      expect(next.decision.branch).toBe(RESPONSE_AFFINITY);
      previous = sentId(next);
    }
    for (const path of [
      `/v1/responses/${id}`,
      `/v1/responses/${id}/cancel`,
      `/v1/responses/${id}/input_items`,
    ]) {
      const d = s.send(path.endsWith('cancel') ? 'POST' : 'GET', path);
      expect(d.worker).toBe(first.worker);
      expect(d.body).toBeUndefined();
    }
    s.finishAll();
    expect(s.pool.workers.map((w) => w.load)).toEqual([0, 0, 0]);
  });

  it('leaves a client-named or unstored response alone, and routes an unknown id by the policy', () => {
    const s = setup();
    expect(
      s.send('POST', '/v1/responses', { model: 'm', input: 'x', request_id: 'mine' }).body,
    ).toBeUndefined();
    expect(s.send('POST', '/v1/responses', { model: 'm', input: 'x', store: false }).body).toBeUndefined();
    const workers = new Set(
      [0, 1, 2].map(
        () =>
          s.send('POST', '/v1/responses', {
            model: 'm',
            input: 'x',
            previous_response_id: `resp_${'b'.repeat(32)}`,
          }).worker,
      ),
    );
    expect(workers.size).toBe(3);
    s.finishAll();
    expect(s.pool.workers.map((w) => w.load)).toEqual([0, 0, 0]);
  });

  it('falls back to the policy once the holder has left the pool', () => {
    const s = setup();
    const first = s.send('POST', '/v1/responses', { model: 'm', input: 'hello' });
    const id = sentId(first);
    s.finishAll();
    s.h.registry.deregister('regular', first.worker.url);
    const next = s.send('POST', '/v1/responses', { model: 'm', input: 'again', previous_response_id: id });
    expect(next.worker.url).not.toBe(first.worker.url);
    expect(next.decision.branch).not.toBe(RESPONSE_AFFINITY);
    s.finishAll();
    expect(s.pool.workers.map((w) => w.load)).toEqual([0, 0]);
  });
});
