/**
 * Load a router never sees: endless streaming requests sent straight at a simulated vLLM worker (not
 * through Envoy or the router), as a batch job or another router would. Its /metrics shows them.
 */
import type { Simulator, SimulatorOptions } from '../../src/sim/simulator.js';
import { waitFor } from './wait-for.js';

/**
 * Simulator options for the saturation tests: real pacing (30 ms per token) and two sequences running
 * at once, so the rest of a direct load waits (reported as waiting), as in a full vLLM.
 */
export const SATURABLE_SIM: SimulatorOptions = {
  timeScale: 1,
  timing: { baseItlMs: 30, overheadMs: 1, maxRunningSeqs: 2 },
};

/** Starts `n` such requests on `sim` and waits until it holds them; abort the controller to end them. */
export async function directLoad(sim: Simulator, n: number, model = 'sim-model'): Promise<AbortController> {
  const ac = new AbortController();
  const before = sim.inFlight();
  for (let i = 0; i < n; i++) {
    void fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        prompt: `batch job ${i}`,
        max_tokens: 100_000,
        stream: true,
      }),
      signal: ac.signal,
    })
      // Keep reading (a cancelled body would end the request); the abort ends it.
      .then((res) => res.body?.pipeTo(new WritableStream(), { signal: ac.signal }))
      .catch(() => undefined);
  }
  await waitFor(() => sim.inFlight() >= before + n, { timeoutMs: 10_000, message: 'direct load in flight' });
  return ac;
}
