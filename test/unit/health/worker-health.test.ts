import { describe, expect, it } from 'vitest';
import {
  isFailureOutcome,
  WorkerHealth,
  type HealthOutcome,
  type WorkerHealthView,
} from '../../../src/health/worker-health.js';
import { Worker } from '../../../src/workers/worker.js';

const worker = (
  generation = 1,
  url = 'http://10.0.0.1:8000',
  role: 'regular' | 'prefill' = 'regular',
): Worker => new Worker({ role, url, endpoint: url.slice('http://'.length), generation });

const BREAKER = { failureThreshold: 3, successThreshold: 2, cooldownMs: 1000 };

describe('WorkerHealth: active check thresholds (3 failures / 2 successes)', () => {
  type Expect = { active: 'healthy' | 'unhealthy'; healthy: boolean };
  const H: Expect = { active: 'healthy', healthy: true };
  const U: Expect = { active: 'unhealthy', healthy: false };
  it.each([
    { name: 'fresh worker is healthy', checks: [], expected: [] as Expect[], final: H },
    { name: 'two failures are not enough', checks: [false, false], expected: [H, H], final: H },
    {
      name: 'the third consecutive failure marks it unhealthy',
      checks: [false, false, false],
      expected: [H, H, U],
      final: U,
    },
    {
      name: 'a pass in between resets the count',
      checks: [false, false, true, false, false],
      expected: [H, H, H, H, H],
      final: H,
    },
    {
      name: 'one pass does not bring it back, two do',
      checks: [false, false, false, true, true],
      expected: [H, H, U, U, H],
      final: H,
    },
    {
      name: 'a failure during recovery restarts the success count',
      checks: [false, false, false, true, false, true, true],
      expected: [H, H, U, U, U, U, H],
      final: H,
    },
    {
      name: 'more failures while unhealthy change nothing',
      checks: [false, false, false, false, false, true],
      expected: [H, H, U, U, U, U],
      final: U,
    },
  ])('$name', ({ checks, expected, final }) => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    checks.forEach((ok, i) => {
      health.recordCheck(w, ok, i);
      expect({ active: health.view(w, i).active, healthy: w.healthy }, `after check ${i}`).toEqual(
        expected[i],
      );
    });
    expect({ active: health.view(w, 100).active, healthy: w.healthy }).toEqual(final);
  });

  it('custom thresholds apply', () => {
    const health = new WorkerHealth({ checkFailureThreshold: 1, checkSuccessThreshold: 1 });
    const w = worker();
    health.recordCheck(w, false, 0);
    expect(w.healthy).toBe(false);
    health.recordCheck(w, true, 1);
    expect(w.healthy).toBe(true);
  });

  it.each([{ checkFailureThreshold: 0 }, { checkSuccessThreshold: -1 }, { breaker: { cooldownMs: -5 } }])(
    'rejects invalid options %o',
    (opts) => {
      expect(() => new WorkerHealth(opts)).toThrow(RangeError);
    },
  );
});

describe('WorkerHealth: passive outcomes and the breaker', () => {
  it.each<{ outcome: HealthOutcome; failure: boolean }>([
    { outcome: 'success', failure: false },
    { outcome: 'cancelled', failure: false },
    { outcome: 'server_error', failure: true },
    { outcome: 'no_response', failure: false },
    { outcome: 'prefill_failed', failure: true },
  ])('$outcome counts as failure: $failure', ({ outcome, failure }) => {
    expect(isFailureOutcome(outcome)).toBe(failure);
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordOutcome(w, outcome, i);
    expect(health.view(w, 3).breaker).toBe(failure ? 'open' : 'closed');
    expect(w.healthy).toBe(!failure);
  });

  it('open -> half-open needs refresh(now) to show in worker.healthy; a probe then closes it', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 10);
    expect(w.healthy).toBe(false);
    health.refresh(1009);
    expect(w.healthy).toBe(false);
    health.refresh(1010);
    expect(w.healthy).toBe(true);
    expect(health.view(w, 1010)).toEqual({
      active: 'healthy',
      breaker: 'half_open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });

    // Selected as the probe: out of selection until its outcome arrives.
    health.routed(w, 1011);
    expect(w.healthy).toBe(false);
    health.recordOutcome(w, 'success', 1012);
    expect(w.healthy).toBe(true);
    health.routed(w, 1013);
    health.recordOutcome(w, 'success', 1014);
    expect(health.view(w, 1014)).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
  });

  it('a cancelled probe hands its slot back; a failed probe reopens', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 0);
    health.refresh(1000);
    health.routed(w, 1000);
    expect(w.healthy).toBe(false);
    health.recordOutcome(w, 'cancelled', 1001);
    expect(w.healthy).toBe(true);
    health.routed(w, 1002);
    health.recordOutcome(w, 'server_error', 1003);
    expect(health.view(w, 1003).breaker).toBe('open');
    expect(w.healthy).toBe(false);
  });

  it('a lost probe outcome stops blocking after the probe timeout (refresh)', () => {
    const health = new WorkerHealth({ breaker: { ...BREAKER, probeTimeoutMs: 200 } });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 0);
    health.refresh(1000);
    health.routed(w, 1000);
    health.refresh(1199);
    expect(w.healthy).toBe(false);
    health.refresh(1200);
    expect(w.healthy).toBe(true);
  });

  it('selectable needs both: active unhealthy keeps a closed-breaker worker out, and vice versa', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordCheck(w, false, 0);
    expect(health.view(w, 0)).toEqual({
      active: 'unhealthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: false,
    });
    for (let i = 0; i < 2; i++) health.recordCheck(w, true, 1);
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 1);
    expect(health.view(w, 1)).toEqual({
      active: 'healthy',
      breaker: 'open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: false,
    });
    expect(w.healthy).toBe(false);
    health.refresh(1001);
    expect(w.healthy).toBe(true);
  });

  it('routed() on a closed breaker or an unknown worker changes nothing', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    health.routed(w, 0);
    health.recordOutcome(w, 'success', 0);
    health.routed(w, 1);
    expect(w.healthy).toBe(true);
    expect(health.details(w, 1)).toMatchObject({ breaker: 'closed', probesInFlight: 0 });
  });
});

describe('WorkerHealth: identity and generations', () => {
  it('a new generation starts fresh while the old Worker keeps its state', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const old = worker(1);
    for (let i = 0; i < 3; i++) health.recordCheck(old, false, i);
    for (let i = 0; i < 3; i++) health.recordOutcome(old, 'server_error', i);
    const successor = worker(2);
    expect(health.view(successor, 5)).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
    expect(successor.healthy).toBe(true);

    // Late results for the old generation touch only the old object.
    health.recordCheck(old, false, 6);
    health.recordOutcome(old, 'server_error', 6);
    expect(health.view(old, 6)).toEqual({
      active: 'unhealthy',
      breaker: 'open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: false,
    });
    expect(health.details(successor, 6)).toMatchObject({ consecutiveCheckFailures: 0, breakerFailures: 0 });
    expect(successor.healthy).toBe(true);
  });

  it('the same Worker object (heartbeats) keeps its state', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker(1);
    health.recordCheck(w, false, 0);
    health.recordCheck(w, false, 1);
    expect(health.details(w, 2)).toMatchObject({ active: 'healthy', consecutiveCheckFailures: 2 });
    health.recordCheck(w, false, 3);
    expect(w.healthy).toBe(false);
  });

  it('prefill and decode roles at one URL are separate workers with separate state', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const p = worker(1, 'http://10.0.0.9:8000', 'prefill');
    const r = worker(1, 'http://10.0.0.9:8000', 'regular');
    for (let i = 0; i < 3; i++) health.recordOutcome(p, 'prefill_failed', i);
    expect(p.healthy).toBe(false);
    expect(r.healthy).toBe(true);
  });

  it('forget() drops state: the worker reads as fresh again', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 0);
    health.forget(w);
    expect(health.view(w, 1)).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
    health.refresh(5000); // no pending deadline left for it: must not throw or touch it
  });

  // A worker that dies fails the requests it had in flight, and they end after its pool dropped it
  // (found by test/unit/properties/worker-churn-fuzz.test.ts).
  it('requests that end after their worker left its pool bring back no state for it', () => {
    const changes: string[] = [];
    const health = new WorkerHealth({
      breaker: BREAKER,
      onChange: (w, v) => changes.push(`${w.id} ${v.breaker}`),
    });
    const w = worker();
    health.recordOutcome(w, 'success', 0);
    health.forget(w); // left its pool
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 10);
    health.cordon(w, true, 10);
    // No "worker health changed" (breaker open) for a worker that is gone, no deadline holding it.
    expect(changes).toEqual([]);
    expect((health as unknown as { pending: Set<Worker> }).pending.size).toBe(0);
    expect(health.view(w, 20).breaker).toBe('closed');
  });
});

describe('WorkerHealth: onChange', () => {
  it('reports each transition once, with the previous view', () => {
    const events: Array<[string, WorkerHealthView, WorkerHealthView]> = [];
    const health = new WorkerHealth({
      breaker: BREAKER,
      onChange: (w, view, prev) => events.push([w.id, view, prev]),
    });
    const w = worker();
    for (let i = 0; i < 3; i++) health.recordCheck(w, false, i); // 1 change
    for (let i = 0; i < 3; i++) health.recordCheck(w, false, i); // none
    for (let i = 0; i < 2; i++) health.recordCheck(w, true, i); // 1 change
    for (let i = 0; i < 3; i++) health.recordOutcome(w, 'server_error', 0); // 1 change (open)
    health.refresh(999); // none
    health.refresh(1000); // 1 change (half-open)
    expect(
      events.map(([, v, p]) => [p.active, p.breaker, p.selectable, '->', v.active, v.breaker, v.selectable]),
    ).toEqual([
      ['healthy', 'closed', true, '->', 'unhealthy', 'closed', false],
      ['unhealthy', 'closed', false, '->', 'healthy', 'closed', true],
      ['healthy', 'closed', true, '->', 'healthy', 'open', false],
      ['healthy', 'open', false, '->', 'healthy', 'half_open', true],
    ]);
  });
});

describe('WorkerHealth: re-admission after a restart (fake clock)', () => {
  // The numbers: checks every 500 ms, a 30 s cool-down, a worker killed at t=0 and restarted
  // at t=2000. Requests fail at once (5 failures open the breaker), checks fail while it is down.
  const OPTS = { breaker: { failureThreshold: 5, successThreshold: 2, cooldownMs: 30_000 } };
  const INTERVAL = 500;

  function killAndRestart(health: WorkerHealth, w: Worker): void {
    for (let i = 0; i < 5; i++) health.recordOutcome(w, 'prefill_failed', 10 + i);
    for (let t = INTERVAL; t < 2000; t += INTERVAL) health.recordCheck(w, false, t);
    expect(health.view(w, 1999)).toMatchObject({ active: 'unhealthy', breaker: 'open', selectable: false });
  }

  it('is selectable again after checkSuccessThreshold passed checks, long before the cool-down ends', () => {
    const health = new WorkerHealth(OPTS);
    const w = worker();
    killAndRestart(health, w);
    health.recordCheck(w, true, 2000);
    expect(health.view(w, 2000)).toEqual({
      active: 'unhealthy',
      breaker: 'half_open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: false,
    });
    health.recordCheck(w, true, 2000 + INTERVAL);
    // Two check intervals after the restart, not 30 s: a half-open probe is let through.
    expect(health.view(w, 2000 + INTERVAL)).toEqual({
      active: 'healthy',
      breaker: 'half_open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
    health.routed(w, 2600);
    health.recordOutcome(w, 'success', 2610);
    health.routed(w, 2620);
    health.recordOutcome(w, 'success', 2630);
    expect(health.view(w, 2630)).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
  });

  it('a probe that fails sends it straight back out, with a fresh cool-down', () => {
    const health = new WorkerHealth(OPTS);
    const w = worker();
    killAndRestart(health, w);
    health.recordCheck(w, true, 2000);
    health.recordCheck(w, true, 2500);
    health.routed(w, 2600);
    health.recordOutcome(w, 'prefill_failed', 2610);
    expect(health.view(w, 2610)).toMatchObject({ breaker: 'open', selectable: false });
    expect(health.details(w, 2610).retryInMs).toBe(30_000);
    health.refresh(20_000);
    expect(w.healthy).toBe(false);
  });

  it('only the breaker kept it out (checks never failed): one passed check re-admits it', () => {
    const health = new WorkerHealth(OPTS);
    const w = worker();
    for (let i = 0; i < 5; i++) health.recordOutcome(w, 'server_error', i);
    expect(w.healthy).toBe(false);
    health.recordCheck(w, true, INTERVAL);
    expect(health.view(w, INTERVAL)).toEqual({
      active: 'healthy',
      breaker: 'half_open',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
  });
});

describe('WorkerHealth: metric scrapes are a second active source, counted apart (no double counting)', () => {
  type Step = ['health' | 'metrics', boolean];
  it.each([
    {
      name: 'three failed scrapes mark it unhealthy, like three failed checks',
      steps: [
        ['metrics', false],
        ['metrics', false],
        ['metrics', false],
      ] as Step[],
      want: 'unhealthy',
    },
    {
      name: 'a failed scrape and two failed checks are two sources below threshold, not three failures',
      steps: [
        ['metrics', false],
        ['health', false],
        ['health', false],
      ] as Step[],
      want: 'healthy',
    },
    {
      name: 'passing scrapes do not hide failing /health checks',
      steps: [
        ['health', false],
        ['metrics', true],
        ['health', false],
        ['metrics', true],
        ['health', false],
      ] as Step[],
      want: 'unhealthy',
    },
    {
      name: 'passing checks do not hide failing scrapes; two passing scrapes restore the scrape source',
      steps: [
        ['metrics', false],
        ['metrics', false],
        ['metrics', false],
        ['health', true],
        ['health', true],
        ['metrics', true],
        ['metrics', true],
      ] as Step[],
      want: 'healthy',
    },
  ])('$name', ({ steps, want }) => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    steps.forEach(([source, ok], i) => health.recordCheck(w, ok, i, source));
    expect(health.view(w, steps.length).active).toBe(want);
    expect(w.healthy).toBe(want === 'healthy');
  });
});

describe("WorkerHealth: vLLM's sleep mode (recordSleep)", () => {
  it('an asleep worker leaves selection at once and comes back with the first awake page', () => {
    const changes: Array<[WorkerHealthView, WorkerHealthView]> = [];
    const health = new WorkerHealth({ onChange: (_w, view, prev) => changes.push([view, prev]) });
    const w = worker();
    health.recordSleep(w, false, 0); // a fresh worker that is awake: nothing to change
    expect(changes).toEqual([]);
    health.recordSleep(w, true, 1);
    expect(w.healthy).toBe(false);
    expect(w.asleep).toBe(true);
    expect(health.view(w, 1)).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: true,
      cordoned: false,
      paused: false,
      selectable: false,
    });
    health.recordSleep(w, true, 2); // every scrape repeats it: one change only
    health.recordSleep(w, false, 3);
    expect(w.healthy).toBe(true);
    expect(w.asleep).toBe(false);
    expect(changes.map(([v, p]) => [p.asleep, v.asleep])).toEqual([
      [false, true],
      [true, false],
    ]);
  });

  it('sleep is neither a failed check nor a breaker event: waking does not wait for thresholds', () => {
    const health = new WorkerHealth({ breaker: BREAKER });
    const w = worker();
    for (let t = 0; t < 10; t++) {
      health.recordSleep(w, true, t);
      health.recordCheck(w, true, t, 'metrics'); // the page itself was read fine
    }
    expect(health.details(w, 10)).toMatchObject({
      active: 'healthy',
      breaker: 'closed',
      consecutiveCheckFailures: 0,
      breakerFailures: 0,
    });
    health.recordSleep(w, false, 11);
    expect(w.healthy).toBe(true);
  });

  it('a worker both asleep and failing stays out until both clear', () => {
    const health = new WorkerHealth({ checkFailureThreshold: 1, checkSuccessThreshold: 1 });
    const w = worker();
    health.recordSleep(w, true, 0);
    health.recordCheck(w, false, 1);
    health.recordSleep(w, false, 2);
    expect(w.healthy).toBe(false); // still failing its /health checks
    health.recordCheck(w, true, 3);
    expect(w.healthy).toBe(true);
  });

  it('a new generation starts awake', () => {
    const health = new WorkerHealth();
    const old = worker(1);
    health.recordSleep(old, true, 0);
    const next = worker(2);
    expect(health.view(next, 1).asleep).toBe(false);
    expect(next.healthy).toBe(true);
  });
});

describe('WorkerHealth: cordon (admin API)', () => {
  it('holds a worker out until uncordoned, whatever its checks and sleep state say', () => {
    const changes: boolean[] = [];
    const health = new WorkerHealth({ onChange: (_w, view) => changes.push(view.cordoned) });
    const w = worker();
    health.cordon(w, false, 0); // never seen and not cordoned: nothing to change
    health.cordon(w, true, 1);
    expect([w.healthy, w.cordoned]).toEqual([false, true]);
    health.recordCheck(w, true, 2);
    health.recordSleep(w, true, 3);
    health.recordSleep(w, false, 4); // awake again, still cordoned
    expect(w.healthy).toBe(false);
    health.cordon(w, false, 5);
    expect([w.healthy, w.cordoned]).toEqual([true, false]);
    expect(changes.filter((c, i) => i === 0 || c !== changes[i - 1])).toEqual([true, false]);
    expect(health.view(worker(2), 6).cordoned).toBe(false); // a new generation starts uncordoned
  });
});

describe('WorkerHealth: sleep starts the breaker over', () => {
  it('failures around a sleep (503s from the sleeping engine) do not keep the woken worker out', () => {
    const health = new WorkerHealth({
      breaker: { failureThreshold: 3, successThreshold: 1, cooldownMs: 30_000 },
    });
    const w = worker();
    // Requests that reached it after it fell asleep, before the page said so: the breaker opens.
    for (let t = 0; t < 3; t++) health.recordOutcome(w, 'server_error', t);
    expect(health.view(w, 3).breaker).toBe('open');
    health.recordSleep(w, true, 4);
    expect(health.view(w, 4)).toMatchObject({ asleep: true, breaker: 'closed', selectable: false });
    // One that ended while it was asleep counts in the new breaker, which starts over at the wake.
    health.recordOutcome(w, 'server_error', 5);
    health.recordSleep(w, false, 6);
    expect(health.details(w, 6)).toMatchObject({ breaker: 'closed', breakerFailures: 0, selectable: true });
    expect(w.healthy).toBe(true);
  });
});

describe("WorkerHealth: vLLM's pause of generation (recordPause)", () => {
  it('a paused worker stays selectable, shows paused, and a new generation starts unpaused', () => {
    const seen: boolean[] = [];
    const health = new WorkerHealth({ onChange: (_w, view) => seen.push(view.paused) });
    const w = worker();
    health.recordPause(w, false, 0); // never seen and not paused: nothing to change
    health.recordPause(w, true, 1);
    expect([w.healthy, w.paused, health.view(w, 1).paused]).toEqual([true, true, true]);
    health.recordPause(w, true, 2); // no change, no report
    health.recordPause(w, false, 3);
    expect([w.healthy, w.paused]).toEqual([true, false]);
    expect(seen).toEqual([true, false]);
    health.recordPause(w, true, 4);
    const next = worker(2);
    expect([next.paused, health.view(next, 5).paused]).toEqual([false, false]);
  });
});
