/**
 * Which responses the router lets Envoy skip (response-body-mode.ts), which responses the
 * timing learners still watch (timing-dispatcher.ts ResponseSampler), and how the two compose on a
 * Dispatch: table-driven.
 */
import { describe, expect, it } from 'vitest';
import { bodySkippable, type ResponseStart } from '../../../src/extproc/response-body-mode.js';
import type { Dispatch, Dispatcher, RouteRequest } from '../../../src/extproc/dispatch.js';
import { ResponseSampler, WATCH_UNCACHED_TOKENS, withTiming } from '../../../src/load/timing-dispatcher.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { PrefillBacklog } from '../../../src/load/prefill-backlog.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { input, makeWorkers } from '../routing/fixtures.js';
import { innerDispatcher } from '../../support/respond.js';

const ok: ResponseStart = {
  requestMode: 'per_message',
  mode: 'per_message',
  status: 200,
  endOfStream: false,
  routed: true,
};

describe('bodySkippable', () => {
  it.each<[string, Partial<ResponseStart>, boolean]>([
    ['a routed 200 with a body', {}, true],
    ['a 204 with a body', { status: 204 }, true],
    ['a 299', { status: 299 }, true],
    ['a 1xx', { status: 101 }, false],
    ['a 3xx (redirect body, small)', { status: 302 }, false],
    ['a 4xx (error body: complete or cut matters)', { status: 429 }, false],
    ['a 5xx', { status: 503 }, false],
    ['headers with end_of_stream (no body)', { endOfStream: true }, false],
    ['FULL_DUPLEX_STREAMED response body (Envoy refuses overrides)', { mode: 'full_duplex' }, false],
    ['FULL_DUPLEX_STREAMED request body', { requestMode: 'full_duplex' }, false],
    ["Envoy's local reply to an unrouted request", { routed: false }, false],
    ['response_body_mode NONE: a 200 (no chunk to watch)', { mode: 'none' }, true],
    ['response_body_mode NONE: a 5xx (no chunk to watch either)', { mode: 'none', status: 503 }, true],
    ['response_body_mode NONE: headers with end_of_stream', { mode: 'none', endOfStream: true }, false],
    [
      'response_body_mode NONE, FULL_DUPLEX_STREAMED request body',
      { mode: 'none', requestMode: 'full_duplex' },
      false,
    ],
  ])('%s -> %s', (_name, over, expected) => {
    expect(bodySkippable({ ...ok, ...over })).toBe(expected);
  });
});

describe('ResponseSampler', () => {
  it.each<[number, number, boolean[]]>([
    [1, 4, [true, true, true, true]],
    [2, 5, [true, false, true, false, true]],
    [4, 9, [true, false, false, false, true, false, false, false, true]],
  ])('every %i: %i streamed responses of one worker -> %j', (every, n, expected) => {
    const [w] = makeWorkers(1);
    const s = new ResponseSampler(every);
    expect(Array.from({ length: n }, () => s.take(w!))).toEqual(expected);
  });

  it('counts per worker: each worker has its first response watched', () => {
    const [a, b] = makeWorkers(2);
    const s = new ResponseSampler(3);
    expect([s.take(a!), s.take(a!), s.take(b!), s.take(a!), s.take(b!)]).toEqual([
      true,
      false,
      true,
      false,
      false,
    ]);
  });

  it.each([0, -1, 1.5, Number.NaN])('rejects an interval of %s', (every) => {
    expect(() => new ResponseSampler(every)).toThrow(RangeError);
  });

  it.each([0, -1, 1.5, Number.NaN])('rejects a cap of %s watched responses', (max) => {
    expect(() => new ResponseSampler(2, max)).toThrow(RangeError);
  });

  it('watches at most maxWatching at a time per worker; a response met at the cap is not counted', () => {
    const [a, b] = makeWorkers(2);
    const s = new ResponseSampler(2, 2);
    // 1st and 3rd watched (every 2nd); then a is at its cap: not watched, not counted.
    expect([s.take(a!), s.take(a!), s.take(a!), s.take(a!), s.take(a!)]).toEqual([
      true,
      false,
      true,
      false,
      false,
    ]);
    expect(s.watchingOf(a!)).toBe(2);
    expect(s.take(b!)).toBe(true); // per worker
    s.release(a!);
    // Counting resumes where it stood (the 3rd was watched: skip one, watch the next).
    expect([s.take(a!), s.take(a!)]).toEqual([false, true]);
    expect(s.watchingOf(a!)).toBe(2);
    s.release(a!);
    s.release(a!);
    s.release(a!); // more releases than takes never go below 0
    expect(s.watchingOf(a!)).toBe(0);
  });

  it('every 1 watches every response, with no cap', () => {
    const [a] = makeWorkers(1);
    const s = new ResponseSampler(1, 1);
    expect([s.take(a!), s.take(a!), s.take(a!)]).toEqual([true, true, true]);
  });
});

describe('withTiming: watchResponseBody', () => {
  const [w] = makeWorkers(1);
  const decision = new CacheAwarePolicy().select(input([w!], { text: 'p'.repeat(400) }));
  function req(stream: boolean): RouteRequest {
    return {
      method: 'POST',
      path: '/v1/completions',
      headers: {},
      inference: { stream, text: 'p'.repeat(400) } as RouteRequest['inference'],
    };
  }
  const dispatcher = (watch: Dispatch['watchResponseBody']): Dispatcher =>
    innerDispatcher(w!, decision, { watchResponseBody: watch });
  const asked = (d: Dispatch) => d.watchResponseBody?.(200);

  it.each<[string, Dispatch['watchResponseBody'], boolean, Array<boolean | undefined>]>([
    ['a dispatch that reads the body (P/D): always watched', () => true, true, [true, true, true]],
    ['a dispatch that says nothing: always watched', undefined, true, [true, true, true]],
    ['streamed, the dispatch reads nothing: every 2nd watched', () => false, true, [true, false, true]],
    [
      'non-streamed, the dispatch reads nothing: every 2nd watched (its duration)',
      () => false,
      false,
      [true, false, true],
    ],
  ])('%s', (_name, watch, stream, expected) => {
    const d = withTiming(dispatcher(watch), new TimingEstimates(), () => 0, undefined, 2);
    const answers = [0, 1, 2].map(() => asked(d.dispatch(req(stream), new AbortController()) as Dispatch));
    expect(answers).toEqual(expected);
  });

  it('a sampled response holds its watch slot until it finishes (at most watchMax per worker)', () => {
    const d = withTiming(
      dispatcher(() => false),
      new TimingEstimates(),
      () => 0,
      undefined,
      2,
      1,
    );
    const next = () => d.dispatch(req(true), new AbortController()) as Dispatch;
    const end = { kind: 'response', status: 200 } as const;
    const first = next();
    expect(asked(first)).toBe(true);
    expect(asked(next())).toBe(false); // the one slot is taken: not watched, not counted
    const third = next();
    expect(asked(third)).toBe(false);
    first.finish(end);
    first.finish(end); // a second finish frees nothing more
    expect(asked(third)).toBe(false); // asked again: the answer it had
    expect(asked(next())).toBe(false); // the slot is free: counted (every 2nd)
    const fifth = next();
    expect(asked(fifth)).toBe(true);
    expect(asked(fifth)).toBe(true);
    expect(asked(next())).toBe(false);
    fifth.finish({ kind: 'cancelled', afterHeaders: true }); // any end frees it
    expect(asked(next())).toBe(false); // counted
    expect(asked(next())).toBe(true);
  });

  it('an inner finish that throws still frees the watch slot', () => {
    const inner = innerDispatcher(w!, decision, {
      finish: () => {
        throw new Error('inner finish failed');
      },
    });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 2, 1);
    const next = () => d.dispatch(req(true), new AbortController()) as Dispatch;
    const first = next();
    expect(asked(first)).toBe(true);
    expect(() => first.finish({ kind: 'response', status: 200 })).toThrow('inner finish failed');
    // With the one slot still taken, neither of the next two would be watched.
    expect([asked(next()), asked(next())]).toEqual([false, true]);
  });

  it('a streamed prompt with many uncached tokens is always watched: its backlog entry needs the real first byte', () => {
    const long = 'q'.repeat(4 * WATCH_UNCACHED_TOKENS);
    const big = new CacheAwarePolicy().select(input([w!], { text: long }));
    expect(big.cost?.chosen.uncachedTokens).toBeGreaterThanOrEqual(WATCH_UNCACHED_TOKENS);
    const d = withTiming(
      {
        dispatch: () => ({
          worker: w!,
          decision: big,
          setHeaders: {},
          watchResponseBody: () => false,
          finish: () => undefined,
        }),
      },
      new TimingEstimates(),
      () => 0,
      undefined,
      8,
    );
    const longReq: RouteRequest = {
      ...req(true),
      inference: { stream: true, text: long } as RouteRequest['inference'],
    };
    expect([0, 1, 2, 3].map(() => asked(d.dispatch(longReq, new AbortController()) as Dispatch))).toEqual([
      true,
      true,
      true,
      true,
    ]);
  });

  it('a skipped streamed response ends its prefill-backlog entry at the predicted end of its prefill (no TTFT floor)', () => {
    const backlog = new PrefillBacklog();
    let now = 0;
    const d = withTiming(
      dispatcher(() => false),
      new TimingEstimates(),
      () => now,
      backlog,
      2,
    );
    const watched = d.dispatch(req(true), new AbortController()) as Dispatch;
    const skipped = d.dispatch(req(true), new AbortController()) as Dispatch;
    expect([asked(watched), asked(skipped)]).toEqual([true, false]);
    watched.onResponseStart?.(200, true);
    skipped.onResponseStart?.(200, false);
    expect(backlog.of(w!, now).requests).toBe(2);
    const c = decision.cost!.chosen;
    expect(c.prefillMs - c.recomputeMs).toBeGreaterThan(1); // the floor
    now = c.waitMs + c.recomputeMs + 0.5; // before the predicted first token
    expect(now).toBeLessThan(c.predictedMs);
    // The watched one waits for its first chunk (or its end); the skipped one's prefill is over.
    expect(backlog.of(w!, now).requests).toBe(1);
    watched.transformResponseChunk?.(Buffer.from('data: {}\n\n'), false);
    expect(backlog.of(w!, now).requests).toBe(0);
    watched.finish({ kind: 'response', status: 200 });
    skipped.finish({ kind: 'unwatched', status: 200 });
  });
});
