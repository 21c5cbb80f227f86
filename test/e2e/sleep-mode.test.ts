/**
 * End to end through a real Envoy: vLLM's sleep mode. A worker put to sleep (`POST /sleep`, as an RL
 * trainer or a warm pool does) keeps answering /health and /metrics with an empty queue: read
 * naively it is the idlest worker, and a request that reaches it crashes its engine on most vLLM
 * releases (the simulator answers 503 and counts it). The router reads `vllm:engine_sleep_state` from
 * the scraped /metrics, sends nothing to a sleeping worker, forgets what its cache held (sleep empties
 * it), and takes it back as soon as a page says it is awake. Through the router's admin API
 * (`POST /workers/sleep`), the worker is first cordoned and drained, so a request in flight there
 * finishes and none arrives between the sleep and the next scrape. A sleeping worker whose registration
 * starts a new lifetime stays asleep (the same vLLM process), unless its process start time says it
 * restarted.
 */
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText, treeSize } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { freePorts } from '../support/free-ports.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    // loadStaleMs: a scrape gap on a starved machine must not turn routing back to in-flight counts.
    router: { policy: 'cache_aware', scrapeIntervalMs: 50, loadStaleMs: 60_000, decisionHeader: true },
  });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  for (const s of stack.sims) await post(`${s.url}/wake_up`);
  await waitFor(async () => (await views()).every((w) => !w.health.asleep), {
    timeoutMs: 10_000,
    message: 'every worker awake again',
  });
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

interface WorkerInfo {
  url: string;
  healthy: boolean;
  health: { active: string; breaker: string; asleep: boolean; cordoned: boolean; paused: boolean };
}

const views = async () => (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body;

async function post(url: string): Promise<number> {
  const r = await request(url, { method: 'POST' });
  await r.body.text();
  return r.statusCode;
}

async function asleepAsRouterSees(sim: Simulator, asleep: boolean): Promise<void> {
  await waitFor(async () => (await views()).find((w) => w.url === sim.url)?.health.asleep === asleep, {
    timeoutMs: 10_000,
    message: `the router to see ${sim.url} ${asleep ? 'asleep' : 'awake'}`,
  });
}

/** A long shared system prompt: the cache-aware policy keeps its requests on the worker that holds it. */
const SYSTEM = 'You are the support assistant of a large hardware store. '.repeat(60);
const ask = (q: string) => chatThrough(stack, SYSTEM, q);

describe("vLLM's sleep mode", () => {
  it('a sleeping worker gets no request, even holding the prefix; it is back once awake', async () => {
    const first = await ask('where are the hammers?');
    expect(first.status).toBe(200);
    const holder = stack.sims.find((s) => s.url === first.worker)!;
    const other = stack.sims.find((s) => s !== holder)!;
    for (let i = 0; i < 3; i++) expect((await ask(`question ${i}`)).worker).toBe(holder.url);
    expect(treeSize(await metricsText(stack.router), holder.url)).toBeGreaterThan(SYSTEM.length);

    expect(await post(`${holder.url}/sleep?level=1`)).toBe(200);
    await asleepAsRouterSees(holder, true);
    const metrics = await metricsText(stack.router);
    expect(metrics).toMatch(new RegExp(`vllm_router_worker_asleep\\{[^}]*worker="${holder.url}"[^}]*\\} 1`));
    expect(metrics).toMatch(new RegExp(`vllm_router_worker_asleep\\{[^}]*worker="${other.url}"[^}]*\\} 0`));
    // Sleep emptied its cache: the router no longer predicts it holds the system prompt.
    expect(treeSize(metrics, holder.url)).toBe(0);

    const during: string[] = [];
    for (let i = 0; i < 8; i++) {
      const r = await ask(`while asleep ${i}`);
      expect(r.status).toBe(200);
      during.push(r.worker);
    }
    expect(during).toEqual(Array(8).fill(other.url));
    expect(holder.requestsWhileAsleep).toBe(0);

    expect(await post(`${holder.url}/wake_up`)).toBe(200);
    await asleepAsRouterSees(holder, false);
    const view = (await views()).find((w) => w.url === holder.url)!;
    expect(view.healthy).toBe(true);
    expect(view.health).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
    });
  });

  it('every worker asleep: a JSON 503 that says so, and no worker sees the request', async () => {
    for (const s of stack.sims) expect(await post(`${s.url}/sleep?level=2`)).toBe(200);
    for (const s of stack.sims) await asleepAsRouterSees(s, true);
    const r = await ask('anyone awake?');
    expect(r.status).toBe(503);
    const body = JSON.parse(r.text) as { error: { message: string } };
    expect(body.error.message).toContain('2 asleep');
    expect(stack.sims.map((s) => s.requestsWhileAsleep)).toEqual([0, 0]);
  });

  it('POST /workers/sleep drains first: the request in flight finishes, the rest go elsewhere', async () => {
    const [a, b] = stack.sims as [Simulator, Simulator];
    // A request held on `a` (its answer waits): `b` cordoned meanwhile, so it can only go to `a`.
    const hold = a.hold();
    const op = (path: string, worker: Simulator) =>
      adminJson(stack.router, `${path}?url=${encodeURIComponent(worker.url)}`, { method: 'POST' });
    expect((await op('/workers/cordon', b)).status).toBe(200);
    const inFlight = ask('pinned to a');
    await hold.reached();
    expect((await op('/workers/uncordon', b)).status).toBe(200);
    const sleeping = adminJson<{ url: string; level: number; workers: string[] }>(
      stack.router,
      `/workers/sleep?url=${encodeURIComponent(a.url)}&level=1`,
      { method: 'POST' },
    );
    await waitFor(async () => (await views()).find((w) => w.url === a.url)?.health.cordoned === true, {
      timeoutMs: 10_000,
      message: 'the worker cordoned',
    });
    expect(a.sleepLevel).toBe(0); // draining: the held request is still there
    const during: string[] = [];
    for (let i = 0; i < 6; i++) during.push((await ask(`during the drain ${i}`)).worker);
    expect(during).toEqual(Array(6).fill(b.url));
    hold.release();
    const pinned = await inFlight;
    expect(pinned.status).toBe(200);
    expect(pinned.worker).toBe(a.url);
    const slept = await sleeping;
    expect(slept.status).toBe(200);
    expect(slept.body).toMatchObject({ url: a.url, level: 1 });
    expect(a.sleepLevel).toBe(1);
    expect((await ask('after the sleep')).worker).toBe(b.url);
    expect(a.requestsWhileAsleep).toBe(0);
    expect(await metricsText(stack.router)).toMatch(
      new RegExp(`vllm_router_worker_cordoned\\{[^}]*worker="${a.url}"[^}]*\\} 1`),
    );

    const woke = await adminJson(stack.router, `/workers/wake_up?url=${encodeURIComponent(a.url)}`, {
      method: 'POST',
    });
    expect(woke.status).toBe(200);
    expect(a.sleepLevel).toBe(0);
    const view = (await views()).find((w) => w.url === a.url)!;
    expect(view.health).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
    });
    expect(view.healthy).toBe(true);
  });
});

describe('a sleeping worker whose registration starts a new lifetime (same process)', () => {
  it('stays asleep and cordoned: no request reaches the sleeping engine', async () => {
    // Scraping off: what the router knows of the sleep is its own record (a page would correct it
    // only at the next scrape, after requests had reached the sleeping engine).
    const s = await startStack({ workers: 2, router: { policy: 'round_robin', scrapeIntervalMs: 0 } });
    try {
      const [a, b] = s.sims as [Simulator, Simulator];
      const slept = await adminJson(s.router, `/workers/sleep?url=${encodeURIComponent(a.url)}&level=1`, {
        method: 'POST',
      });
      expect(slept.status).toBe(200);
      const before = s.router.workers().find((w) => w.url === a.url)!.generation;
      // An operator's registrar re-registers it with one more metadata field: a new lifetime, the
      // same vLLM process, still asleep.
      const again = await adminJson<{ generation: number; event: string }>(s.router, '/workers', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ role: 'regular', url: a.url, metadata: { tp_size: 2 } }),
      });
      expect(again.status).toBe(200);
      expect(again.body.generation).toBeGreaterThan(before);
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) statuses.push((await chatThrough(s, SYSTEM, `after ${i}`)).status);
      expect(a.requestsWhileAsleep, 'requests reached the sleeping engine').toBe(0);
      expect(statuses).toEqual(Array(4).fill(200));
      expect(b.records.length).toBe(4);
      const view = (await adminJson<WorkerInfo[]>(s.router, '/workers')).body.find((w) => w.url === a.url)!;
      expect(view.health).toMatchObject({ asleep: true, cordoned: true });
      await expectAllLoadsZero(s.router);
    } finally {
      await s.close();
    }
  });

  it('after a level-2 sleep, is woken with its weights loaded again', async () => {
    const s = await startStack({ workers: 2, router: { policy: 'round_robin', scrapeIntervalMs: 0 } });
    try {
      const a = s.sims[0]!;
      const slept = await adminJson(s.router, `/workers/sleep?url=${encodeURIComponent(a.url)}&level=2`, {
        method: 'POST',
      });
      expect(slept.status).toBe(200);
      expect(a.weightsDiscarded).toBe(true);
      const again = await adminJson(s.router, '/workers', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ role: 'regular', url: a.url, metadata: { tp_size: 2 } }),
      });
      expect(again.status).toBe(200);
      const woke = await adminJson(s.router, `/workers/wake_up?url=${encodeURIComponent(a.url)}`, {
        method: 'POST',
      });
      expect(woke.status).toBe(200);
      // A plain /wake_up maps the discarded weights' memory back empty: vLLM then answers garbage.
      expect([a.sleepLevel, a.weightsDiscarded]).toEqual([0, false]);
      const view = (await adminJson<WorkerInfo[]>(s.router, '/workers')).body.find((w) => w.url === a.url)!;
      expect(view.health).toMatchObject({ asleep: false, cordoned: false });
      for (let i = 0; i < 4; i++) expect((await chatThrough(s, SYSTEM, `after ${i}`)).status).toBe(200);
      await expectAllLoadsZero(s.router);
    } finally {
      await s.close();
    }
  });

  it('one whose vLLM did restart (a later process start time) is back awake and uncordoned', async () => {
    const ports = await freePorts(2);
    const s = await startStack({
      workers: 2,
      sim: (i) => ({ port: ports[i]! }),
      router: { policy: 'round_robin', scrapeIntervalMs: 20, healthCheckIntervalMs: 60_000 },
    });
    try {
      const a = s.sims[0]!;
      const slept = await adminJson(s.router, `/workers/sleep?url=${encodeURIComponent(a.url)}&level=1`, {
        method: 'POST',
      });
      expect(slept.status).toBe(200);
      await a.close();
      const restarted = await startSimulator({ timeScale: 0, port: ports[0]! });
      s.sims[0] = restarted;
      const again = await adminJson(s.router, '/workers', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ role: 'regular', url: a.url, metadata: { tp_size: 2 } }),
      });
      expect(again.status).toBe(200);
      await waitFor(
        async () => {
          const view = (await adminJson<WorkerInfo[]>(s.router, '/workers')).body.find(
            (w) => w.url === a.url,
          );
          // Selectable too: its metrics could not be read while it was down (a failed check each), and
          // a successful read of the new process brings it back.
          return view?.health.asleep === false && view.health.cordoned === false && view.healthy;
        },
        { timeoutMs: 10_000, message: 'the restarted worker back awake, uncordoned and selectable' },
      );
      // Round robin: every other request is its. One of them may still meet a connection Envoy opened to
      // the old process (reset: the router fails it over to the other worker, the client gets its 200),
      // so it is asked until the new process serves one.
      for (let i = 0; i < 20 && restarted.records.length === 0; i++) {
        expect((await chatThrough(s, SYSTEM, `after ${i}`)).status).toBe(200);
      }
      expect(restarted.records.length).toBeGreaterThan(0);
      await expectAllLoadsZero(s.router);
    } finally {
      await s.close();
    }
  });
});
