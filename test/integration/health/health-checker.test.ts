import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { HealthChecker, type HealthCheckerOptions } from '../../../src/health/health-checker.js';
import { WorkerHealth, type WorkerHealthView } from '../../../src/health/worker-health.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import { LOOP_STALL_MS } from '../../../src/util/loop-stall.js';
import { waitFor } from '../../support/wait-for.js';
import { freePorts } from '../../support/free-ports.js';

const INTERVAL_MS = 20;
const cleanups: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function sim(port = 0): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, port });
  cleanups.push(() => s.close());
  return s;
}

function workerAt(url: string, generation = 1, role: 'regular' | 'prefill' | 'decode' = 'regular'): Worker {
  return new Worker({ role, url, endpoint: new URL(url).host, generation });
}

interface Harness {
  health: WorkerHealth;
  checker: HealthChecker;
  /** Every check result in order, per worker id. */
  results: Map<string, boolean[]>;
  /** Transitions: worker id, index of the check result that caused it, new view. */
  transitions: Array<{ id: string; afterCheck: number; view: WorkerHealthView }>;
  failures: string[];
}

function harness(workers: () => Iterable<Worker>, overrides: Partial<HealthCheckerOptions> = {}): Harness {
  const results = new Map<string, boolean[]>();
  const transitions: Harness['transitions'] = [];
  const failures: string[] = [];
  const health = new WorkerHealth({
    checkFailureThreshold: 3,
    checkSuccessThreshold: 2,
    onChange: (w, view) =>
      transitions.push({ id: w.id, afterCheck: (results.get(w.id)?.length ?? 0) - 1, view }),
  });
  const checker = new HealthChecker({
    workers,
    health: {
      recordCheck: (w, ok, now) => {
        const list = results.get(w.id) ?? [];
        list.push(ok);
        results.set(w.id, list);
        health.recordCheck(w, ok, now);
      },
      refresh: (now) => health.refresh(now),
    },
    intervalMs: INTERVAL_MS,
    timeoutMs: 1000,
    onCheckFailed: (_w, reason) => failures.push(reason),
    ...overrides,
  });
  cleanups.push(() => checker.close());
  return { health, checker, results, transitions, failures };
}

const sockets = (): number => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;

describe('HealthChecker against a simulator', () => {
  it('marks a worker unhealthy after 3 failed checks and healthy after 2 passes', async () => {
    const s = await sim();
    s.injectFault({ status: 503 }, { path: '/health', count: 5 });
    const w = workerAt(s.url);
    const h = harness(() => [w]);
    h.checker.start();

    await waitFor(() => h.transitions.length >= 2, { message: 'unhealthy then healthy' });
    expect(h.results.get(w.id)!.slice(0, 7)).toEqual([false, false, false, false, false, true, true]);
    expect(h.transitions).toEqual([
      {
        id: w.id,
        afterCheck: 2,
        view: {
          active: 'unhealthy',
          breaker: 'closed',
          asleep: false,
          cordoned: false,
          paused: false,
          selectable: false,
        },
      },
      {
        id: w.id,
        afterCheck: 6,
        view: {
          active: 'healthy',
          breaker: 'closed',
          asleep: false,
          cordoned: false,
          paused: false,
          selectable: true,
        },
      },
    ]);
    expect(w.healthy).toBe(true);
    expect(h.failures.slice(0, 5)).toEqual(Array(5).fill('status 503'));
  });

  it('a closed simulator fails checks (connect error); a new one on the same port brings it back', async () => {
    // A port below the ephemeral range: no outgoing connection can take it while the worker is down.
    const [port] = (await freePorts(1)) as [number];
    const s = await sim(port);
    const w = workerAt(s.url);
    const h = harness(() => [w]);
    h.checker.start();
    await waitFor(() => (h.results.get(w.id)?.length ?? 0) >= 1, { message: 'first check' });
    expect(w.healthy).toBe(true);

    await s.close();
    await waitFor(() => !w.healthy, { message: 'unhealthy after the simulator closed' });
    expect(h.failures).toContain('ECONNREFUSED');

    await sim(port);
    await waitFor(() => w.healthy, { message: 'healthy after restart' });
    const views = h.transitions.map((t) => t.view.active);
    expect(views).toEqual(['unhealthy', 'healthy']);
  });

  it('a check that gets no answer within timeoutMs fails with reason timeout', async () => {
    const s = await sim();
    // Every check hangs until the worker is down: on a starved machine a timer that fires late is
    // `router_stalled` (inconclusive, not counted), so the number of hung checks needed is not fixed.
    s.injectFault({ hang: true }, { path: '/health', count: 1_000_000 });
    const w = workerAt(s.url);
    const h = harness(() => [w], { timeoutMs: 50 });
    h.checker.start();
    await waitFor(() => !w.healthy, { message: 'unhealthy after 3 timeouts', timeoutMs: 30_000 });
    expect(h.failures.filter((r) => r !== 'router_stalled').slice(0, 3)).toEqual([
      'timeout',
      'timeout',
      'timeout',
    ]);
    s.clearFaults();
    await waitFor(() => w.healthy, {
      message: 'healthy once the simulator answers again',
      timeoutMs: 30_000,
    });
  });

  it("a timeout caused by the router's own blocked event loop is inconclusive: nothing recorded", async () => {
    const timeoutMs = 1000;
    let received = 0;
    // Never answers; holds the loop as it receives the check: a long synchronous task (tokenizing a
    // 200 KB prompt, say) well past the timeout. Run in the handler, the hold starts right after the
    // check was sent, before its timer can fire even on a starved machine.
    const server: Server = createServer(() => {
      received++;
      const until = performance.now() + timeoutMs + LOOP_STALL_MS + 500;
      while (performance.now() < until);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    );
    const w = workerAt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    const h = harness(() => [w], { timeoutMs });
    h.checker.start();
    await waitFor(() => received >= 1, { message: 'first check sent' });
    await waitFor(() => h.failures.length >= 1, { message: 'the check ended' });
    expect(h.failures[0]).toBe('router_stalled');
    expect(h.results.get(w.id)).toBeUndefined();
    expect(w.healthy).toBe(true);
  });

  it('a new generation starts fresh; the replaced Worker keeps its state', async () => {
    const s = await sim();
    s.injectFault({ status: 500 }, { path: '/health', count: 1000 });
    let current = workerAt(s.url, 1);
    const old = current;
    const h = harness(() => [current]);
    h.checker.start();
    await waitFor(() => !old.healthy, { message: 'old generation unhealthy' });

    const successor = workerAt(s.url, 2);
    current = successor;
    s.clearFaults();
    await waitFor(() => (h.results.get(successor.id)?.length ?? 0) >= 1, {
      message: 'first successor check',
    });
    // The old generation's last round is over; from now on nothing touches it.
    const oldState = h.health.details(old, performance.now());
    const oldChecks = h.results.get(old.id)!.length;
    expect(oldState.active).toBe('unhealthy');
    await waitFor(() => (h.results.get(successor.id)?.length ?? 0) >= 3, {
      message: 'checks of the successor',
    });
    expect(successor.healthy).toBe(true);
    expect(h.results.get(successor.id)!.every((ok) => ok)).toBe(true);
    expect(h.transitions.filter((t) => t.id === successor.id)).toEqual([]);
    expect(h.results.get(old.id)!.length).toBe(oldChecks);
    expect(h.health.details(old, performance.now())).toEqual(oldState);
    expect(old.healthy).toBe(false);
  });

  it('checks a worker that went down while its healthy peer stays selectable', async () => {
    const [a, b] = [await sim(), await sim()];
    b.injectFault({ status: 503 }, { path: '/health', count: 1000 });
    const wa = workerAt(a.url);
    const wb = workerAt(b.url);
    const h = harness(() => [wa, wb], { concurrency: 1 });
    h.checker.start();
    await waitFor(() => !wb.healthy, { message: 'b unhealthy' });
    expect(wa.healthy).toBe(true);
    expect(h.results.get(wa.id)!.every((ok) => ok)).toBe(true);
  });
});

describe('HealthChecker lifecycle', () => {
  /** A bare HTTP server that counts GET /health and can hold answers. */
  async function countingServer(): Promise<{ url: string; hits: () => number; server: Server }> {
    let hits = 0;
    const server = createServer((req, res) => {
      if (req.url === '/health') hits++;
      res.writeHead(200, { 'content-length': 0 }).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        }),
    );
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, hits: () => hits, server };
  }

  it('workers sharing a URL share one request per round; nothing is sent after close()', async () => {
    const srv = await countingServer();
    const p = workerAt(srv.url, 1, 'prefill');
    const d = workerAt(srv.url, 1, 'decode');
    let rounds = 0;
    const h = harness(() => {
      rounds++;
      return [p, d];
    });
    h.checker.start();
    await waitFor(() => (h.results.get(d.id)?.length ?? 0) >= 3, { message: 'three rounds' });
    await h.checker.close();
    const [p1, d1] = [h.results.get(p.id)!.length, h.results.get(d.id)!.length];
    expect(p1).toBe(d1);
    // One request per round (the last one may have been aborted by close() after the server counted it).
    expect(srv.hits()).toBeGreaterThanOrEqual(d1);
    expect(srv.hits()).toBeLessThanOrEqual(rounds);
    const [hitsAtClose, roundsAtClose] = [srv.hits(), rounds];
    // Several intervals later: no new round, no new request.
    await new Promise((r) => setTimeout(r, INTERVAL_MS * 5));
    expect(srv.hits()).toBe(hitsAtClose);
    expect(rounds).toBe(roundsAtClose);
    expect(h.checker.checksInFlight).toBe(0);
  });

  it('close() aborts a hung check, is idempotent, and leaves no sockets open', async () => {
    const baseline = sockets();
    const s = await sim();
    s.injectFault({ hang: true }, { path: '/health', count: 1000 });
    const w = workerAt(s.url);
    const h = harness(() => [w], { timeoutMs: 60_000 });
    h.checker.start();
    await waitFor(() => h.checker.checksInFlight === 1, { message: 'a check in flight' });
    const first = h.checker.close();
    expect(h.checker.close()).toBe(first);
    await first;
    expect(h.checker.checksInFlight).toBe(0);
    // An aborted check is not a worker failure.
    expect(h.results.get(w.id) ?? []).toEqual([]);
    expect(w.healthy).toBe(true);
    await s.close();
    await waitFor(() => sockets() <= baseline, { message: 'sockets back to baseline' });
    h.checker.start(); // closed: no-op
    expect(h.checker.checksInFlight).toBe(0);
  });

  it('intervalMs 0 never checks', async () => {
    let calls = 0;
    const h = harness(
      () => {
        calls++;
        return [];
      },
      { intervalMs: 0 },
    );
    h.checker.start();
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toBe(0);
    await h.checker.close();
  });

  it('a throwing workers() callback is reported and the next round still runs', async () => {
    const errors: unknown[] = [];
    let calls = 0;
    const h = harness(
      () => {
        calls++;
        throw new Error('boom');
      },
      { onError: (err) => errors.push(err) },
    );
    h.checker.start();
    await waitFor(() => calls >= 2, { message: 'two rounds' });
    expect((errors[0] as Error).message).toBe('boom');
  });

  it.each([{ intervalMs: -1 }, { timeoutMs: 0 }, { concurrency: 0 }])('rejects invalid options %o', (bad) => {
    expect(
      () =>
        new HealthChecker({
          workers: () => [],
          health: { recordCheck: () => {} },
          intervalMs: 10,
          timeoutMs: 10,
          ...bad,
        }),
    ).toThrow(RangeError);
  });
});
