/**
 * withTiming on a /v1/responses stream: vLLM sends `response.created` and `response.in_progress` as
 * soon as it accepts the request (serving_responses.py `responses_stream_generator`: both are yielded
 * before the engine's first output), so they say nothing of the prefill. The time to first token
 * runs to the first event after them, and the request's prefill stays queued on its worker until then.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { withTiming } from '../../../src/load/timing-dispatcher.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { PrefillBacklog } from '../../../src/load/prefill-backlog.js';
import { firstTokenWatch } from '../../../src/load/first-token.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { innerDispatcher } from '../../support/respond.js';
import { input, makeWorkers } from '../routing/fixtures.js';

const [w] = makeWorkers(1);
const TEXT = 'p'.repeat(1800);
const decision = new CacheAwarePolicy().select(input([w!], { text: TEXT }));
const inner = innerDispatcher(w!, decision);

const req: RouteRequest = {
  method: 'POST',
  path: '/v1/responses',
  headers: {},
  inference: { kind: 'responses', stream: true, model: 'm', text: TEXT } as RouteRequest['inference'],
};

/** A recording TimingEstimates: the TTFT samples withTiming handed over. */
class Recorder extends TimingEstimates {
  readonly ttfts: number[] = [];
  override recordTtft(...args: Parameters<TimingEstimates['recordTtft']>): void {
    this.ttfts.push(args[1]);
    super.recordTtft(...args);
  }
}

const event = (type: string, data: string): string =>
  `event: ${type}\ndata: {"type":"${type}",${data}"sequence_number":0}\n\n`;
const RESPONSE = '"response":{"id":"resp_1","status":"in_progress","instructions":"long","usage":null},';
const OPENING = Buffer.from(event('response.created', RESPONSE) + event('response.in_progress', RESPONSE));

describe('withTiming: a /v1/responses stream', () => {
  it('times the first token, not the response.created and response.in_progress events before it', () => {
    const est = new Recorder();
    const backlog = new PrefillBacklog();
    let now = 1000;
    const d = withTiming(inner, est, () => now, backlog, 1).dispatch(req, new AbortController()) as Dispatch;
    expect(d.watchResponseBody?.(200)).toBe(true);
    d.onResponseStart?.(200, true);
    now += 5;
    // A large `instructions` echo: the opening events may come in more than one chunk.
    d.transformResponseChunk?.(OPENING.subarray(0, 40), false);
    d.transformResponseChunk?.(OPENING.subarray(40), false);
    expect(backlog.of(w!, now).requests).toBe(1); // still prefilling
    now += 395;
    d.transformResponseChunk?.(
      Buffer.from(
        event('response.output_item.added', '"item":{"type":"message"},') +
          event('response.output_text.delta', '"delta":"a",'),
      ),
      false,
    );
    expect(backlog.of(w!, now).requests).toBe(0);
    now += 20;
    d.transformResponseChunk?.(Buffer.from(event('response.output_text.delta', '"delta":"b",')), false);
    d.transformResponseChunk?.(Buffer.from(event('response.completed', RESPONSE)), true);
    d.finish({ kind: 'response', status: 200 });
    expect(est.ttfts).toEqual([400]);
  });
});

describe('firstTokenWatch', () => {
  const chunks = (s: string, at: number[]): Buffer[] => {
    const out: Buffer[] = [];
    let from = 0;
    for (const cut of [...at, s.length]) {
      out.push(Buffer.from(s.slice(from, cut)));
      from = cut;
    }
    return out;
  };
  const DELTA = event('response.output_item.added', '"item":{},');

  it('the first non-empty chunk of any other stream', () => {
    const seen = firstTokenWatch('chat');
    expect(seen(Buffer.alloc(0))).toBe(false);
    expect(seen(Buffer.from('data: {"choices":[]}\n\n'))).toBe(true);
  });

  it.each([
    [
      'the opening events alone, then the first event after them',
      OPENING.toString() + DELTA,
      [OPENING.length],
    ],
    ['the opening and the first token in one chunk', OPENING.toString() + DELTA, []],
    ['an event line cut by a chunk boundary', OPENING.toString() + DELTA, [OPENING.length + 9]],
    ['a cut right after "event:"', OPENING.toString() + DELTA, [OPENING.length + 6, OPENING.length + 7]],
    ['an opening event line cut', OPENING.toString() + DELTA, [20, 40, OPENING.length]],
  ])('a Responses stream: %s', (_name, text, at) => {
    const seen = firstTokenWatch('responses');
    const answers = chunks(text, at).map((c) => seen(c));
    expect(answers.at(-1)).toBe(true);
    expect(answers.slice(0, -1).every((a) => !a)).toBe(true);
  });

  it('text that reads like an event inside a data line is not one', () => {
    const seen = firstTokenWatch('responses');
    const fake = event(
      'response.created',
      '"response":{"instructions":"x\\nevent: response.output_text.delta"},',
    );
    expect(seen(Buffer.from(fake))).toBe(false);
    expect(seen(Buffer.from(DELTA))).toBe(true);
  });
});
