/**
 * The simulator's sleep mode, as vLLM serves it with VLLM_SERVER_DEV_MODE=1: `POST /sleep?level=N`
 * empties the prefix cache and reports the state on `vllm:engine_sleep_state` and `GET /is_sleeping`;
 * `POST /wake_up` undoes it. A generation request that arrives while asleep is answered 503 and
 * counted (real vLLM has no such guard on most releases: the request crashes its engine).
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { Simulator } from '../../../src/sim/simulator.js';
import { blockPrompt, getText, postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

const post = async (url: string): Promise<number> => {
  const r = await request(url, { method: 'POST' });
  await r.body.text();
  return r.statusCode;
};

const sleepSeries = async (s: Simulator): Promise<Record<string, string>> => {
  const text = (await getText(`${s.url}/metrics`)).text;
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/^vllm:engine_sleep_state\{[^}]*sleep_state="(\w+)"\} (\S+)$/gm)) {
    out[m[1]!] = m[2]!;
  }
  return out;
};

describe('simulator: sleep mode', () => {
  it('POST /sleep, then /wake_up: the gauge, /is_sleeping and requests follow', async () => {
    const s = await start();
    expect(await sleepSeries(s)).toEqual({ awake: '1.0', weights_offloaded: '0.0', discard_all: '0.0' });
    expect(JSON.parse((await getText(`${s.url}/is_sleeping`)).text)).toEqual({ is_sleeping: false });

    expect(await post(`${s.url}/sleep?level=1`)).toBe(200);
    expect(s.sleepLevel).toBe(1);
    expect(await sleepSeries(s)).toEqual({ awake: '0.0', weights_offloaded: '1.0', discard_all: '0.0' });
    expect(JSON.parse((await getText(`${s.url}/is_sleeping`)).text)).toEqual({ is_sleeping: true });
    const refused = await postJson(`${s.url}/v1/completions`, { prompt: 'hi' });
    expect(refused.status).toBe(503);
    expect(JSON.stringify(refused.json)).toContain('sleeping');
    expect(s.requestsWhileAsleep).toBe(1);
    expect(s.inFlight()).toBe(0);

    expect(await post(`${s.url}/wake_up`)).toBe(200);
    expect(await sleepSeries(s)).toEqual({ awake: '1.0', weights_offloaded: '0.0', discard_all: '0.0' });
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'hi' })).status).toBe(200);
    expect(s.requestsWhileAsleep).toBe(1);
  });

  it('level 2 reports discard_all; a bad level is a 400 and changes nothing', async () => {
    const s = await start();
    expect(await post(`${s.url}/sleep?level=3`)).toBe(400);
    expect(s.sleepLevel).toBe(0);
    expect(await post(`${s.url}/sleep?level=2`)).toBe(200);
    expect(await sleepSeries(s)).toEqual({ awake: '0.0', weights_offloaded: '0.0', discard_all: '1.0' });
    expect((await getText(`${s.url}/sleep`)).status).toBe(405);
  });

  it("level 2 discards the weights: woken, they hold no model until vLLM's reload_weights", async () => {
    const s = await start();
    const rpc = async (body: unknown): Promise<number> => {
      const r = await request(`${s.url}/collective_rpc`, { method: 'POST', body: JSON.stringify(body) });
      await r.body.text();
      return r.statusCode;
    };
    expect(await post(`${s.url}/sleep?level=2`)).toBe(200);
    expect(s.weightsDiscarded).toBe(true);
    // vLLM's documented order: the weights' memory, the weights, then the KV cache.
    expect(await rpc({ method: 'reload_weights' })).toBe(500); // their memory still sleeps
    expect(await post(`${s.url}/wake_up?tags=weights`)).toBe(200);
    expect(JSON.parse((await getText(`${s.url}/is_sleeping`)).text)).toEqual({ is_sleeping: true });
    expect(await rpc({})).toBe(400);
    expect(await rpc({ method: 'reload_weights' })).toBe(200);
    expect(s.weightsDiscarded).toBe(false);
    expect(await post(`${s.url}/wake_up?tags=kv_cache`)).toBe(200);
    expect(s.sleepLevel).toBe(0);

    // A plain wake_up after level 2 is awake by every signal, and generates garbage.
    expect(await post(`${s.url}/sleep?level=2`)).toBe(200);
    expect(await post(`${s.url}/wake_up`)).toBe(200);
    expect(JSON.parse((await getText(`${s.url}/is_sleeping`)).text)).toEqual({ is_sleeping: false });
    expect((await postJson(`${s.url}/v1/completions`, { prompt: 'hi' })).status).toBe(200);
    expect([s.weightsDiscarded, s.requestsWithoutWeights]).toEqual([true, 1]);
    expect(s.inFlight()).toBe(0);
  });

  it('sleep empties the prefix cache: the first request after waking has no cached tokens', async () => {
    const s = await start();
    const shared = blockPrompt('sys', 4);
    const cached = async (q: string): Promise<number> =>
      (
        (await postJson(`${s.url}/v1/completions`, { prompt: shared + blockPrompt(q, 1) })).json.usage as {
          prompt_tokens_details: { cached_tokens: number } | null;
        }
      ).prompt_tokens_details?.cached_tokens ?? 0;
    await cached('q1');
    expect(await cached('q2')).toBe(64);
    await s.sleep();
    s.wakeUp();
    expect(await cached('q3')).toBe(0);
  });
});
