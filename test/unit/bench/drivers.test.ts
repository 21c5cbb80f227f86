import { afterEach, describe, expect, it } from 'vitest';
import { runClosedLoop } from '../../../bench/drivers.js';
import { generateWorkload } from '../../../bench/workloads.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';

const pool = generateWorkload('no-sharing', {
  count: 3,
  promptTokens: 16,
  outputTokens: 2,
  stream: false,
}).requests;

describe('closed-loop driver: repeated background load straight to a worker', () => {
  let sim: Simulator | undefined;
  afterEach(async () => {
    await sim?.close();
    sim = undefined;
  });

  it('cycles through the pool up to maxRequests with the given header', async () => {
    sim = await startSimulator({ timeScale: 0 });
    const run = await runClosedLoop({
      baseUrl: sim.url,
      requests: pool,
      concurrency: 2,
      repeat: true,
      maxRequests: 7,
      headers: { 'x-bench-external': '1' },
    });
    expect(run.sent).toBe(7);
    expect(run.results.filter((r) => r.status === 200)).toHaveLength(7);
    expect(sim.records).toHaveLength(7);
    expect(sim.records.every((r) => r.headers['x-bench-external'] === '1')).toBe(true);
    expect(sim.inFlight()).toBe(0);
  });

  it('stops sending and aborts what is in flight when stop fires; the worker ends idle', async () => {
    // Decode steps of 10 minutes: requests only end when the driver aborts them.
    sim = await startSimulator({
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 },
    });
    const stop = new AbortController();
    const running = runClosedLoop({
      baseUrl: sim.url,
      requests: pool,
      concurrency: 3,
      repeat: true,
      maxRequests: 1000,
      stop: stop.signal,
    });
    await sim.waitForRequests(3);
    expect(sim.inFlight()).toBe(3);
    stop.abort();
    const run = await running;
    expect(run.sent).toBe(3);
    expect(run.results.every((r) => r.error !== undefined)).toBe(true);
    await sim.waitForIdle();
    expect([sim.inFlight(), sim.running(), sim.waiting()]).toEqual([0, 0, 0]);
  });
});
