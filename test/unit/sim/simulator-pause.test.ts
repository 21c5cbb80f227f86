/**
 * The simulator's pause of generation, as vLLM serves it with VLLM_SERVER_DEV_MODE=1 (RL weight
 * updates): `POST /pause?mode=abort|wait|keep` holds new generation requests until `POST /resume`
 * (counted waiting), `GET /is_paused` says so, and the prefix cache is emptied unless `mode=keep` or
 * `clear_cache` is false (`false`, `0`, `no`, `off`: pydantic's bool); `POST /reset_prefix_cache` empties it alone.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { Simulator } from '../../../src/sim/simulator.js';
import { blockPrompt, getText, postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

const post = async (url: string): Promise<{ status: number; text: string }> => {
  const r = await request(url, { method: 'POST' });
  return { status: r.statusCode, text: await r.body.text() };
};

const isPaused = async (s: Simulator): Promise<unknown> =>
  JSON.parse((await getText(`${s.url}/is_paused`)).text);

const waitingOnPage = async (s: Simulator): Promise<number> => {
  const m = /^vllm:num_requests_waiting\{[^}]*\} (\S+)$/m.exec((await getText(`${s.url}/metrics`)).text);
  return Number(m?.[1]);
};

const SHARED = blockPrompt('sys', 4);

async function cachedTokens(s: Simulator, q: string): Promise<number> {
  const r = await postJson(`${s.url}/v1/completions`, { prompt: SHARED + blockPrompt(q, 1) });
  expect(r.status).toBe(200);
  return (
    (r.json.usage as { prompt_tokens_details: { cached_tokens: number } | null }).prompt_tokens_details
      ?.cached_tokens ?? 0
  );
}

describe('simulator: pause of generation', () => {
  it('mode=keep: a request sent while paused waits (counted waiting) and runs at /resume; the cache stays', async () => {
    const s = await start();
    await cachedTokens(s, 'q1');
    expect(await isPaused(s)).toEqual({ is_paused: false });
    const paused = await post(`${s.url}/pause?mode=keep`);
    expect(paused.status).toBe(200);
    expect(JSON.parse(paused.text)).toEqual({ status: 'paused' });
    expect(await isPaused(s)).toEqual({ is_paused: true });

    const held = postJson(`${s.url}/v1/completions`, { prompt: SHARED + blockPrompt('q2', 1) });
    await s.waitForRequests(2);
    expect(s.waiting()).toBe(1);
    expect(s.requestsWhilePaused).toBe(1);
    expect(await waitingOnPage(s)).toBe(1);
    expect(s.inFlight()).toBe(1);

    expect(JSON.parse((await post(`${s.url}/resume`)).text)).toEqual({ status: 'resumed' });
    const done = await held;
    expect(done.status).toBe(200);
    expect(
      (done.json.usage as { prompt_tokens_details: { cached_tokens: number } | null }).prompt_tokens_details
        ?.cached_tokens ?? 0,
    ).toBe(64);
    expect(await isPaused(s)).toEqual({ is_paused: false });
    expect(s.waiting()).toBe(0);
  });

  it('mode=wait answers once the running request has ended, then empties the cache', async () => {
    const s = await start();
    await cachedTokens(s, 'q1');
    const hold = s.hold();
    const running = postJson(`${s.url}/v1/completions`, { prompt: 'running' });
    await hold.reached();
    let answered = false;
    const pause = post(`${s.url}/pause?mode=wait`).then((r) => {
      answered = true;
      return r;
    });
    // The pause is in place (the gate is closed) before it answers.
    await expect.poll(() => s.paused).toBe(true);
    expect(answered).toBe(false);
    hold.release();
    expect((await running).status).toBe(200);
    expect((await pause).status).toBe(200);
    await post(`${s.url}/resume`);
    expect(await cachedTokens(s, 'q2')).toBe(0);
  });

  it('mode=abort (the default) cuts the running request; clear_cache=false keeps the cache', async () => {
    const s = await start();
    await cachedTokens(s, 'q1');
    const hold = s.hold({ afterChunks: 1 });
    const running = request(`${s.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'running', stream: true }),
    })
      .then((r) => r.body.text())
      .catch((e: Error) => e);
    await hold.reached();
    expect((await post(`${s.url}/pause?clear_cache=false`)).status).toBe(200);
    expect(await running).toBeInstanceOf(Error);
    await s.waitForIdle();
    await post(`${s.url}/resume`);
    expect(await cachedTokens(s, 'q2')).toBe(64);
  });

  it('clear_cache is read as pydantic reads a bool (0, no, off are false); another value is a 422', async () => {
    const s = await start();
    await cachedTokens(s, 'q1');
    for (const v of ['0', 'no', 'OFF']) {
      expect((await post(`${s.url}/pause?mode=wait&clear_cache=${v}`)).status).toBe(200);
      await post(`${s.url}/resume`);
    }
    expect(await cachedTokens(s, 'q2')).toBe(64);
    expect((await post(`${s.url}/pause?clear_cache=maybe`)).status).toBe(422);
    expect(s.paused).toBe(false);
    expect(s.inFlight()).toBe(0);
  });

  it("another mode is vLLM's 422 and pauses nothing; /reset_prefix_cache empties the cache", async () => {
    const s = await start();
    expect((await post(`${s.url}/pause?mode=freeze`)).status).toBe(422);
    expect(s.paused).toBe(false);
    await cachedTokens(s, 'q1');
    expect(await cachedTokens(s, 'q2')).toBe(64);
    expect((await post(`${s.url}/reset_prefix_cache`)).status).toBe(200);
    expect(await cachedTokens(s, 'q3')).toBe(0);
    expect((await post(`${s.url}/reset_mm_cache`)).status).toBe(200);
  });

  it('a client that leaves while held is dropped: nothing runs for it at /resume', async () => {
    const s = await start();
    await s.pause('keep');
    const ac = new AbortController();
    const gone = postJson(`${s.url}/v1/completions`, { prompt: 'gone' }, {}, ac.signal).catch(
      (e: Error) => e,
    );
    await s.waitForRequests(1);
    expect(s.waiting()).toBe(1);
    ac.abort();
    await gone;
    await s.waitForIdle();
    expect(s.waiting()).toBe(0);
    s.resume();
    expect(s.running()).toBe(0);
    expect(s.records.map((r) => r.outcome)).toEqual(['aborted']);
  });
});
