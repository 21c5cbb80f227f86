/**
 * Service discovery end to end through a real Envoy, in P/D mode: simulated vLLM prefill and decode
 * workers self-register over ZMQ exactly like vLLM's P2P NCCL connector (DEALER heartbeats to the
 * router's `--discovery-zmq` ROUTER socket). While streaming and plain requests are in flight (one
 * stream held open on the victim by a simulator hold), one decode worker is killed, its registration expires (short TTL, real clock), and a new process
 * starts at the SAME port and re-registers. The new lifetime must get a new generation and a fresh
 * Worker; the old-generation Worker's in-flight request must release the OLD Worker only; every
 * request either succeeds or fails with a clear status; every load ends at 0.
 */
import { describe, expect, it } from 'vitest';
import type { Router } from '../../src/router.js';
import type { WorkerView } from '../../src/admin/admin-server.js';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/sim/simulator.js';
import type { Worker } from '../../src/workers/worker.js';
import { adminJson, expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { freePorts } from '../support/free-ports.js';
import { waitFor } from '../support/wait-for.js';

/**
 * Registration lifetime: short, so an expiry happens within the test, but with a wide margin over the
 * heartbeat interval (10x): with 400 ms an event-loop stall on a loaded CI machine (two test files,
 * Envoys and simulators on 2 cores) occasionally expired live workers mid-test.
 */
const TTL_MS = 2000;
const HEARTBEAT_MS = 200;
const PREFILL: SimulatorOptions = { role: 'prefill', timeScale: 1, timing: { overheadMs: 10 } };
/** Paced decode: 40 ms per token (steady background traffic; the victim's stream is held, not timed). */
const DECODE: SimulatorOptions = { role: 'decode', timeScale: 1, timing: { overheadMs: 5, baseItlMs: 40 } };
const CLIENTS = 4;
const MAX_REQUESTS_PER_CLIENT = 400;

type Result =
  | { kind: 'ok'; stream: boolean }
  | { kind: 'status'; status: number; body: string }
  | { kind: 'cut'; stream: boolean; error: string };
/** `startedAt`: performance.now() before the request was sent (to attribute failures to the outage). */
type Outcome = Result & { startedAt: number };

async function oneRequest(url: string, i: number): Promise<Result> {
  // Two in three stream: a period of 2 lined up with the decode pool's round robin over two workers,
  // so every stream could land on the same worker and the victim never held one (an intermittent hang).
  const stream = i % 3 !== 2;
  const body = stream
    ? {
        model: 'sim-model',
        messages: [{ role: 'user', content: `stream ${i}` }],
        max_tokens: 6,
        stream: true,
      }
    : { model: 'sim-model', prompt: `plain ${i}`, max_tokens: 2 };
  const path = stream ? '/v1/chat/completions' : '/v1/completions';
  let res: Response;
  try {
    res = await fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  } catch (err) {
    return { kind: 'cut', stream, error: String(err) };
  }
  let text: string;
  try {
    text = await res.text();
  } catch (err) {
    return { kind: 'cut', stream, error: String(err) };
  }
  if (res.status !== 200) return { kind: 'status', status: res.status, body: text.slice(0, 200) };
  const complete = stream ? text.includes('data: [DONE]') : text.includes('"choices"');
  return complete
    ? { kind: 'ok', stream }
    : { kind: 'cut', stream, error: `incomplete body: ${text.slice(-120)}` };
}

/** CLIENTS sequential request loops until stop() (bounded by MAX_REQUESTS_PER_CLIENT each). */
function traffic(url: string): { outcomes: Outcome[]; stop(): Promise<void> } {
  const outcomes: Outcome[] = [];
  let stopped = false;
  let n = 0;
  const loops = Array.from({ length: CLIENTS }, async () => {
    for (let k = 0; k < MAX_REQUESTS_PER_CLIENT && !stopped; k++) {
      const startedAt = performance.now();
      outcomes.push({ ...(await oneRequest(url, n++)), startedAt });
    }
  });
  return {
    outcomes,
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

const decodeWorker = (router: Router, url: string): Worker | undefined => {
  router.pools.decode.reconcile();
  return router.pools.decode.workers.find((w) => w.url === url);
};

describe('ZMQ-discovered P/D workers through Envoy', () => {
  it('a decode worker killed and restarted at the same port gets a new generation; loads end at 0', async () => {
    const sims: Simulator[] = [];
    let router: Router | undefined;
    let envoy: EnvoyHandle | undefined;
    let load: ReturnType<typeof traffic> | undefined;
    try {
      router = await startTestRouter({
        mode: 'pd',
        discoveryZmq: 'tcp://127.0.0.1:0',
        discoveryTtlMs: TTL_MS,
        prefillPolicy: 'round_robin',
        decodePolicy: 'round_robin',
        prefillRetries: 1,
      });
      const r = router;
      const register = { zmq: r.discoveryEndpoint as string, intervalMs: HEARTBEAT_MS };
      // Ports below the ephemeral range: no outgoing connection can take the victim's while it is down.
      const ports = await freePorts(4);
      for (const [i, opts] of [PREFILL, PREFILL, DECODE, DECODE].entries())
        sims.push(await startSimulator({ ...opts, register, port: ports[i] }));
      envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: r.grpcPort }] });
      const url = `http://127.0.0.1:${envoy.listenerPort}`;

      await waitFor(async () => (await adminJson<WorkerView[]>(r, '/workers')).body.length === 4, {
        message: 'all four simulators registered over ZMQ',
      });
      expect((await adminJson(r, '/readyz')).status).toBe(200);

      const victim = sims[2] as Simulator;
      const victimUrl = victim.url;
      const port = victim.port;
      // The victim's next stream stops after its first event and stays open until the kill.
      const held = victim.hold({ stream: true, afterChunks: 1 });
      load = traffic(url);

      // Catch the victim with a stream in flight on its (old-generation) Worker (bounded, with a message).
      let heldReached = false;
      held.reached().then(
        () => {
          heldReached = true;
        },
        () => {}, // rejected only when the simulator closes (the cleanup after a failed wait)
      );
      await waitFor(() => heldReached, { message: 'a stream held on the victim', timeoutMs: 15_000 });
      await waitFor(
        () =>
          (decodeWorker(r, victimUrl)?.load ?? 0) > 0 &&
          victim.records.some(
            (rec) => rec.stream && rec.endMs === undefined && rec.firstByteMs !== undefined,
          ),
        { message: 'a stream in flight on the victim', timeoutMs: 10_000 },
      );
      const old = decodeWorker(r, victimUrl) as Worker;
      const oldGeneration = old.generation;
      expect(old.load).toBeGreaterThan(0);

      // Kill: the HTTP server drops every connection, the DEALER stops heartbeating.
      const killedAt = performance.now();
      await victim.close();
      // The in-flight request(s) end (upstream reset through Envoy) and release the OLD Worker.
      await waitFor(() => old.load === 0, { message: 'old-generation Worker released', timeoutMs: 10_000 });
      // With no heartbeat the registration expires (real clock, TTL_MS).
      await waitFor(() => r.registry.get('decode', victimUrl) === undefined, {
        message: 'old registration expired',
        timeoutMs: 10_000,
      });
      const expiredAt = performance.now();

      // Restart at the same port: same url, same zmq identity, a new process lifetime.
      const reborn = await startSimulator({ ...DECODE, port, register });
      sims[2] = reborn;
      expect(reborn.url).toBe(victimUrl);
      await waitFor(() => (r.registry.get('decode', victimUrl)?.generation ?? 0) > oldGeneration, {
        message: 'restarted worker re-registered with a new generation',
      });
      const reregisteredAt = performance.now();
      // Traffic reaches the new process.
      await waitFor(() => reborn.records.length >= 4, {
        message: 'requests on the restarted worker',
        timeoutMs: 10_000,
      });

      await load.stop();
      const outcomes = load.outcomes;
      load = undefined;

      // The persistent pool holds a fresh Worker for the new lifetime; the old one kept its own state.
      const successor = decodeWorker(r, victimUrl) as Worker;
      expect(successor).toBeDefined();
      expect(successor).not.toBe(old);
      expect(successor.generation).toBeGreaterThan(oldGeneration);
      expect(old.load).toBe(0);
      expect(old.processed).toBeGreaterThan(0);
      const listed = (await adminJson<WorkerView[]>(r, '/workers')).body.filter((w) => w.url === victimUrl);
      expect(listed.map((w) => [w.role, w.generation])).toEqual([['decode', successor.generation]]);

      // Every request either succeeded or failed visibly (a gateway status or a cut stream), and
      // only because of the outage: a cut stream was in flight at the kill, a failed request was
      // sent before the dead registration expired (after that, the snapshot no longer offers it).
      const failures = outcomes.filter((o) => o.kind !== 'ok');
      for (const f of failures) {
        if (f.kind === 'status') expect([502, 503, 504], f.body).toContain(f.status);
        if (f.kind === 'cut') expect(f.startedAt, f.error).toBeLessThan(killedAt);
        expect(f.startedAt).toBeLessThan(expiredAt);
      }
      const afterRestart = outcomes.filter((o) => o.startedAt > reregisteredAt);
      expect(afterRestart.length).toBeGreaterThan(0);
      expect(afterRestart.filter((o) => o.kind !== 'ok')).toEqual([]);
      expect(outcomes.some((o) => o.kind === 'ok' && o.stream)).toBe(true);

      const text = await metricsText(r);
      expect(text).toMatch(
        /vllm_router_pool_changes_total\{role="decode",change="(departed|replaced)"\} [1-9]/,
      );
      // Two first registrations plus the restarted lifetime ('replaced' if no cleanup pass ran between).
      const lifetimes = [
        ...text.matchAll(
          /vllm_router_discovery_updates_total\{role="decode",event="(?:registered|replaced)"\} (\d+)/g,
        ),
      ]
        .map((m) => Number(m[1]))
        .reduce((a, b) => a + b, 0);
      expect(lifetimes).toBeGreaterThanOrEqual(3);

      await expectAllLoadsZero(r);
      expect(r.workers().every((w) => w.load === 0)).toBe(true);
    } finally {
      await load?.stop();
      await envoy?.close();
      await router?.close();
      await Promise.all(sims.map((s) => s.close()));
    }
  });
});
