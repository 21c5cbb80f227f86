import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';
import { waitFor } from '../../support/wait-for.js';
import { getText, postJson } from './sim-test-client.js';

/** Metric samples of the simulator's /metrics page, by name (model_name label dropped). */
async function scrape(s: Simulator): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await getText(`${s.url}/metrics`)).text.split('\n')) {
    const m = /^(vllm:[a-z_]+)\{[^}]*\} (\S+)$/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

/** A streaming request the test ends by aborting it (decode steps of 10 minutes never finish). */
function hold(
  s: Simulator,
  prompt: string,
  maxTokens = 100,
): { ac: AbortController; done: Promise<unknown> } {
  const ac = new AbortController();
  const done = request(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, stream: true }),
    signal: ac.signal,
  })
    .then((r) => r.body.text())
    .catch(() => undefined);
  return { ac, done };
}

const PREFIX = 'p'.repeat(256); // 4 full blocks of 16 tokens (64 characters)
const STALL: SimulatorOptions = {
  timeScale: 1,
  timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000, maxRunningSeqs: 2 },
  cache: { capacityBlocks: 64 },
};

describe('simulator /metrics under direct load (vLLM semantics)', () => {
  let s: Simulator | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  it('moves running, waiting, KV usage and prefix-cache counters with the load, and back', async () => {
    s = await startSimulator(STALL);
    const sim = s;
    const idle = await scrape(sim);
    expect(idle).toMatchObject({
      'vllm:num_requests_running': 0,
      'vllm:num_requests_waiting': 0,
      'vllm:kv_cache_usage_perc': 0,
      'vllm:prefix_cache_queries_total': 0,
      'vllm:cache_config_info': 1,
    });

    // 3 requests sharing a 4-block prefix, each 74 tokens (tail 10 tokens), 2 slots.
    const reqs = [0, 1, 2].map((i) => hold(sim, `${PREFIX}${String(i).repeat(40)}`));
    await sim.waitForRequests(3);
    const busy = await scrape(sim);
    expect(busy['vllm:num_requests_running']).toBe(2);
    expect(busy['vllm:num_requests_waiting']).toBe(1);
    // Shared prefix held once (4 blocks) + one private block each: 6 of 64.
    expect(busy['vllm:kv_cache_usage_perc']).toBeCloseTo(6 / 64);
    expect(busy['vllm:prefix_cache_queries_total']).toBe(148);
    expect(busy['vllm:prefix_cache_hits_total']).toBe(64);

    // The first ends: the waiting one is admitted and hits the shared prefix.
    reqs[0]!.ac.abort();
    await waitFor(() => sim.waiting() === 0, { timeoutMs: 30_000, message: 'waiting request admitted' });
    const after = await scrape(sim);
    expect(after['vllm:num_requests_running']).toBe(2);
    expect(after['vllm:num_requests_waiting']).toBe(0);
    expect(after['vllm:prefix_cache_queries_total']).toBe(222);
    expect(after['vllm:prefix_cache_hits_total']).toBe(128);
    expect(after['vllm:kv_cache_usage_perc']).toBeCloseTo(6 / 64);

    for (const r of reqs) r.ac.abort();
    await Promise.all(reqs.map((r) => r.done));
    await sim.waitForIdle();
    const end = await scrape(sim);
    // Gauges return to 0; the cached prefix stays (evictable blocks are free in vLLM's usage); counters keep.
    expect(end).toMatchObject({
      'vllm:num_requests_running': 0,
      'vllm:num_requests_waiting': 0,
      'vllm:kv_cache_usage_perc': 0,
      'vllm:prefix_cache_queries_total': 222,
      'vllm:prefix_cache_hits_total': 128,
    });
    expect(sim.cache.usedBlocks).toBeGreaterThan(0);
    expect(sim.inFlight()).toBe(0);
  });

  it('counts each sequence of a parallel-sampling request as a running request, as vLLM does', async () => {
    s = await startSimulator({ ...STALL, timing: { ...STALL.timing, maxRunningSeqs: 4 } });
    const sim = s;
    const ac = new AbortController();
    const sampled = request(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: `${PREFIX}sampled`, max_tokens: 100, n: 3, stream: true }),
      signal: ac.signal,
    })
      .then((r) => r.body.text())
      .catch(() => undefined);
    const others = [0, 1].map((i) => hold(sim, `${PREFIX}${String(i).repeat(40)}`));
    await sim.waitForRequests(3);
    // 3 sequences + 1 request in 4 slots; the last waits.
    expect(await scrape(sim)).toMatchObject({
      'vllm:num_requests_running': 4,
      'vllm:num_requests_waiting': 1,
    });
    ac.abort();
    for (const r of others) r.ac.abort();
    await Promise.all([sampled, ...others.map((r) => r.done)]);
    await sim.waitForIdle();
    expect(await scrape(sim)).toMatchObject({
      'vllm:num_requests_running': 0,
      'vllm:num_requests_waiting': 0,
    });
  });

  it('reports a prefill backlog on one lane as waiting requests', async () => {
    // Each prefill takes 74 tokens x 10 s on a single lane: the second and third queue behind it.
    s = await startSimulator({
      ...STALL,
      timing: { ...STALL.timing, maxRunningSeqs: 64, prefillMsPerToken: 10_000, prefillLanes: 1 },
    });
    const sim = s;
    const reqs = [0, 1, 2].map((i) => hold(sim, `${PREFIX}${String(i).repeat(40)}`));
    await sim.waitForRequests(3);
    expect(await scrape(sim)).toMatchObject({
      'vllm:num_requests_running': 1,
      'vllm:num_requests_waiting': 2,
    });
    for (const r of reqs) r.ac.abort();
    await Promise.all(reqs.map((r) => r.done));
    await sim.waitForIdle();
    expect(await scrape(sim)).toMatchObject({
      'vllm:num_requests_running': 0,
      'vllm:num_requests_waiting': 0,
      'vllm:kv_cache_usage_perc': 0,
    });
  });
});

describe('simulator on a shared block pool (vLLM: running requests and cached prefixes share the KV cache)', () => {
  let s: Simulator | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  // 24 blocks, 8 slots. Prompts of 640 characters: 160 tokens = 10 full blocks; 16 output tokens need
  // one more block, so a request needs 11 blocks to start.
  const prompt = (c: string): string => c.repeat(640);

  it.each([
    // Pooled: C waits for blocks with 6 slots free; when A ends C starts and A's idle blocks make room
    // for it (30 blocks cached + B's output block > 24: 7 of A's 10 go, its tail first).
    { pooled: true, busy: { running: 2, waiting: 1, usage: 22 / 24 }, aCachedAfter: 3 * 16 },
    // A fixed cache beside the running requests: all three run (33 blocks held by 24, reads full), and
    // C's insert evicts 6 of A's blocks while A still runs.
    { pooled: false, busy: { running: 3, waiting: 0, usage: 1 }, aCachedAfter: 4 * 16 },
  ])(
    'pooled $pooled: admission waits for blocks and load evicts idle prefixes',
    async ({ pooled, busy, aCachedAfter }) => {
      s = await startSimulator({
        ...STALL,
        timing: { ...STALL.timing, maxRunningSeqs: 8 },
        cache: { capacityBlocks: 24 },
        sharedBlockPool: pooled,
      });
      const sim = s;
      const a = hold(sim, prompt('a'), 16);
      await sim.waitForRequests(1);
      const b = hold(sim, prompt('b'), 16);
      await sim.waitForRequests(2);
      const c = hold(sim, prompt('c'), 16);
      await sim.waitForRequests(3);
      const during = await scrape(sim);
      expect(during['vllm:num_requests_running']).toBe(busy.running);
      expect(during['vllm:num_requests_waiting']).toBe(busy.waiting);
      expect(during['vllm:kv_cache_usage_perc']).toBeCloseTo(busy.usage);

      a.ac.abort();
      await waitFor(() => sim.waiting() === 0 && sim.running() === 2, {
        timeoutMs: 30_000,
        message: 'C running once A ended',
      });
      for (const r of [b, c]) r.ac.abort();
      await Promise.all([a, b, c].map((r) => r.done));
      await sim.waitForIdle();

      // A's prompt again: what of it the cache kept.
      const again = await postJson(`${sim.url}/v1/completions`, { prompt: prompt('a'), max_tokens: 1 });
      expect(again.json.usage).toMatchObject({
        prompt_tokens: 160,
        prompt_tokens_details: { cached_tokens: aCachedAfter },
      });
      await sim.waitForIdle();
      expect(await scrape(sim)).toMatchObject({
        'vllm:num_requests_running': 0,
        'vllm:num_requests_waiting': 0,
        'vllm:kv_cache_usage_perc': 0,
      });
    },
  );
});
