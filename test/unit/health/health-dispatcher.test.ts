import { describe, expect, it } from 'vitest';
import type { Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../../../src/extproc/dispatch.js';
import { withHealth, type PassiveHealth } from '../../../src/health/health-dispatcher.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { Worker } from '../../../src/workers/worker.js';

const w = new Worker({
  role: 'regular',
  url: 'http://10.0.0.1:8000',
  endpoint: '10.0.0.1:8000',
  generation: 1,
});
const REQ: RouteRequest = { method: 'POST', path: '/v1/completions', headers: {} };

function fakeDispatch(log: string[], worker: Worker = w): Dispatch {
  return {
    worker,
    decision: { worker, branch: 'test' },
    setHeaders: { 'x-test': '1' },
    responseHeaders: () => ({ 'x-decision': 'd' }),
    finish: (end) => log.push(`finish:${end.kind}`),
  };
}

function recorder(log: string[]): PassiveHealth {
  return {
    refresh: (now) => log.push(`refresh:${now}`),
    recordOutcome: (worker, outcome, now) => log.push(`outcome:${worker.id}:${outcome}:${now}`),
  };
}

describe('withHealth', () => {
  it.each([
    { name: 'sync', async: false },
    { name: 'async', async: true },
  ])('$name dispatch: refresh first, inner fields kept, one outcome however often finish runs', async (c) => {
    const log: string[] = [];
    const inner: Dispatcher = {
      dispatch: () => {
        log.push('dispatch');
        return c.async ? Promise.resolve(fakeDispatch(log)) : fakeDispatch(log);
      },
    };
    const d = await withHealth(inner, recorder(log), () => 7).dispatch(REQ, new AbortController());
    expect(d.setHeaders).toEqual({ 'x-test': '1' });
    expect(d.responseHeaders?.(200)).toEqual({ 'x-decision': 'd' });
    d.finish({ kind: 'response', status: 503 });
    d.finish({ kind: 'response', status: 200 });
    expect(log).toEqual([
      'refresh:7',
      'dispatch',
      'finish:response',
      `outcome:${w.id}:server_error:7`,
      'finish:response',
    ]);
  });

  it('a dispatch that throws records nothing', () => {
    const log: string[] = [];
    const inner: Dispatcher = {
      dispatch: () => {
        throw new Error('no workers');
      },
    };
    expect(() => withHealth(inner, recorder(log), () => 1).dispatch(REQ, new AbortController())).toThrow(
      'no workers',
    );
    expect(log).toEqual(['refresh:1']);
  });

  it('end to end with WorkerHealth: Envoy 5xx replies open the breaker, client aborts before headers do not', () => {
    const health = new WorkerHealth({ breaker: { failureThreshold: 5, cooldownMs: 1000 } });
    const w = new Worker({
      role: 'decode',
      url: 'http://10.0.0.2:8000',
      endpoint: '10.0.0.2:8000',
      generation: 1,
    });
    let now = 0;
    const inner: Dispatcher = { dispatch: () => fakeDispatch([], w) };
    const dispatcher = withHealth(inner, health, () => now);
    const finish = (end: RequestEnd) =>
      (dispatcher.dispatch(REQ, new AbortController()) as Dispatch).finish(end);
    // Many clients going away before the first byte (or ext_proc message timeouts): neutral.
    for (let i = 0; i < 20; i++) finish({ kind: 'cancelled', afterHeaders: false });
    expect(w.healthy).toBe(true);
    // Envoy's local replies (connect failure, reset before headers) reach ext_proc as 503 headers.
    const ends: RequestEnd[] = [
      { kind: 'response', status: 503 },
      { kind: 'response', status: 503 },
      { kind: 'cancelled', afterHeaders: true, status: 200 }, // neutral: the count goes on
      { kind: 'response', status: 503 },
      { kind: 'response', status: 503 },
    ];
    for (const end of ends) finish(end);
    expect(w.healthy).toBe(true);
    finish({ kind: 'response', status: 503 });
    expect(w.healthy).toBe(false);
    now = 1000;
    // The next dispatch refreshes first: the worker is half-open, selectable again.
    finish({ kind: 'response', status: 200 });
    expect(health.view(w, now)).toMatchObject({ breaker: 'half_open', selectable: true });
  });

  it("a recovered worker's breaker closes on its probes' 200 headers, while their long generations still stream", () => {
    const health = new WorkerHealth({
      breaker: { failureThreshold: 1, successThreshold: 2, cooldownMs: 1000 },
    });
    const w = new Worker({
      role: 'regular',
      url: 'http://10.0.0.3:8000',
      endpoint: '10.0.0.3:8000',
      generation: 1,
    });
    let now = 0;
    // As the routing observer does: the selection takes a half-open probe slot.
    const inner: Dispatcher = {
      dispatch: () => {
        health.routed(w, now);
        return fakeDispatch([], w);
      },
    };
    const dispatcher = withHealth(inner, health, () => now);
    const open = () => dispatcher.dispatch(REQ, new AbortController()) as Dispatch;
    open().finish({ kind: 'response', status: 503 });
    expect(health.view(w, now).breaker).toBe('open');

    now = 1000; // cool-down over: the next request is the one probe allowed
    const first = open();
    expect(w.healthy).toBe(false); // its slot is taken until its outcome is known
    first.onResponseStart?.(200, true); // the worker answers: it serves again
    expect(w.healthy).toBe(true);
    const second = open();
    second.onResponseStart?.(200, true);
    expect(health.view(w, now)).toMatchObject({ breaker: 'closed', selectable: true });

    // Minutes later the generations end (one cut by its client): nothing is counted twice.
    now = 200_000;
    first.finish({ kind: 'response', status: 200 });
    second.finish({ kind: 'cancelled', afterHeaders: true, status: 200 });
    expect(health.details(w, now)).toMatchObject({
      breaker: 'closed',
      breakerFailures: 0,
      probesInFlight: 0,
    });
    // A 5xx is counted at its headers too, once.
    const failed = open();
    failed.onResponseStart?.(503, true);
    failed.finish({ kind: 'response', status: 503 });
    expect(health.view(w, now).breaker).toBe('open');
  });
});
