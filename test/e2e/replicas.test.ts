/**
 * Several router replicas behind one real Envoy 1.40 (envoy/envoy.yaml rendered with two ext_proc
 * endpoints and, as the generated envoy/envoy-replicas*.yaml, session affinity on `x-session-id`,
 * else on the prompt's opening (Maglev over the replicas); the replicas are the real CLI as child
 * processes, so SIGKILL is a real crash; half of the requests after a crash carry a session key, so
 * a session whose replica died moves too):
 *  - the replicas share the traffic;
 *  - fail-open (`failure_mode_allow: true`): a replica SIGKILLed mid-stream leaves the stream it had
 *    routed streaming to its end, and the next 200 requests all succeed;
 *  - fail-closed (the default): the stream the dead replica held is reset, and the next 200 requests
 *    still all succeed (ext_proc stream retries on another replica + outlier detection);
 *  - every replica down: fail-closed answers 503 and reaches no worker; fail-open falls back to Envoy's
 *    own load balancer over the fleet. In both, a client-supplied x-gateway-destination-endpoint never
 *    chooses the upstream: Envoy strips it before ext_proc runs.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { freePorts } from '../support/free-ports.js';
import { waitFor } from '../support/wait-for.js';
import { startRouterChild, type RouterChild } from '../integration/lifecycle/router-child.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Fleet {
  sims: Simulator[];
  replicas: RouterChild[];
  envoy: EnvoyHandle;
  url: string;
  /** Starts replica `i` again on its ports (`fixedPorts` only). */
  restart(i: number): Promise<RouterChild>;
  /** Every replica passes Envoy's health check and none is ejected by its outlier detection. */
  allInRotation(): Promise<boolean>;
}

async function startFleet(opts: {
  failOpen: boolean;
  replicas?: number;
  /** Replicas on ports fixed for the test, so a crashed one can start again where Envoy expects it. */
  fixedPorts?: boolean;
}): Promise<Fleet> {
  const sims: Simulator[] = [];
  for (let i = 0; i < 2; i++) {
    // 60 tokens at 40 ms: a stream lasts long enough to kill its replica in the middle of it.
    sims.push(await startSimulator({ timing: { overheadMs: 1, baseItlMs: 40 } }));
  }
  cleanups.push(() => Promise.all(sims.map((s) => s.close())));
  const count = opts.replicas ?? 2;
  const ports = opts.fixedPorts ? await freePorts(2 * count) : undefined;
  const replicaArgs = (i: number) => [
    ...['--host', '127.0.0.1', '--policy', 'round_robin'],
    ...['--grpc-port', String(ports?.[2 * i] ?? 0), '--admin-port', String(ports?.[2 * i + 1] ?? 0)],
    ...sims.flatMap((s) => ['--worker', s.url]),
  ];
  const replicas: RouterChild[] = [];
  const start = async (i: number) => {
    const child = await startRouterChild(replicaArgs(i));
    cleanups.push(() => child.kill());
    replicas[i] = child;
    return child;
  };
  for (let i = 0; i < count; i++) await start(i);
  const envoy = await startEnvoy({
    routers: replicas.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    routerHealthCheck: true,
    replicaAffinityHeader: 'x-session-id',
    replicaPrefixKey: true,
    failOpen: opts.failOpen
      ? { fallbackWorkers: sims.map((s) => ({ host: '127.0.0.1', port: s.port })) }
      : undefined,
  });
  cleanups.push(() => envoy.close());
  const fleet: Fleet = {
    sims,
    replicas,
    envoy,
    url: `http://127.0.0.1:${envoy.listenerPort}`,
    restart: (i) => start(i),
    allInRotation: async () => {
      const text = await envoy.stats(
        '^cluster\\.vllm_router\\.(membership_healthy|outlier_detection\\.ejections_active)$',
      );
      const stat = (name: string) => Number(new RegExp(`${name}: (\\d+)`).exec(text)?.[1] ?? NaN);
      return stat('membership_healthy') === count && stat('ejections_active') === 0;
    },
  };
  await waitFor(() => fleet.allInRotation(), {
    timeoutMs: 10_000,
    message: 'replicas healthy',
  });
  return fleet;
}

function completion(url: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'sim-model', ...body }),
  });
}

async function metric(child: RouterChild, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${child.adminPort}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) sum += Number(line.split(' ').pop());
  }
  return sum;
}

/**
 * The replica's worker loads once they are back to 0, or as they stand after 10 s. A load guard is
 * released when the router sees the response end through ext_proc, which can trail the client's
 * last byte by a moment (as router-fixture.ts expectAllLoadsZero waits for it).
 */
async function loads(child: RouterChild): Promise<number[]> {
  const read = async () => {
    const res = await fetch(`http://127.0.0.1:${child.adminPort}/workers`);
    return ((await res.json()) as Array<{ load: number }>).map((w) => w.load);
  };
  let now = await read();
  await waitFor(async () => (now = await read()).every((l) => l === 0), { timeoutMs: 10_000 }).catch(
    () => undefined,
  );
  return now;
}

/**
 * Starts a stream that every worker holds after its second event, SIGKILLs the replica that holds its
 * ext_proc stream, lets the worker go on once that replica is gone, and reads on. Returns whether the
 * stream reached `[DONE]`. The hold makes the kill land mid-stream however slow the machine is.
 */
async function killMidStream(fleet: Fleet): Promise<{ victim: RouterChild; completed: boolean }> {
  const holds = fleet.sims.map((s) => s.hold({ afterChunks: 2, stream: true }));
  try {
    const res = await completion(fleet.url, { prompt: 'crash under me', max_tokens: 10, stream: true });
    expect(res.status).toBe(200);
    const reading = (async () => {
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          text += decoder.decode(value, { stream: true });
        }
      } catch {
        // A reset stream surfaces as a read error ("terminated").
      }
      return text;
    })();
    await Promise.race(holds.map((h) => h.reached()));
    let victim: RouterChild | undefined;
    for (const r of fleet.replicas) {
      if ((await metric(r, 'vllm_router_extproc_streams_active')) > 0) victim = r;
    }
    expect(victim).toBeDefined();
    victim!.process.kill('SIGKILL');
    await victim!.exited;
    for (const h of holds) h.release();
    const text = await reading;
    return { victim: victim!, completed: text.includes('data: [DONE]') };
  } finally {
    for (const h of holds) h.release();
  }
}

/** 200 requests at concurrency 8, half of them streamed; returns the failures. */
async function burst(url: string, total = 200): Promise<string[]> {
  const failures: string[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < total) {
        const i = next++;
        const stream = i % 2 === 0;
        try {
          const session: Record<string, string> = i % 4 < 2 ? { 'x-session-id': `s${i % 8}` } : {};
          const res = await completion(
            url,
            { prompt: `after the crash ${i}`, max_tokens: 3, stream },
            session,
          );
          const text = await res.text();
          if (res.status !== 200) failures.push(`#${i}: ${res.status} ${text.slice(0, 200)}`);
          else if (stream && !text.includes('data: [DONE]')) failures.push(`#${i}: stream cut`);
        } catch (err) {
          failures.push(`#${i}: ${(err as Error).message}`);
        }
      }
    }),
  );
  return failures;
}

describe('router replicas behind Envoy', () => {
  it('share the traffic', async () => {
    const fleet = await startFleet({ failOpen: false });
    expect(await burst(fleet.url, 40)).toEqual([]);
    const served = await Promise.all(fleet.replicas.map((r) => metric(r, 'vllm_router_requests_total')));
    for (const n of served) expect(n).toBeGreaterThan(0);
    expect(served.reduce((a, b) => a + b, 0)).toBe(40);
    for (const r of fleet.replicas) expect(await loads(r)).toEqual([0, 0]);
  });

  it('fail-open: SIGKILL of a replica mid-stream keeps the stream alive; the next 200 requests all succeed', async () => {
    const fleet = await startFleet({ failOpen: true });
    const { victim, completed } = await killMidStream(fleet);
    expect(completed).toBe(true);
    expect(await burst(fleet.url)).toEqual([]);
    const survivor = fleet.replicas.find((r) => r !== victim)!;
    expect(await loads(survivor)).toEqual([0, 0]);
    for (const s of fleet.sims) await s.waitForIdle();
  });

  it('fail-closed: the stream the dead replica held is reset; the next 200 requests all succeed', async () => {
    const fleet = await startFleet({ failOpen: false });
    const { victim, completed } = await killMidStream(fleet);
    expect(completed).toBe(false);
    expect(await burst(fleet.url)).toEqual([]);
    const survivor = fleet.replicas.find((r) => r !== victim)!;
    expect(await loads(survivor)).toEqual([0, 0]);
    expect(await fleet.envoy.stats('ext_proc')).toMatch(/ext_proc\.streams_failed: [1-9]/);
  });

  it('a crashed replica that is back in rotation gets new streams again, crash after crash', async () => {
    // Envoy hands host-health changes to its worker threads' load balancers through
    // `update_merge_window`, 1 s by default: a replica back from a crash read healthy in every stat
    // and still got no stream for up to a second, and if the other replica died then, every request
    // failed (the P/D chaos soak). envoy-config.ts sets the window to 0s. Each cycle: SIGKILL a
    // replica under traffic (outlier detection ejects it, its health check fails it), start it on
    // the same ports, and once Envoy has both in rotation send 24 requests with distinct prompts (no
    // session key: their openings hash over both replicas): the returned one must route some.
    const fleet = await startFleet({ failOpen: false, fixedPorts: true });
    const served: number[] = [];
    for (let cycle = 0; cycle < 6; cycle++) {
      const i = cycle % 2;
      fleet.replicas[i]!.process.kill('SIGKILL');
      await fleet.replicas[i]!.exited;
      expect(await burst(fleet.url, 16)).toEqual([]);
      const back = await fleet.restart(i);
      await waitFor(() => fleet.allInRotation(), { timeoutMs: 15_000, message: 'replica back in rotation' });
      for (let n = 0; n < 24; n++) {
        const res = await completion(fleet.url, { prompt: `after return ${cycle}.${n}`, max_tokens: 1 });
        expect(res.status).toBe(200);
        await res.text();
      }
      served.push(await metric(back, 'vllm_router_requests_total'));
    }
    expect(
      served.every((n) => n > 0),
      `requests the returned replica routed, per cycle: ${served}`,
    ).toBe(true);
    for (const r of fleet.replicas) expect(await loads(r)).toEqual([0, 0]);
  });

  for (const failOpen of [false, true]) {
    it(`every replica down (${failOpen ? 'fail-open' : 'fail-closed'}): a spoofed destination header never picks the upstream`, async () => {
      const fleet = await startFleet({ failOpen, replicas: 1 });
      // A simulator outside the fleet: the address a hostile client would like to reach.
      const rogue = await startSimulator({ timeScale: 0 });
      cleanups.push(() => rogue.close());
      fleet.replicas[0]!.process.kill('SIGKILL');
      await fleet.replicas[0]!.exited;
      for (let i = 0; i < 4; i++) {
        const res = await completion(
          fleet.url,
          { prompt: `spoof ${i}`, max_tokens: 2 },
          { 'x-gateway-destination-endpoint': rogue.hostPort },
        );
        const text = await res.text();
        if (failOpen) {
          // Envoy's own load balancer over the fleet serves it.
          expect(res.status, text).toBe(200);
        } else {
          expect(res.status, text).toBe(503);
          expect(res.headers.get('server')).toBe('envoy');
        }
      }
      expect(rogue.records).toHaveLength(0);
      const served = fleet.sims.reduce((n, s) => n + s.records.length, 0);
      expect(served).toBe(failOpen ? 4 : 0);
    });
  }
});
