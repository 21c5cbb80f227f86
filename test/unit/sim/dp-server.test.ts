/**
 * The simulated data-parallel server (sim/dp-server.ts): one HTTP front over N engines, as
 * `vllm serve --data-parallel-size N` with internal load balancing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mergePages, startDpSimulator, type DpSimulator } from '../../../src/sim/dp-server.js';
import { parseLoadFigures, DEFAULT_METRIC_NAMES } from '../../../src/load/metrics-parse.js';

describe('mergePages', () => {
  it('labels every sample with its engine, one HELP/TYPE per family', () => {
    const page = (n: number) =>
      [
        '# HELP vllm:num_requests_running Running.',
        '# TYPE vllm:num_requests_running gauge',
        `vllm:num_requests_running{model_name="m"} ${n}`,
        '# TYPE vllm:engine_sleep_state gauge',
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0',
        '# TYPE up gauge',
        'up 1',
        '',
      ].join('\n');
    expect(mergePages([page(2), page(5)])).toBe(
      [
        '# HELP vllm:num_requests_running Running.',
        '# TYPE vllm:num_requests_running gauge',
        'vllm:num_requests_running{engine="0",model_name="m"} 2',
        'vllm:num_requests_running{engine="1",model_name="m"} 5',
        '# TYPE vllm:engine_sleep_state gauge',
        'vllm:engine_sleep_state{engine="0",model_name="m",sleep_state="awake"} 1.0',
        'vllm:engine_sleep_state{engine="1",model_name="m",sleep_state="awake"} 1.0',
        '# TYPE up gauge',
        'up{engine="0"} 1',
        'up{engine="1"} 1',
        '',
      ].join('\n'),
    );
  });
});

describe('startDpSimulator', () => {
  let dp: DpSimulator;
  beforeAll(async () => {
    dp = await startDpSimulator({ id: 'dp', dataParallelSize: 3, timeScale: 0 });
  });
  afterAll(async () => dp.close());

  const complete = (headers: Record<string, string> = {}) =>
    fetch(`${dp.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'sim-model', prompt: 'hello', max_tokens: 2 }),
    });

  it('sends a request to the rank its X-data-parallel-rank header names', async () => {
    const res = await complete({ 'x-data-parallel-rank': '2' });
    expect(res.status).toBe(200);
    await res.json();
    expect(dp.pinned).toEqual([0, 0, 1]);
    expect(dp.ranks[2]!.records).toHaveLength(1);
  });

  it('refuses a rank out of range with a 400, as vLLM does', async () => {
    const res = await complete({ 'x-data-parallel-rank': '3' });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toContain('out of range');
    expect(dp.badRank).toBe(1);
  });

  it('places a request without the header by its own balancer (idle engines: the lowest rank)', async () => {
    const res = await complete();
    await res.json();
    expect(dp.balanced).toEqual([1, 0, 0]);
  });

  it("serves one /metrics page with every engine's series", async () => {
    const text = await (await fetch(`${dp.url}/metrics`)).text();
    const f = parseLoadFigures(text, DEFAULT_METRIC_NAMES, { perEngine: true });
    expect([...(f.engines?.keys() ?? [])]).toEqual(['0', '1', '2']);
    expect(f.malformedLines).toBe(0);
  });
});
