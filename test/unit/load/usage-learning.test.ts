/**
 * withTiming feeds the learned characters per token (load/chars-per-token.ts) from the usage of the
 * responses it watches: the sampled share of streamed ones, and one in N non-streamed ones, which are
 * watched for that alone.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { withTiming } from '../../../src/load/timing-dispatcher.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { CharsPerToken, MIN_SAMPLES } from '../../../src/load/chars-per-token.js';
import { usageShowsNoCached } from '../../../src/load/usage-tokens.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { innerDispatcher, respond } from '../../support/respond.js';
import { input, makeWorkers } from '../routing/fixtures.js';

const [w] = makeWorkers(1);
const TEXT = 'p'.repeat(1800);
const decision = new CacheAwarePolicy().select(input([w!], { text: TEXT }));

function req(stream: boolean, model = 'm'): RouteRequest {
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    inference: { stream, model, text: TEXT } as RouteRequest['inference'],
  };
}

const inner = innerDispatcher(w!, decision);

const USAGE = (n: number) =>
  Buffer.from(
    `data: {"choices":[],"usage":{"prompt_tokens":${n},"completion_tokens":4}}\n\ndata: [DONE]\n\n`,
  );

describe('withTiming: characters per token from usage', () => {
  it('learns from the watched streamed responses (every 2nd here), once per response', () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 2, 4, learned);
    let watched = 0;
    for (let i = 0; i < 2 * MIN_SAMPLES; i++) {
      const first = Buffer.from('data: {"choices":[{"text":"a"}]}\n\n');
      // The usage twice in one response: counted once.
      if (
        respond(d.dispatch(req(true), new AbortController()) as Dispatch, 200, [
          first,
          USAGE(1000),
          USAGE(1000),
        ])
      )
        watched += 1;
    }
    expect(watched).toBe(MIN_SAMPLES);
    expect(learned.view()).toEqual([{ model: 'm', charsPerToken: 1.8, samples: MIN_SAMPLES }]);
  });

  it('watches one non-streamed response in N for its usage alone, and learns from it', () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 2, 4, learned);
    const body = Buffer.from(
      '{"choices":[{"text":"a"}],"usage":{"prompt_tokens":600,"completion_tokens":1}}',
    );
    const answers: boolean[] = [];
    for (let i = 0; i < 2 * MIN_SAMPLES; i++)
      answers.push(respond(d.dispatch(req(false), new AbortController()) as Dispatch, 200, [body]));
    expect(answers).toEqual([true, false, true, false, true, false, true, false]);
    expect(learned.of('m')).toBe(3);
  });

  it("learns from a /v1/responses stream's input_tokens, unless it continues a stored response", () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 1, 4, learned);
    const completed = Buffer.from(
      'event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":900,"output_tokens":4}}}\n\n',
    );
    const responses = (previous?: string): RouteRequest => ({
      method: 'POST',
      path: '/v1/responses',
      headers: {},
      inference: {
        stream: true,
        model: 'm',
        text: TEXT,
        kind: 'responses',
        ...(previous !== undefined ? { previousResponseId: previous } : {}),
      } as RouteRequest['inference'],
    });
    // A continued response's input holds earlier turns the routing text does not: not a sample.
    for (let i = 0; i < MIN_SAMPLES; i++)
      respond(d.dispatch(responses('resp_1'), new AbortController()) as Dispatch, 200, [completed]);
    expect(learned.view()).toEqual([]);
    for (let i = 0; i < MIN_SAMPLES; i++)
      respond(d.dispatch(responses(), new AbortController()) as Dispatch, 200, [completed]);
    expect(learned.of('m')).toBe(2);
  });

  it("learns from a /v1/messages stream's message_start, whose usage says input_tokens", () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 1, 4, learned);
    // As vLLM writes it; the cache_*_input_tokens keys are not the prompt's size.
    const start = Buffer.from(
      'event: message_start\ndata: {"type":"message_start","message":{"id":"chatcmpl-1","usage":' +
        '{"input_tokens":600,"output_tokens":0,"cache_read_input_tokens":12}}}\n\n',
    );
    const messages: RouteRequest = {
      method: 'POST',
      path: '/v1/messages',
      headers: {},
      inference: { stream: true, model: 'm', text: TEXT, kind: 'messages' } as RouteRequest['inference'],
    };
    for (let i = 0; i < MIN_SAMPLES; i++)
      respond(d.dispatch(messages, new AbortController()) as Dispatch, 200, [start]);
    expect(learned.of('m')).toBe(3);
  });

  it('without a learner, a non-streamed response is watched for its duration alone; of several sequences, not at all', () => {
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 1);
    expect(respond(d.dispatch(req(false), new AbortController()) as Dispatch, 200, [USAGE(5)])).toBe(true);
    const several: RouteRequest = {
      ...req(false),
      inference: { ...req(false).inference!, sequences: 2 },
    };
    expect(respond(d.dispatch(several, new AbortController()) as Dispatch, 200, [USAGE(5)])).toBe(false);
  });

  it('learns nothing from an error response, a body without usage, or a request it could not parse', () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 1, 4, learned);
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 500, [USAGE(1000)]);
    respond(d.dispatch(req(true), new AbortController()) as Dispatch, 200, [Buffer.from('data: [DONE]\n\n')]);
    const unparsed: RouteRequest = { method: 'POST', path: '/v1/completions', headers: {} };
    respond(d.dispatch(unparsed, new AbortController()) as Dispatch, 200, [USAGE(1000)]);
    expect(learned.view()).toEqual([]);
  });

  it("a non-streamed response's watch slot is freed at its end (at most watchMax at a time)", () => {
    const learned = new CharsPerToken({ prior: 4 });
    const d = withTiming(inner, new TimingEstimates(), () => 0, undefined, 2, 1, learned);
    const next = () => d.dispatch(req(false), new AbortController()) as Dispatch;
    const a = next();
    expect(a.watchResponseBody?.(200)).toBe(true);
    const b = next();
    expect(b.watchResponseBody?.(200)).toBe(false); // the one slot is taken: not watched, not counted
    a.finish({ kind: 'cancelled', afterHeaders: true }); // any end frees it
    const c = next();
    expect(c.watchResponseBody?.(200)).toBe(false); // counted: every 2nd
    const e = next();
    expect(e.watchResponseBody?.(200)).toBe(true);
    for (const x of [b, c, e]) x.finish({ kind: 'response', status: 200 });
  });
});

describe('usageShowsNoCached: vLLM writes prompt_tokens_details only when something was cached', () => {
  it.each([
    [
      'details null (a whole body)',
      '{"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2,"prompt_tokens_details":null}}',
      true,
    ],
    [
      'no details, the object closed (a stream usage chunk)',
      'data: {"usage":{"prompt_tokens":9,"total_tokens":11,"completion_tokens":2}}\n\n',
      true,
    ],
    [
      'details with a count',
      '{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":8}}}',
      false,
    ],
    ['the object cut by the chunk end', '{"usage":{"prompt_tokens":9,"total_tokens":11,', false],
    ['no usage at all', '{"choices":[]}', false],
  ])('%s -> %s', (_what, text, want) => {
    expect(usageShowsNoCached(Buffer.from(text))).toBe(want);
  });
});
