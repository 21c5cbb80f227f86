/**
 * End to end through a real Envoy: an RL trainer's weight update sent to the gateway. vLLM's control
 * endpoints (`POST /pause`, `/reset_prefix_cache`, `/resume`, with VLLM_SERVER_DEV_MODE=1) act on the
 * ONE engine that gets the call; passed on like any request, a pause reached one worker of the fleet
 * while the others kept generating and kept the prefix cache computed with the old weights. The
 * router answers these calls itself: every worker gets the call, the answer lists each one, and the
 * router follows (a paused worker is preferred last, a reset worker's prefixes are forgotten).
 */
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { chatThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText, treeSize } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Simulator } from '../../src/sim/simulator.js';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({
    workers: 3,
    // pausePollMs: a pause sent to an engine directly shows within a few rounds.
    router: { policy: 'cache_aware', decisionHeader: true, pausePollMs: 50 },
  });
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  for (const s of stack.sims) s.resume();
  await control('POST', '/resume');
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

interface FleetAnswer {
  status?: string;
  is_paused?: boolean;
  workers: Array<{ url: string; roles: string[]; status: number }>;
}

/** A control call through Envoy, as a trainer sends it (no body). */
async function control(
  method: 'GET' | 'POST',
  path: string,
  base = stack.url,
): Promise<{ status: number; body: FleetAnswer }> {
  const r = await request(`${base}${path}`, { method });
  const text = await r.body.text();
  return { status: r.statusCode, body: (text === '' ? {} : JSON.parse(text)) as FleetAnswer };
}

interface WorkerInfo {
  url: string;
  health: { paused: boolean };
}
const pausedAsRouterSees = async (): Promise<boolean[]> => {
  const views = (await adminJson<WorkerInfo[]>(stack.router, '/workers')).body;
  return stack.sims.map((s) => views.find((w) => w.url === s.url)!.health.paused);
};

const SYSTEM =
  'You grade the proofs a policy model writes, step by step, and explain every deduction. '.repeat(50);
const ask = (q: string) => chatThrough(stack, SYSTEM, q);
const cachedOf = (text: string): number =>
  (JSON.parse(text) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } }).usage
    .prompt_tokens_details?.cached_tokens ?? 0;

/**
 * Pauses every worker but `sim` through the router, asks once (the request can only go to `sim`),
 * resumes them: the answer's cached tokens.
 */
async function onlyThrough(sim: Simulator): Promise<number> {
  const others = stack.sims.filter((s) => s !== sim).map((s) => `worker_url=${encodeURIComponent(s.url)}`);
  expect((await control('POST', `/pause?mode=keep&${others.join('&')}`)).status).toBe(200);
  try {
    const r = await ask('only one engine runs');
    expect(r.status).toBe(200);
    expect(r.worker).toBe(sim.url);
    return cachedOf(r.text);
  } finally {
    expect((await control('POST', `/resume?${others.join('&')}`)).status).toBe(200);
  }
}

describe('an RL weight update through the gateway (fleet control)', () => {
  it('pause, reset and resume reach every worker; a request sent meanwhile waits and is served after', async () => {
    const first = await ask('warm up');
    expect(first.status).toBe(200);
    const holder = stack.sims.find((s) => s.url === first.worker)!;
    expect((await ask('again')).worker).toBe(holder.url);
    expect(treeSize(await metricsText(stack.router), holder.url)).toBeGreaterThan(SYSTEM.length);

    const paused = await control('POST', '/pause?mode=keep');
    expect(paused.status).toBe(200);
    expect(paused.body.status).toBe('paused');
    const answered = paused.body.workers.map((w) => `${w.url} ${w.status}`).sort();
    expect(answered).toEqual(stack.sims.map((s) => `${s.url} 200`).sort());
    expect(stack.sims.map((s) => s.paused)).toEqual([true, true, true]);
    expect(await pausedAsRouterSees()).toEqual([true, true, true]);
    expect(await metricsText(stack.router)).toMatch(/vllm_router_worker_paused\{[^}]*\} 1/);
    expect((await control('GET', '/is_paused')).body.is_paused).toBe(true);

    // Every worker paused: a rollout request sent now waits on one of them, as it would sent directly.
    const during = ask('sent during the update');
    await waitFor(() => stack.sims.some((s) => s.waiting() === 1), {
      message: 'the request held by a paused engine',
    });

    // The new weights are in: the old weights' cache goes, on every worker and in the router's picture.
    const reset = await control('POST', '/reset_prefix_cache');
    expect(reset.status).toBe(200);
    expect(reset.body.workers).toHaveLength(3);
    const metrics = await metricsText(stack.router);
    for (const s of stack.sims) expect(treeSize(metrics, s.url)).toBe(0);

    const resumed = await control('POST', '/resume');
    expect(resumed.status).toBe(200);
    expect(resumed.body.status).toBe('resumed');
    expect(stack.sims.map((s) => s.paused)).toEqual([false, false, false]);
    expect(await pausedAsRouterSees()).toEqual([false, false, false]);
    const served = await during;
    expect(served.status).toBe(200);
    // It ran after the reset: nothing of the old weights' cache was left to reuse.
    expect(cachedOf(served.text)).toBe(0);
  });

  it('a rolling update (worker_url): the paused engine gets no request while others are not paused', async () => {
    const first = await ask('which worker holds the prompt?');
    const holder = stack.sims.find((s) => s.url === first.worker)!;
    expect((await ask('still there?')).worker).toBe(holder.url);

    const heldBefore = holder.requestsWhilePaused;
    const one = await control('POST', `/pause?mode=keep&worker_url=${encodeURIComponent(holder.url)}`);
    expect(one.status).toBe(200);
    expect(one.body.workers.map((w) => w.url)).toEqual([holder.url]);
    expect(stack.sims.map((s) => s.paused)).toEqual(stack.sims.map((s) => s === holder));

    const during: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await ask(`during the update ${i}`);
      expect(r.status).toBe(200);
      during.push(r.worker);
    }
    expect(during.filter((w) => w === holder.url)).toEqual([]);
    expect(holder.requestsWhilePaused).toBe(heldBefore);

    expect((await control('POST', `/resume?worker_url=${encodeURIComponent(holder.url)}`)).status).toBe(200);
    // Back in selection, its cache kept (mode=keep): with the others paused now, it serves from it.
    expect(await onlyThrough(holder)).toBeGreaterThan(0);
  });
});

describe('a pause the router did not forward (the trainer calls the engine, or another replica does)', () => {
  it("is read from the engine's own /is_paused: requests go elsewhere until it resumes", async () => {
    const first = await ask('who holds it now?');
    const holder = stack.sims.find((s) => s.url === first.worker)!;
    const heldBefore = holder.requestsWhilePaused;
    expect((await request(`${holder.url}/pause?mode=keep`, { method: 'POST' })).statusCode).toBe(200);
    await waitFor(async () => (await pausedAsRouterSees())[stack.sims.indexOf(holder)] === true, {
      message: 'the router to read the pause',
    });
    for (let i = 0; i < 6; i++) {
      const r = await ask(`behind the router's back ${i}`);
      expect(r.status).toBe(200);
      expect(r.worker).not.toBe(holder.url);
    }
    expect(holder.requestsWhilePaused).toBe(heldBefore);
    expect((await request(`${holder.url}/resume`, { method: 'POST' })).statusCode).toBe(200);
    await waitFor(async () => (await pausedAsRouterSees()).every((p) => !p), {
      message: 'the router to read the resume',
    });
    expect(await onlyThrough(holder)).toBeGreaterThan(0);
  });
});

describe('with --fleet-control false (the behaviour before)', () => {
  it('a pause sent through the gateway reaches one worker: the others keep generating', async () => {
    const plain = await startStack({ workers: 2, router: { fleetControl: false } });
    try {
      const r = await control('POST', '/pause?mode=keep', plain.url);
      expect(r.status).toBe(200);
      expect(plain.sims.filter((s) => s.paused)).toHaveLength(1);
      for (const s of plain.sims) s.resume();
      await expectAllLoadsZero(plain.router);
    } finally {
      await plain.close();
    }
  });
});

describe('a static worker that died (it stays a member; its health checks fail)', () => {
  it("does not fail the trainer's pause and resume: 200, the dead worker listed down", async () => {
    const own = await startStack({
      workers: 2,
      router: { healthCheckIntervalMs: 20, healthCheckTimeoutMs: 1000 },
    });
    try {
      const [alive, dead] = own.sims as [Simulator, Simulator];
      await dead.close();
      const downAsRouterSees = async (): Promise<boolean> => {
        const views = (
          await adminJson<Array<{ url: string; health: { active: string } }>>(own.router, '/workers')
        ).body;
        return views.find((w) => w.url === dead.url)?.health.active === 'unhealthy';
      };
      await waitFor(downAsRouterSees, { message: 'the health checks to hold the dead worker down' });

      const paused = await control('POST', '/pause?mode=keep', own.url);
      expect(paused.status).toBe(200);
      expect(paused.body.status).toBe('paused');
      const listed = paused.body.workers.map((w) => `${w.url} ${w.status} ${(w as { down?: boolean }).down}`);
      expect(listed.sort()).toEqual([`${alive.url} 200 undefined`, `${dead.url} 0 true`].sort());
      expect(alive.paused).toBe(true);
      expect((await control('GET', '/is_paused', own.url)).body.is_paused).toBe(true);

      const resumed = await control('POST', '/resume', own.url);
      expect(resumed.status).toBe(200);
      expect(alive.paused).toBe(false);
      await expectAllLoadsZero(own.router);
    } finally {
      await own.close();
    }
  });
});
