/**
 * The short CI version of the chaos soak (test/support/soak-run.ts; `npm run soak` runs the long
 * one): real Envoy, the router, 8 simulated workers, 32 concurrent clients with aborts, injected
 * mid-stream resets, worker kills and restarts on the same port, silenced heartbeats and (P/D) Envoy
 * ext_proc message timeouts. Each mode runs for a fixed, bounded time; the assertions are on the end
 * state, never on durations. The third run routes on KV events (exact mode) through the same chaos:
 * killed publishers, restarts on the same endpoints, re-registrations as new generations; once the
 * fleet is quiet, the router's index of every worker must hold exactly as many blocks as its cache.
 * With one router the chaos also puts workers to sleep and wakes them through its admin API; none
 * may be sent a request while asleep.
 * The fourth names a fallback endpoint with every request (Envoy's override_host policy, one retry):
 * requests routed to a killed worker fail over to the next one, and their load must follow.
 * The last three run two router replicas (child processes behind Envoy's health checks and session
 * hashing) and crash (SIGKILL) and drain (SIGTERM) them in turn under that load: fail-closed, only
 * requests in flight at a crash may fail; fail-open, none; every restarted replica rebuilds its KV
 * index by replay, and ends knowing every worker with its loads at 0. The P/D case is the one that
 * caught Envoy's 1 s merge of host-health updates: a crash right after the other replica came back
 * failed every request for up to a second (`update_merge_window: 0s` now; docs/deploy-envoy.md).
 * The memory bounds are deliberately loose: a CI run is too short for a precise slope; they only
 * catch an absurd leak.
 */
import { describe, expect, it } from 'vitest';
import { booksBalance, runSoak, soakViolations } from '../support/soak-run.js';

const DURATION_S = 12;
/**
 * With replicas: a crash or drain, the restart and Envoy's health check take ~3 s on an idle host and
 * can take twice that under the test suite's load; 16 s leave room for both kinds of action, and the
 * run goes on (at most a minute) until one of each has happened (runSoak).
 */
const REPLICA_DURATION_S = 16;
// Not absurd: the heap (sampled after a full GC) must not grow by 1 MB/s; RSS, which in a run this
// short still includes the allocator's own warm-up, not by 4 MB/s. `npm run soak` reports real slopes.
const LIMITS = { heap: 1024 * 1024, rss: 4 * 1024 * 1024 };

const RUNS = [
  { name: 'regular', mode: 'regular', kvEvents: false, replicas: 1, failOpen: false, fallback: false },
  { name: 'pd', mode: 'pd', kvEvents: false, replicas: 1, failOpen: false, fallback: false },
  {
    name: 'regular, KV events',
    mode: 'regular',
    kvEvents: true,
    replicas: 1,
    failOpen: false,
    fallback: false,
  },
  {
    name: 'regular, fallback endpoints',
    mode: 'regular',
    kvEvents: false,
    replicas: 1,
    failOpen: false,
    fallback: true,
  },
  {
    name: 'two replicas, KV events, fail-closed',
    mode: 'regular',
    kvEvents: true,
    replicas: 2,
    failOpen: false,
    fallback: false,
  },
  {
    name: 'two replicas, fail-open',
    mode: 'regular',
    kvEvents: false,
    replicas: 2,
    failOpen: true,
    fallback: false,
  },
  {
    name: 'P/D, two replicas, fail-closed',
    mode: 'pd',
    kvEvents: false,
    replicas: 2,
    failOpen: false,
    fallback: false,
  },
] as const;

describe.each(RUNS)('chaos soak ($name, short)', ({ mode, kvEvents, replicas, failOpen, fallback }) => {
  it('ends with every load at 0, the router alive, every client answered, and the books balanced', async () => {
    const s = await runSoak({
      mode,
      durationS: replicas > 1 ? REPLICA_DURATION_S : DURATION_S,
      warmupS: 4,
      seed: 11,
      kvEvents,
      replicas,
      failOpen,
      fallback,
      replicaChaosIntervalMs: 2500,
    });
    // On failure, the replica chaos's timeline and Envoy's view of the router cluster come with it.
    const context = JSON.stringify({ replicaChaos: s.replicas?.events, envoy: s.envoyRouterCluster });
    expect(soakViolations(s, LIMITS), context).toEqual([]);
    // The chaos actually happened.
    expect(s.requests).toBeGreaterThan(100);
    expect(s.ok).toBeGreaterThan(0);
    expect(s.aborts.total).toBeGreaterThan(0);
    expect(s.resets.injected).toBeGreaterThan(0);
    expect(s.restarts).toBeGreaterThan(0);
    expect(s.heartbeatPauses).toBeGreaterThan(0);
    // One router: workers were put to sleep and woken through its admin API, and none was sent a
    // request while asleep (soakViolations).
    if (replicas === 1) expect(s.sleeps!.slept).toBeGreaterThan(0);
    if (mode === 'pd') expect(s.timeouts.envoyMessageTimeouts).toBeGreaterThan(0);
    // Requests routed to a killed worker were served by their fallback endpoint, and their load moved.
    if (fallback) expect(s.failovers).toBeGreaterThan(0);
    // The books: every ext_proc stream Envoy opened was counted once by the router, plus at most one
    // per stream Envoy retried after a reset (the first attempt may have reached it). A replica's
    // counts die with it, so with replicas only the end state is checked.
    if (replicas === 1) expect(booksBalance(s.accounting), JSON.stringify(s.accounting)).toBe(true);
    expect(s.finalLoads.every((w) => w.load === 0)).toBe(true);
    if (replicas > 1) {
      // Replicas crashed and were restarted under load; the only requests that failed with them are
      // ones in flight at a crash, and with fail-open not even those (soakViolations). Every replica
      // ended back in service knowing every worker, its loads at 0.
      expect(s.replicas!.kills).toBeGreaterThan(0);
      expect(s.replicas!.drains).toBeGreaterThan(0);
      expect(s.workersKnown).toEqual(Array.from({ length: replicas }, () => s.workers));
      expect(s.replicas!.inFlightAtCrash).toBeGreaterThan(0);
      if (failOpen) expect(s.replicas!.failedAtCrash).toBe(0);
    }
    if (kvEvents) {
      // Routed on events that really flowed, and the index ended where the workers' caches are.
      expect(s.kvIndex!.applied).toBeGreaterThan(0);
      expect(s.kvIndex!.workers.some((w) => w.cached > 0)).toBe(true);
      expect(s.kvIndex!.mismatches).toEqual([]);
    }
  }, 180_000);
});
