/**
 * withTiming learns from non-streamed responses too: the watched share of them is one
 * TimingEstimates.recordWhole sample each (dispatch -> the body chunk with its usage, its generated
 * tokens less one as decode steps), so a fleet whose clients never stream is still learned.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, RouteRequest } from '../../../src/extproc/dispatch.js';
import { withTiming } from '../../../src/load/timing-dispatcher.js';
import { TimingEstimates } from '../../../src/load/timing-estimates.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { innerDispatcher, respond } from '../../support/respond.js';
import { input, makeWorkers } from '../routing/fixtures.js';

const [w] = makeWorkers(1);
const TEXT = 'p'.repeat(1800);
const decision = new CacheAwarePolicy().select(input([w!], { text: TEXT }));

const inner = innerDispatcher(w!, decision);

function req(kind?: 'responses' | 'messages', sequences?: number): RouteRequest {
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    inference: {
      stream: false,
      model: 'm',
      text: TEXT,
      ...(kind !== undefined ? { kind } : {}),
      ...(sequences !== undefined ? { sequences } : {}),
    } as RouteRequest['inference'],
  };
}

/** A recording TimingEstimates: what withTiming handed to recordWhole. */
class Recorder extends TimingEstimates {
  readonly samples: Array<{ ms: number; steps: number; prefillTokens: number; ahead: number }> = [];
  override recordWhole(
    worker: Parameters<TimingEstimates['recordWhole']>[0],
    ms: number,
    f: { prefillTokens: number; ahead: number },
    steps: number,
    nowMs: number,
  ): void {
    this.samples.push({ ms, steps, prefillTokens: f.prefillTokens, ahead: f.ahead });
    super.recordWhole(worker, ms, f, steps, nowMs);
  }
}

describe('withTiming: non-streamed responses', () => {
  it('one sample per watched response: its duration to the usage and its decode steps', () => {
    const est = new Recorder();
    let now = 1000;
    const d = withTiming(inner, est, () => now, undefined, 1);
    const dispatch = d.dispatch(req(), new AbortController()) as Dispatch;
    now += 740;
    // The body in two chunks, the usage in the second: the duration runs to it.
    const head = Buffer.from('{"id":"cmpl-1","choices":[{"text":"a b c"}],');
    const tail = Buffer.from('"usage":{"prompt_tokens":450,"completion_tokens":32,"total_tokens":482}}');
    expect(dispatch.watchResponseBody?.(200)).toBe(true);
    dispatch.onResponseStart?.(200, true);
    dispatch.transformResponseChunk?.(head, false);
    now += 10;
    dispatch.transformResponseChunk?.(tail, true);
    dispatch.finish({ kind: 'response', status: 200 });
    expect(est.samples).toEqual([
      {
        ms: 750,
        steps: 31,
        prefillTokens: decision.cost!.chosen.uncachedTokens + decision.cost!.chosen.queuedTokens,
        ahead: decision.cost!.chosen.ahead,
      },
    ]);
    expect(est.of(w!).wholeSamples).toBe(1);
  });

  it('reads output_tokens for the Responses and Messages APIs', () => {
    const est = new Recorder();
    const d = withTiming(inner, est, () => 0, undefined, 1);
    const usage = Buffer.from('{"usage":{"input_tokens":450,"output_tokens":9,"output_tokens_details":{}}}');
    respond(d.dispatch(req('responses'), new AbortController()) as Dispatch, 200, [usage]);
    respond(d.dispatch(req('messages'), new AbortController()) as Dispatch, 200, [usage]);
    expect(est.samples.map((s) => s.steps)).toEqual([8, 8]);
  });

  it('no sample from an error, a body without usage, a response of several sequences, or an unparsed request', () => {
    const est = new Recorder();
    const d = withTiming(inner, est, () => 0, undefined, 1);
    const usage = Buffer.from('{"usage":{"prompt_tokens":450,"completion_tokens":32}}');
    respond(d.dispatch(req(), new AbortController()) as Dispatch, 500, [usage]);
    respond(d.dispatch(req(), new AbortController()) as Dispatch, 200, [Buffer.from('{"choices":[]}')]);
    respond(d.dispatch(req(undefined, 4), new AbortController()) as Dispatch, 200, [usage]);
    const unparsed: RouteRequest = { method: 'POST', path: '/v1/completions', headers: {} };
    respond(d.dispatch(unparsed, new AbortController()) as Dispatch, 200, [usage]);
    // A completion_tokens quoted inside the generated text is escaped: not the usage.
    respond(d.dispatch(req(), new AbortController()) as Dispatch, 200, [
      Buffer.from('{"choices":[{"text":"say \\"completion_tokens\\": 5"}]}'),
    ]);
    expect(est.samples).toEqual([]);
  });

  it('the usage twice in one body: one sample', () => {
    const est = new Recorder();
    const d = withTiming(inner, est, () => 0, undefined, 1);
    const usage = Buffer.from('{"usage":{"prompt_tokens":450,"completion_tokens":3}}');
    respond(d.dispatch(req(), new AbortController()) as Dispatch, 200, [usage, usage]);
    expect(est.samples).toHaveLength(1);
  });

  it('one in N per worker is watched (the --response-body-sample share)', () => {
    const est = new Recorder();
    const d = withTiming(inner, est, () => 0, undefined, 4);
    const usage = Buffer.from('{"usage":{"prompt_tokens":450,"completion_tokens":3}}');
    const watched = Array.from({ length: 8 }, () =>
      respond(d.dispatch(req(), new AbortController()) as Dispatch, 200, [usage]),
    );
    expect(watched).toEqual([true, false, false, false, true, false, false, false]);
    expect(est.samples).toHaveLength(2);
  });
});
