/**
 * BootstrapDirectory against real simulated prefill instances (their bootstrap servers on port 0):
 * pending -> ready with the engine ids per DP rank; unreachable until the server answers; invalidate
 * after a restart learns the new ids; DP ranks by least in flight with rotation.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  BootstrapDirectory,
  parseQueryAnswer,
  type BootstrapView,
} from '../../../src/pd/mooncake-bootstrap.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

async function prefill(opts: { dpSize?: number; bootstrapPort?: number } = {}): Promise<Simulator> {
  const s = await startSimulator({ role: 'prefill', kvConnector: 'mooncake', timeScale: 0, ...opts });
  closers.push(() => s.close());
  return s;
}

function directory(): { dir: BootstrapDirectory; changes: Array<[Worker, BootstrapView]> } {
  const changes: Array<[Worker, BootstrapView]> = [];
  const dir = new BootstrapDirectory({
    retryMinMs: 20,
    retryMaxMs: 50,
    onChange: (w, v) => changes.push([w, v]),
  });
  closers.push(() => dir.close());
  return { dir, changes };
}

function workerFor(url: string, bootstrapPort: number): Worker {
  const u = new URL(url);
  return new Worker({ role: 'prefill', url, endpoint: u.host, generation: 1, bootstrapPort });
}

/** Resolves when `pred` holds after some onChange (polls the directory's own events, no sleeps). */
function until(dir: BootstrapDirectory, changes: Array<[Worker, BootstrapView]>, pred: () => boolean) {
  return new Promise<void>((resolve) => {
    const check = (): void => {
      if (pred()) resolve();
      else setImmediate(check);
    };
    check();
  });
}

describe('parseQueryAnswer', () => {
  it.each([
    [{ '0': { engine_id: 'a' } }, ['a']],
    [{ '1': { engine_id: 'b' }, '0': { engine_id: 'a', worker_addr: {} } }, ['a', 'b']],
  ])('%o', (data, ids) => expect(parseQueryAnswer(data)).toEqual(ids));
  it.each([[{}], [[]], [null], [{ '1': { engine_id: 'a' } }], [{ '0': {} }], [{ x: { engine_id: 'a' } }]])(
    'rejects %o',
    (data) => expect(() => parseQueryAnswer(data)).toThrow(),
  );
});

describe('BootstrapDirectory', () => {
  it('is pending, then ready with the engine id of every DP rank', async () => {
    const p = await prefill({ dpSize: 3 });
    const { dir, changes } = directory();
    const w = workerFor(p.url, p.bootstrapPort!);
    dir.track(w);
    expect(dir.notReady.has(w)).toBe(true);
    await until(dir, changes, () => dir.isReady(w));
    expect(dir.view(w)).toMatchObject({
      state: 'ready',
      addr: `http://127.0.0.1:${p.bootstrapPort!}`,
      dpSize: 3,
      engineIds: p.engineIds,
    });
    expect(dir.notReady.size).toBe(0);
  });

  it('picks the least loaded DP rank, rotating among equals', async () => {
    const p = await prefill({ dpSize: 3 });
    const { dir, changes } = directory();
    const w = workerFor(p.url, p.bootstrapPort!);
    dir.track(w);
    await until(dir, changes, () => dir.isReady(w));
    const a = dir.acquireRank(w)!;
    const b = dir.acquireRank(w)!;
    const c = dir.acquireRank(w)!;
    expect([a.rank, b.rank, c.rank]).toEqual([0, 1, 2]);
    expect(c.engineId).toBe(p.engineIds[2]);
    b.release();
    b.release(); // idempotent
    expect(dir.acquireRank(w)!.rank).toBe(1);
  });

  it("a Worker that stands for one data-parallel rank always gets that rank's engine (none beyond the instance's)", async () => {
    const p = await prefill({ dpSize: 3 });
    const { dir, changes } = directory();
    const u = new URL(p.url);
    const rank = (r: number) =>
      new Worker({
        role: 'prefill',
        url: p.url,
        endpoint: u.host,
        generation: 1,
        bootstrapPort: p.bootstrapPort!,
        dpRank: r,
      });
    const [r2, r5] = [rank(2), rank(5)];
    dir.track(r2);
    dir.track(r5);
    await until(dir, changes, () => dir.isReady(r2) && dir.isReady(r5));
    const leases = [dir.acquireRank(r2)!, dir.acquireRank(r2)!];
    expect(leases.map((l) => [l.rank, l.engineId])).toEqual([
      [2, p.engineIds[2]],
      [2, p.engineIds[2]],
    ]);
    for (const l of leases) l.release();
    expect(dir.acquireRank(r5)).toBeUndefined();
  });

  it('stays out while the bootstrap server does not answer, and comes in when it does', async () => {
    const first = await prefill();
    const port = first.bootstrapPort!;
    const url = first.url;
    await first.close();
    const { dir, changes } = directory();
    const w = workerFor(url, port);
    dir.track(w);
    await until(dir, changes, () => dir.view(w)?.state === 'unreachable');
    expect(dir.notReady.has(w)).toBe(true);
    expect(dir.acquireRank(w)).toBeUndefined();
    const again = await prefill({ bootstrapPort: port });
    await until(dir, changes, () => dir.isReady(w));
    expect(dir.view(w)!.engineIds).toEqual(again.engineIds);
  });

  it('invalidate() takes it out until a fresh query answers: a restart brings new engine ids', async () => {
    const first = await prefill();
    const port = first.bootstrapPort!;
    const { dir, changes } = directory();
    const w = workerFor(first.url, port);
    dir.track(w);
    await until(dir, changes, () => dir.isReady(w));
    const oldIds = dir.view(w)!.engineIds;
    await first.close();
    const restarted = await prefill({ bootstrapPort: port });
    dir.invalidate(w);
    expect(dir.isReady(w)).toBe(false);
    await until(dir, changes, () => dir.isReady(w));
    expect(dir.view(w)!.engineIds).toEqual(restarted.engineIds);
    expect(dir.view(w)!.engineIds).not.toEqual(oldIds);
  });

  it('untrack() and close() forget everything (idempotent)', async () => {
    const p = await prefill();
    const { dir } = directory();
    const w = workerFor(p.url, p.bootstrapPort!);
    dir.track(w);
    dir.untrack(w);
    expect(dir.view(w)).toBeUndefined();
    expect(dir.notReady.size).toBe(0);
    await dir.close();
    await dir.close();
    dir.track(w);
    expect(dir.view(w)).toBeUndefined();
  });
});
