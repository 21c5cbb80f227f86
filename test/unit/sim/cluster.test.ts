import { describe, expect, it } from 'vitest';
import { startCluster } from '../../../src/sim/cluster.js';
import { startSimulator } from '../../../src/sim/simulator.js';
import { postJson } from './sim-test-client.js';

describe('startCluster', () => {
  it('starts n simulators with per-index options and closes them all', async () => {
    const cluster = await startCluster(3, (i) => ({ timeScale: 0, role: i === 0 ? 'prefill' : 'decode' }));
    try {
      expect(cluster.sims.map((s) => [s.id, s.role])).toEqual([
        ['sim-0', 'prefill'],
        ['sim-1', 'decode'],
        ['sim-2', 'decode'],
      ]);
      expect(new Set(cluster.sims.map((s) => s.port)).size).toBe(3);
      expect((await postJson(`${cluster.sims[0]!.url}/v1/completions`, { prompt: 'x' })).status).toBe(200);
    } finally {
      await Promise.all([cluster.close(), cluster.close()]);
    }
  });

  it('closes the started simulators when one fails to start', async () => {
    const taken = await startSimulator({ timeScale: 0 });
    try {
      await expect(
        startCluster(2, (i) => ({ timeScale: 0, port: i === 1 ? taken.port : 0 })),
      ).rejects.toThrow(/EADDRINUSE/);
    } finally {
      await taken.close();
    }
  });
});
