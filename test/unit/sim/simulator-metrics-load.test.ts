import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';
import { waitFor } from '../../support/wait-for.js';
import { getText } from './sim-test-client.js';

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
function hold(s: Simulator, prompt: string): { ac: AbortController; done: Promise<unknown> } {
  const ac = new AbortController();
  const done = request(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ prompt, max_tokens: 100, stream: true }),
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
