/**
 * The simulator's "hold the stream until released" control, against a real simulator on port 0:
 * a held response stops at its hold point, stays open (in flight, no end) until release(), then
 * runs to its normal end with every event in order.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { startSimulator } from '../../../src/sim/simulator.js';
import { Hold, HoldQueue } from '../../../src/sim/stream-hold.js';
import { sseEvents, simulatorsClosedAfterEach } from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

function post(url: string, body: unknown, signal?: AbortSignal) {
  return request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
}

/** Reads SSE data events off a streaming body until `n` have arrived. */
async function readEvents(
  body: AsyncIterable<Buffer>,
  n: number,
): Promise<{ text: string; more: () => Promise<string> }> {
  const it = body[Symbol.asyncIterator]();
  let text = '';
  while ((text.match(/\n\n/g) ?? []).length < n) {
    const r = await it.next();
    if (r.done) break;
    text += r.value.toString();
  }
  return {
    text,
    more: async () => {
      let rest = '';
      for (;;) {
        const r = await it.next();
        if (r.done) return rest;
        rest += r.value.toString();
      }
    },
  };
}

describe('simulator hold', () => {
  it('holds a stream after one event until released, then ends it normally', async () => {
    const s = await sim();
    const hold = s.hold();
    const res = await post(`${s.url}/v1/completions`, { prompt: 'hello', max_tokens: 4, stream: true });
    expect(res.statusCode).toBe(200);
    await hold.reached();
    const first = await readEvents(res.body, 1);
    expect(sseEvents(first.text)).toHaveLength(1);
    expect(hold.held).toBe(1);
    expect(s.inFlight()).toBe(1);
    expect(s.records[0]?.outcome).toBeUndefined();

    hold.release();
    const rest = sseEvents(await first.more());
    expect(rest).toHaveLength(4); // 3 more tokens and [DONE]
    expect(rest.at(-1)).toBe('[DONE]');
    expect(hold.held).toBe(0);
    await s.waitForIdle();
    expect(s.records[0]?.outcome).toBe('ok');
  });

  it('afterChunks: 0 holds right after the headers; a JSON answer is held whole', async () => {
    const s = await sim();
    const streamHold = s.hold({ afterChunks: 0, path: '/v1/chat/completions' });
    const jsonHold = s.hold({ path: '/v1/completions' });
    const streamed = await post(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      stream: true,
    });
    expect(streamed.statusCode).toBe(200);
    await streamHold.reached();
    const plain = post(`${s.url}/v1/completions`, { prompt: 'x', max_tokens: 2 });
    await jsonHold.reached();
    expect(s.inFlight()).toBe(2);
    jsonHold.release();
    const answer = await plain;
    expect(answer.statusCode).toBe(200);
    expect(((await answer.body.json()) as { choices: unknown[] }).choices).toHaveLength(1);
    expect(s.inFlight()).toBe(1); // the stream is still held
    streamHold.release();
    expect(sseEvents(await streamed.body.text()).at(-1)).toBe('[DONE]');
    await s.waitForIdle();
  });

  it('a client that goes away while held ends the request (aborted) and frees the hold', async () => {
    const s = await sim();
    const hold = s.hold();
    const ac = new AbortController();
    const res = await post(
      `${s.url}/v1/completions`,
      { prompt: 'hello', max_tokens: 4, stream: true },
      ac.signal,
    );
    res.body.on('error', () => undefined);
    await hold.reached();
    ac.abort();
    await s.waitForIdle();
    expect(hold.held).toBe(0);
    expect(s.records[0]?.outcome).toBe('aborted');
    hold.release(); // nothing left to release: a no-op
  });

  it('count holds that many requests; release lets all go and disarms the rest', async () => {
    const s = await sim();
    const hold = s.hold({ count: 3 });
    const body = { prompt: 'p', max_tokens: 2, stream: true };
    const a = await post(`${s.url}/v1/completions`, body);
    const b = await post(`${s.url}/v1/completions`, body);
    await hold.reached(2);
    expect(hold.held).toBe(2);
    hold.release();
    const c = await post(`${s.url}/v1/completions`, body); // the third is no longer held
    for (const r of [a, b, c]) expect(sseEvents(await r.body.text()).at(-1)).toBe('[DONE]');
  });

  it('an injected reset still cuts a held stream at its chunk on release', async () => {
    const s = await sim();
    s.injectFault({ resetAfterChunks: 2 });
    const hold = s.hold();
    const res = await post(`${s.url}/v1/completions`, { prompt: 'hello', max_tokens: 6, stream: true });
    await hold.reached();
    hold.release();
    await expect(res.body.text()).rejects.toThrow();
    await s.waitForIdle();
    expect(s.records[0]).toMatchObject({ outcome: 'reset' });
  });

  it('close() rejects a pending reached()', async () => {
    const s = await startSimulator({ timeScale: 0 });
    const waiting = s.hold().reached();
    await s.close();
    await expect(waiting).rejects.toThrow('simulator closed');
  });
});

describe('HoldQueue', () => {
  it.each([
    [{ count: 0 }, 'count'],
    [{ count: 1.5 }, 'count'],
    [{ afterChunks: -1 }, 'afterChunks'],
  ])('rejects %j', (opts, what) => {
    expect(() => new Hold(opts)).toThrow(what);
  });

  it('takes the oldest matching hold and drops used-up ones', () => {
    const q = new HoldQueue();
    const chat = q.add({ path: '/chat/' });
    const streams = q.add({ stream: true });
    const any = q.add({ count: 2 });
    expect(q.take('/v1/completions', false)).toBeDefined(); // any: 1 left
    expect(q.take('/v1/chat/completions', false)).toBeDefined(); // chat: used up
    expect(q.take('/v1/chat/completions', false)).toBeDefined(); // any: used up
    expect(q.take('/v1/completions', false)).toBeUndefined();
    expect(q.take('/v1/completions', true)).toBeDefined(); // streams: used up
    expect([chat.exhausted, streams.exhausted, any.exhausted]).toEqual([true, true, true]);
  });
});
