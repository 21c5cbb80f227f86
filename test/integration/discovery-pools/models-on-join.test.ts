/**
 * A real router learns what a worker serves as soon as the worker joins (the registry change asks the
 * models poller at once), not at its next round: here the round is a minute away, and a worker
 * registered through the admin API is listed with its served names and adapters within a few reads.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Router } from '../../../src/router.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { adminJson, startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface View {
  url: string;
  servedModels: {
    base: string[];
    adapters: Record<string, string>;
    maxModelLen?: Record<string, number>;
  } | null;
}

describe('models of a worker that joins', () => {
  it('are read when it registers, not at the next round a minute later', async () => {
    const sim: Simulator = await startSimulator({
      timeScale: 0,
      model: 'llama',
      aliases: ['llama-chat'],
      lora: { maxLoras: 2, modules: ['sql-lora'] },
    });
    cleanups.push(() => sim.close());
    const router: Router = await startTestRouter({ modelsIntervalMs: 60_000 });
    cleanups.push(() => router.close());

    const res = await fetch(`http://127.0.0.1:${router.adminPort}/workers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'regular', url: sim.url }),
    });
    expect(res.status).toBe(200);
    await waitFor(async () => (await adminJson<View[]>(router, '/workers')).body[0]?.servedModels !== null, {
      message: 'the joined worker listed',
    });
    const [view] = (await adminJson<View[]>(router, '/workers')).body;
    expect(view?.servedModels).toEqual({
      base: ['llama', 'llama-chat'],
      adapters: { 'sql-lora': 'llama' },
      // The simulator's cards carry vLLM's max_model_len (its default, 131072).
      maxModelLen: { llama: 131072, 'llama-chat': 131072, 'sql-lora': 131072 },
    });
    expect(sim.records).toHaveLength(0); // no generation request was needed to learn it
  });

  it('reach workers started with --api-key when the router has their key (--worker-api-key)', async () => {
    const sim = await startSimulator({
      timeScale: 0,
      model: 'llama',
      aliases: ['llama-chat'],
      apiKey: 'secret',
    });
    cleanups.push(() => sim.close());
    const listed = async (workerApiKey: string): Promise<View['servedModels']> => {
      const router = await startTestRouter({ workers: [sim.url], modelsIntervalMs: 60_000, workerApiKey });
      try {
        await waitFor(async () => (await adminJson<{ status: string }>(router, '/readyz')).status === 200, {
          message: 'ready (the first read done)',
        });
        return (await adminJson<View[]>(router, '/workers')).body[0]!.servedModels;
      } finally {
        await router.close();
      }
    };
    expect(await listed('secret')).toEqual({
      base: ['llama', 'llama-chat'],
      adapters: {},
      maxModelLen: { llama: 131072, 'llama-chat': 131072 },
    });
    expect(await listed('')).toBeNull(); // a 401: nothing known (no metrics label either: scrapes off here)
  });
});
