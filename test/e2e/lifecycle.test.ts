/**
 * Graceful lifecycle through a real Envoy 1.40:
 *  - the real CLI as a child process: SIGTERM turns readiness off (/readyz 503, gRPC health
 *    NOT_SERVING) and closes discovery while an in-flight stream keeps flowing to its end; exit 0.
 *    A stream that outlives the drain timeout is handed back to Envoy (its ext_proc stream ends with
 *    gRPC OK) and finishes after the router has exited, though the filter fails closed. A second
 *    signal exits 1 at once;
 *  - a rolling restart: Envoy balances ext_proc streams over two gRPC-health-checked routers; one is
 *    drained, closed and replaced on the same port under a bounded load: zero failed requests;
 *  - closing after a drain that timed out: a request routed during the close grace (its prefill leg
 *    was still running) is handed back to Envoy too, not cut when the grace ends;
 *  - router down: Envoy fails closed with a 503 and no request reaches a worker.
 *
 * Rolling restart protocol (what router.drain() must do, prototyped here with drain(0)):
 *  1. readiness off (gRPC health NOT_SERVING) but KEEP accepting ext_proc streams until Envoy's health
 *     check has marked the router unhealthy (interval x unhealthy_threshold, plus the check's
 *     timeout). Without that grace Envoy still opens streams on the router after it closed: 500s;
 *  2. wait for the in-flight streams (drain timeout);
 *  3. close the gRPC server gracefully (tryShutdown, bounded): the replies to a stream's last
 *     messages can still be in flight when the session has ended; a forceShutdown at that moment
 *     cuts the client's response.
 */
import { afterEach, describe, expect, it } from 'vitest';
import net from 'node:net';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';
import { freePorts } from '../support/free-ports.js';
import { waitFor } from '../support/wait-for.js';
import { healthClient, startRouterChild, type RouterChild } from '../integration/lifecycle/router-child.js';
import { startPdStack } from '../support/pd-stack.js';

const EXTPROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';
const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function completion(url: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', ...body }),
    signal,
  });
}

/** Reads an SSE response chunk by chunk; `onChunk` sees the running count. */
async function readStream(res: Response, onChunk?: (n: number) => void | Promise<void>): Promise<string> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let n = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text;
    text += decoder.decode(value, { stream: true });
    await onChunk?.(++n);
  }
}

function tcpRefused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

async function envoyGauge(envoy: EnvoyHandle, name: string): Promise<number> {
  const text = await envoy.stats(`^${name.replace(/\./g, '\\.')}$`);
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

describe('CLI shutdown (child process behind Envoy)', () => {
  async function setup(extraArgs: string[] = []) {
    const sim = await startSimulator({ timeScale: 1, timing: { overheadMs: 1, baseItlMs: 100 } });
    cleanups.push(() => sim.close());
    const child = await startRouterChild([
      '--host',
      '127.0.0.1',
      '--grpc-port',
      '0',
      '--admin-port',
      '0',
      '--discovery-zmq',
      'tcp://127.0.0.1:0',
      '--worker',
      sim.url,
      '--policy',
      'round_robin',
      ...extraArgs,
    ]);
    cleanups.push(() => child.kill());
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: child.grpcPort }] });
    cleanups.push(() => envoy.close());
    const health = healthClient(child.grpcPort);
    cleanups.push(() => health.close());
    return { sim, child, envoy, health, url: `http://127.0.0.1:${envoy.listenerPort}` };
  }

  const readyz = (child: RouterChild) =>
    fetch(`http://127.0.0.1:${child.adminPort}/readyz`).then(async (r) => ({
      status: r.status,
      body: (await r.json()) as { draining?: boolean },
    }));

  it('SIGTERM: readiness off and discovery closed while the stream flows; the stream completes; exit 0', async () => {
    const { sim, child, health, url } = await setup();
    expect((await readyz(child)).status).toBe(200);
    for (const name of ['', 'readiness', EXTPROC_SERVICE]) expect(await health.check(name)).toBe('SERVING');
    const discoveryPort = Number(child.discovery?.split(':').pop());
    expect(await tcpRefused(discoveryPort)).toBe(false);

    // The worker holds the stream after two events until the checks are done, however slow the
    // machine: the drain must find it in flight.
    const hold = sim.hold({ afterChunks: 2, stream: true });
    const res = await completion(url, { prompt: 'drain me', max_tokens: 30, stream: true });
    expect(res.status).toBe(200);
    const reading = readStream(res);
    await hold.reached();
    child.process.kill('SIGTERM');
    await waitFor(async () => (await readyz(child)).status === 503, {
      message: '/readyz 503',
      timeoutMs: 20_000,
    });
    expect((await readyz(child)).body.draining).toBe(true);
    for (const name of ['', 'readiness', EXTPROC_SERVICE]) {
      expect(await health.check(name)).toBe('NOT_SERVING');
    }
    await waitFor(() => tcpRefused(discoveryPort), { message: 'discovery socket closed', timeoutMs: 20_000 });
    expect(hold.held).toBe(1);
    hold.release();
    const text = await reading;
    expect(text).toContain('data: [DONE]');
    // Tokens kept arriving after readiness went off: the stream was drained, not cut.
    expect(text.split('\n\n').filter((e) => e.startsWith('data: {')).length).toBeGreaterThan(2);
    expect(await child.exited).toEqual({ code: 0, signal: null });
    expect(child.lines.find((l) => l.msg === 'closing')?.drained).toBe(true);
  });

  it.each([
    ['skipped by Envoy (the default)', []],
    ['watched chunk by chunk', ['--response-body-sample', '1']],
  ])(
    'a stream longer than the drain timeout, body %s: the router hands it back to Envoy, which finishes it after the router exited (fail-closed)',
    async (_body, extra) => {
      const { sim, child, url } = await setup([
        ...['--drain-timeout-ms', '300', '--drain-grace-ms', '0', '--close-grace-ms', '0'],
        ...extra,
      ]);
      // The worker holds the stream after two events until the router has exited, however slow the
      // machine: the rest of it can only flow through Envoy alone.
      const hold = sim.hold({ afterChunks: 2, stream: true });
      const res = await completion(url, { prompt: 'outlive the drain', max_tokens: 10, stream: true });
      expect(res.status).toBe(200);
      let exited = false;
      let chunksAfterExit = 0;
      const reading = readStream(res, () => {
        if (exited) chunksAfterExit += 1;
      });
      await hold.reached();
      child.process.kill('SIGTERM');
      expect(await child.exited).toEqual({ code: 0, signal: null });
      exited = true;
      hold.release();
      const text = await reading;
      expect(text).toContain('data: [DONE]');
      // The router was gone while the response still flowed: Envoy finished it alone.
      expect(chunksAfterExit).toBeGreaterThan(0);
      expect(child.lines.find((l) => l.msg === 'closing')?.drained).toBe(false);
      expect(child.lines.find((l) => l.msg === 'handed routed streams back to Envoy')?.released).toBe(1);
    },
  );

  it('a second signal exits 1 immediately, without waiting for the drain', async () => {
    const { sim, child, url } = await setup(['--drain-timeout-ms', '600000']);
    sim.injectFault({ hang: true });
    const ac = new AbortController();
    cleanups.push(() => ac.abort());
    const pending = completion(url, { prompt: 'hang', max_tokens: 2 }, ac.signal).catch(() => undefined);
    await sim.waitForRequests(1);
    child.process.kill('SIGTERM');
    await waitFor(() => child.lines.some((l) => l.msg === 'draining'), {
      message: 'draining logged',
      timeoutMs: 20_000,
    });
    child.process.kill('SIGINT');
    expect(await child.exited).toEqual({ code: 1, signal: null });
    ac.abort();
    await pending;
  });
});

describe('closing after a drain that timed out', () => {
  it('P/D: a request whose prefill leg ends during the close grace is handed back to Envoy and streams to its end', async () => {
    const stack = await startPdStack({ router: { pdDispatch: 'sequential', closeGraceMs: 3000 } });
    cleanups.push(() => stack.close());
    const [prefill] = stack.prefill as [Simulator];
    const [decode] = stack.decode as [Simulator];
    // The prefill leg is held until closing has begun; the decode stream after two events until the
    // close grace is over (the router's gRPC server is closed), however slow the machine.
    const prefillHold = prefill.hold({ stream: false });
    const decodeHold = decode.hold({ afterChunks: 2, stream: true });
    const responding = completion(stack.url, {
      prompt: 'prefill across the close',
      max_tokens: 8,
      stream: true,
    });
    await prefillHold.reached();
    // The drain finds the request still in its prefill leg (not routed yet: nothing to hand back).
    expect(await stack.router.drain(0, 0)).toBe(false);
    const closing = stack.router.close();
    prefillHold.release();
    const res = await responding;
    expect(res.status).toBe(200);
    const reading = readStream(res);
    await decodeHold.reached();
    await closing;
    decodeHold.release();
    const text = await reading;
    // Routed during the close grace, it went on without the router instead of being cut at its end.
    expect(text).toContain('data: [DONE]');
    expect(stack.load(prefill)).toBe(0);
    expect(stack.load(decode)).toBe(0);
  });
});

describe('rolling restart: two gRPC-health-checked routers behind one Envoy', () => {
  it('drains, closes and replaces one router on the same port under load with zero failed requests', async () => {
    const sims: Simulator[] = [];
    for (let i = 0; i < 2; i++) {
      sims.push(await startSimulator({ timeScale: 1, timing: { overheadMs: 2, baseItlMs: 15 } }));
    }
    cleanups.push(() => Promise.all(sims.map((s) => s.close())));
    const routerOpts = { workers: sims.map((s) => s.url), policy: 'round_robin' as const };
    // A port below the ephemeral range: no outgoing connection can take it between close and restart.
    const [aPort] = (await freePorts(1)) as [number];
    const a = await startTestRouter({ ...routerOpts, grpcPort: aPort });
    const b = await startTestRouter(routerOpts);
    const routers: Router[] = [a, b];
    cleanups.push(() => Promise.all(routers.map((r) => r.close())));
    const envoy = await startEnvoy({
      routers: [a, b].map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
      routerHealthCheck: true,
    });
    cleanups.push(() => envoy.close());
    const url = `http://127.0.0.1:${envoy.listenerPort}`;
    const healthyRouters = () => envoyGauge(envoy, 'cluster.vllm_router.membership_healthy');
    await waitFor(async () => (await healthyRouters()) === 2, { timeoutMs: 10_000 });

    const TOTAL = 200;
    const CONCURRENCY = 8;
    const RESTART_AT = 60;
    let next = 0;
    let done = 0;
    const failures: string[] = [];
    const one = async (i: number) => {
      const stream = i % 3 === 0;
      try {
        const res = await completion(url, { prompt: `rolling ${i}`, max_tokens: 8, stream });
        const text = await res.text();
        if (res.status !== 200) failures.push(`#${i}: ${res.status} ${text.slice(0, 200)}`);
        else if (stream && !text.includes('data: [DONE]')) failures.push(`#${i}: stream cut`);
      } catch (err) {
        failures.push(`#${i}: ${(err as Error).message} ${String((err as Error).cause ?? '')}`);
      }
      done++;
    };
    const clients = Array.from({ length: CONCURRENCY }, async () => {
      while (next < TOTAL) await one(next++);
    });

    // The restart, while the clients run.
    await waitFor(() => done >= RESTART_AT, { timeoutMs: 30_000 });
    const port = a.grpcPort;
    const servedByOld = await requestsTotal(a);
    // 1. readiness off, keep serving: Envoy's gRPC health check marks the router unhealthy and stops
    //    opening streams on it. (router.drain(0) = readiness off + discovery closed, no waiting.)
    await a.drain(0);
    await waitFor(async () => (await healthyRouters()) === 1, { timeoutMs: 10_000 });
    // 2. then wait for the in-flight streams, and close.
    expect(await a.drain(10_000)).toBe(true);
    await a.close();
    await expectAllLoadsZero(a);
    // 3. a new router on the same port; Envoy's health check brings it back.
    const a2 = await startTestRouter({ ...routerOpts, grpcPort: port });
    routers.push(a2);
    await waitFor(async () => (await healthyRouters()) === 2, { timeoutMs: 10_000 });
    await Promise.all(clients);

    expect(failures).toEqual([]);
    expect(done).toBe(TOTAL);
    // Every router took part: the old one before the restart, the new one after it.
    expect(await requestsTotal(b)).toBeGreaterThan(0);
    expect(servedByOld).toBeGreaterThan(0);
    for (const r of [b, a2]) await expectAllLoadsZero(r);
    const total = (await requestsTotal(a)) + (await requestsTotal(b)) + (await requestsTotal(a2));
    expect(total).toBe(TOTAL);
  });
});

describe('router down', () => {
  it('Envoy fails closed with 503 and no request reaches a worker', async () => {
    const sim = await startSimulator({ timeScale: 0 });
    cleanups.push(() => sim.close());
    // A port with nothing listening, below the ephemeral range (no outgoing connection lands on it).
    const [deadPort] = (await freePorts(1)) as [number];
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: deadPort }] });
    cleanups.push(() => envoy.close());
    const url = `http://127.0.0.1:${envoy.listenerPort}`;
    for (const [method, path, body] of [
      ['POST', '/v1/completions', { model: 'sim-model', prompt: 'x', max_tokens: 1 }],
      ['POST', '/v1/chat/completions', { model: 'sim-model', messages: [{ role: 'user', content: 'x' }] }],
      ['GET', '/v1/models', undefined],
    ] as const) {
      const res = await fetch(`${url}${path}`, {
        method,
        headers: {
          'content-type': 'application/json',
          // Even a client naming the worker itself must not get through.
          'x-gateway-destination-endpoint': sim.hostPort,
        },
        body: body ? JSON.stringify(body) : undefined,
      });
      // status_on_error 503 (envoy.yaml) with Envoy's empty local-reply body.
      expect(res.status, `${method} ${path}`).toBe(503);
      expect(res.headers.get('server')).toBe('envoy');
      expect(await res.text()).toBe('');
    }
    expect(sim.records.length).toBe(0);
    expect(await envoy.stats('ext_proc')).toMatch(/ext_proc\.streams_failed: [1-9]/);
  });
});

async function requestsTotal(r: Router): Promise<number> {
  const metric = await r.metrics.registry.getSingleMetric('vllm_router_requests_total')?.get();
  return (metric?.values ?? []).reduce((n, v) => n + v.value, 0);
}
