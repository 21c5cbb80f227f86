/**
 * WorkerSleep against real simulators (real HTTP on port 0): cordon, drain, vLLM's POST /sleep, and
 * POST /wake_up, with the failure paths that must sleep nothing and give the worker back.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WorkerSleep, type WorkerSleepDeps } from '../../../src/admin/worker-sleep.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import { AdminInputError } from '../../../src/admin/admin-server.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

interface Fixture {
  sim: Simulator;
  workers: Worker[];
  health: WorkerHealth;
  sleeper: WorkerSleep;
  /** Resolves once the drain has looked at the worker `n` more times (it reads the members each poll). */
  polled(n: number): Promise<void>;
}

async function fixture(
  over: Partial<WorkerSleepDeps> = {},
  roles: Array<'regular' | 'prefill' | 'decode'> = ['regular'],
): Promise<Fixture> {
  const sim = await startSimulator({ timeScale: 0 });
  open.push(sim);
  const workers = roles.map(
    (role) => new Worker({ role, url: sim.url, endpoint: sim.hostPort, generation: 1 }),
  );
  const health = new WorkerHealth();
  let reads = 0;
  const sleeper = new WorkerSleep({
    workersAt: (url) => {
      reads += 1;
      return workers.filter((w) => w.url === url);
    },
    health,
    clock: () => performance.now(),
    pollMs: 2,
    ...over,
  });
  open.push(sleeper);
  const polled = async (n: number): Promise<void> => {
    const target = reads + n;
    await until(() => reads >= target);
  };
  return { sim, workers, health, sleeper, polled };
}

async function rejection(p: Promise<unknown>): Promise<AdminInputError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(AdminInputError);
  return err as AdminInputError;
}

/** Resolves once `cond` holds, checking on every turn of the event loop (no timing assertion). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setImmediate(r));
}

describe('WorkerSleep', () => {
  it('cordons every role at the URL, waits for its requests to end, then puts it to sleep', async () => {
    const { sim, workers, health, sleeper, polled } = await fixture({}, ['prefill', 'decode']);
    workers[1]!.load = 1; // a decode still streaming
    let done = false;
    const slept = sleeper.sleep(sim.url, 1).finally(() => (done = true));
    await until(() => workers.every((w) => w.cordoned));
    expect(workers.map((w) => w.healthy)).toEqual([false, false]);
    // Draining: the worker is not asleep while a request is there.
    await polled(5);
    expect(done).toBe(false);
    expect(sim.sleepLevel).toBe(0);
    workers[1]!.load = 0;
    const result = await slept;
    expect(result).toMatchObject({ url: sim.url, level: 1, workers: workers.map((w) => w.id) });
    expect(sim.sleepLevel).toBe(1);
    // Asleep at once (not at the next scrape), and still cordoned.
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([
      [true, true, false],
      [true, true, false],
    ]);

    const woke = await sleeper.wakeUp(sim.url);
    expect(woke.workers).toHaveLength(2);
    expect(sim.sleepLevel).toBe(0);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([
      [false, false, true],
      [false, false, true],
    ]);
    expect(health.view(workers[0]!, 0)).toMatchObject({ asleep: false, cordoned: false, selectable: true });
  });

  it('with scraped pages, also waits for a page read after the drain that shows nothing running', async () => {
    let page = { takenAtMs: 0, busy: 3 };
    const { sim, workers, sleeper, polled } = await fixture({ scraped: () => page });
    const slept = sleeper.sleep(sim.url, 2);
    await until(() => workers[0]!.cordoned);
    // An old page that says idle is not enough: it may predate requests of other replicas.
    page = { takenAtMs: 0, busy: 0 };
    await polled(5);
    expect(sim.sleepLevel).toBe(0);
    page = { takenAtMs: performance.now(), busy: 1 }; // fresh, but another replica's request runs
    await polled(5);
    expect(sim.sleepLevel).toBe(0);
    page = { takenAtMs: performance.now(), busy: 0 };
    await slept;
    expect(sim.sleepLevel).toBe(2);
  });

  it('a level-2 sleep is woken with its weights loaded again before the worker is back in selection', async () => {
    const { sim, workers, sleeper } = await fixture();
    await sleeper.sleep(sim.url, 2);
    expect(sim.weightsDiscarded).toBe(true);
    await sleeper.wakeUp(sim.url);
    // vLLM's wake from level 2 (docs/features/sleep_mode.md): the weights' memory, reload_weights,
    // then the KV cache. A plain /wake_up leaves the weights empty: the engine answers with garbage.
    expect([sim.sleepLevel, sim.weightsDiscarded]).toEqual([0, false]);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([[false, false, true]]);
    expect(workers[0]!.load).toBe(0);
  });

  it('a level-2 sleeper replaced in place while asleep is woken with its weights loaded again', async () => {
    const { sim, workers, health, sleeper } = await fixture();
    await sleeper.sleep(sim.url, 2);
    // Its registration replaced in place (changed metadata, a lapsed heartbeat re-registered): the
    // same sleeping process under a new Worker, which the pools carry over asleep and cordoned.
    const successor = new Worker({ role: 'regular', url: sim.url, endpoint: sim.hostPort, generation: 2 });
    health.recordSleep(successor, true, performance.now());
    health.cordon(successor, true, performance.now());
    workers[0] = successor;
    await sleeper.wakeUp(sim.url);
    // Not a plain /wake_up: that maps the discarded weights' memory back empty (garbage answers).
    expect([sim.sleepLevel, sim.weightsDiscarded]).toEqual([0, false]);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([[false, false, true]]);
    expect(workers[0]!.load).toBe(0);
  });

  it('a worker restarted at the URL after a level-2 sleep (awake, weights loaded) is woken plainly', async () => {
    const { sim, workers, sleeper } = await fixture();
    await sleeper.sleep(sim.url, 2);
    // A new process there (the scraper saw it start later): awake, not carried over asleep.
    workers[0] = new Worker({ role: 'regular', url: sim.url, endpoint: sim.hostPort, generation: 2 });
    sim.injectFault({ status: 500, message: 'not sleeping' }, { path: '/collective_rpc' });
    await sleeper.wakeUp(sim.url);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([[false, false, true]]);
    expect(workers[0]!.load).toBe(0);
  });

  it('a level-2 wake whose weights cannot be reloaded keeps the worker out of selection, with the reason', async () => {
    const { sim, workers, sleeper } = await fixture();
    await sleeper.sleep(sim.url, 2);
    sim.injectFault({ status: 500, message: "no method 'reload_weights'" }, { path: '/collective_rpc' });
    const err = await rejection(sleeper.wakeUp(sim.url));
    expect(err.code).toBe('worker_error');
    expect(err.message).toContain('reload_weights');
    expect(sim.weightsDiscarded).toBe(true);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([[true, true, false]]);
    // Asked again, the wake goes through the steps once more and completes.
    await sleeper.wakeUp(sim.url);
    expect([sim.sleepLevel, sim.weightsDiscarded]).toEqual([0, false]);
    expect(workers.map((w) => [w.asleep, w.cordoned, w.healthy])).toEqual([[false, false, true]]);
    expect(workers[0]!.load).toBe(0);
  });

  it('a worker re-registered at the URL during the drain (a new generation) is held and drained too', async () => {
    const { sim, workers, sleeper, polled } = await fixture();
    const old = workers[0]!;
    old.load = 1;
    const slept = sleeper.sleep(sim.url, 1);
    await until(() => old.cordoned);
    // The process restarted and registered again: a new Worker at the same URL, with a request.
    const reborn = new Worker({ role: 'regular', url: sim.url, endpoint: sim.hostPort, generation: 2 });
    reborn.load = 1;
    workers.splice(0, 1, reborn);
    await until(() => reborn.cordoned);
    expect(reborn.healthy).toBe(false);
    old.load = 0; // the old generation's request ends; the new one's still runs
    await polled(5);
    expect(sim.sleepLevel).toBe(0);
    reborn.load = 0;
    const result = await slept;
    expect(sim.sleepLevel).toBe(1);
    expect(result.workers).toEqual([old.id, reborn.id]);
    expect([old.asleep, reborn.asleep]).toEqual([true, true]);
  });

  it('waits for requests promised to the worker that hold no load yet (a P/D decode during its prefill leg)', async () => {
    let promised = 1;
    const { sim, workers, sleeper, polled } = await fixture({ pending: () => promised });
    const slept = sleeper.sleep(sim.url, 1);
    await until(() => workers[0]!.cordoned);
    await polled(5);
    expect(sim.sleepLevel).toBe(0);
    promised = 0;
    await slept;
    expect(sim.sleepLevel).toBe(1);
  });

  it('a drain that does not finish in time sleeps nothing and gives the worker back', async () => {
    const { sim, workers, sleeper } = await fixture();
    workers[0]!.load = 1;
    const err = await rejection(sleeper.sleep(sim.url, 1, 30));
    expect(err.code).toBe('worker_busy');
    expect(err.message).toContain('1 requests of this router');
    expect(sim.sleepLevel).toBe(0);
    expect(workers[0]!.cordoned).toBe(false);
    expect(workers[0]!.healthy).toBe(true);
    workers[0]!.load = 0;
  });

  it('a worker cordoned before the failed sleep stays cordoned', async () => {
    const { sim, workers, sleeper } = await fixture();
    expect(sleeper.cordon(sim.url, true)).toEqual([workers[0]!.id]);
    workers[0]!.load = 1;
    await rejection(sleeper.sleep(sim.url, 1, 10));
    expect(workers[0]!.cordoned).toBe(true);
    workers[0]!.load = 0;
    sleeper.cordon(sim.url, false);
    expect(workers[0]!.healthy).toBe(true);
  });

  it("an operator's cordon during the drain outlives a sleep that fails", async () => {
    const { sim, workers, sleeper } = await fixture();
    sim.injectFault({ status: 500, message: 'sleep mode is not enabled' }, { path: '/sleep' });
    workers[0]!.load = 1;
    const pending = sleeper.sleep(sim.url, 1, 60_000);
    await until(() => workers[0]!.cordoned);
    sleeper.cordon(sim.url, true); // maintenance: keep it out whatever the sleep does
    workers[0]!.load = 0;
    expect((await rejection(pending)).code).toBe('worker_error');
    expect(workers[0]!.cordoned).toBe(true);
    expect(workers[0]!.healthy).toBe(false);
  });

  it('an uncordon during the drain is worker_busy: no request is let in under the sleep', async () => {
    const { sim, workers, sleeper } = await fixture();
    workers[0]!.load = 1;
    const pending = sleeper.sleep(sim.url, 1, 60_000);
    await until(() => workers[0]!.cordoned);
    const refused = (() => {
      try {
        sleeper.cordon(sim.url, false);
        return undefined;
      } catch (err) {
        return err;
      }
    })();
    expect(workers[0]!.healthy).toBe(false);
    expect(refused).toBeInstanceOf(AdminInputError);
    expect((refused as AdminInputError).code).toBe('worker_busy');
    workers[0]!.load = 0;
    await pending;
    expect(sim.sleepLevel).toBe(1);
  });

  it('a worker that refuses to sleep (or cannot be reached) is given back, with the reason', async () => {
    const { sim, workers, sleeper } = await fixture();
    sim.injectFault({ status: 500, message: 'sleep mode is not enabled' }, { path: '/sleep' });
    const err = await rejection(sleeper.sleep(sim.url, 1));
    expect(err.code).toBe('worker_error');
    expect(err.status).toBe(502);
    expect(err.message).toContain('status 500');
    expect(workers[0]!.cordoned).toBe(false);
    expect(workers[0]!.asleep).toBe(false);
  });

  it('one operation per URL at a time; an unknown URL is not_found', async () => {
    const { sim, workers, sleeper } = await fixture();
    workers[0]!.load = 1;
    const first = sleeper.sleep(sim.url, 1, 60_000);
    await until(() => workers[0]!.cordoned);
    expect((await rejection(sleeper.wakeUp(sim.url))).code).toBe('worker_busy');
    expect((await rejection(sleeper.sleep('http://127.0.0.1:1', 1))).code).toBe('not_found');
    workers[0]!.load = 0;
    await first;
    expect(sim.sleepLevel).toBe(1);
  });

  it('close() ends a drain in progress: nothing sleeps and the call fails', async () => {
    const { sim, workers, sleeper } = await fixture();
    workers[0]!.load = 1;
    const pending = sleeper.sleep(sim.url, 1, 60_000);
    await until(() => workers[0]!.cordoned);
    await sleeper.close();
    expect((await rejection(pending)).code).toBe('worker_busy');
    expect(sim.sleepLevel).toBe(0);
    workers[0]!.load = 0;
  });
});
