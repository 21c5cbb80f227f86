/**
 * P/D behind a real Envoy 1.40 with two router replicas and request body FULL_DUPLEX_STREAMED: a
 * replica that dies (SIGKILL of the real CLI as a child process) while its prefill leg runs on a
 * worker. The router answers nothing on that ext_proc stream before the body and the prefill are done,
 * so Envoy may retry the stream on the other replica (envoy.yaml `retry_policy`), which runs the
 * prefill again and serves the request: but only while the stream's messages fit the 64 KiB buffer
 * Envoy's gRPC client keeps for retries. A larger request is not retried: the client gets a 503
 * (`cluster.vllm_router.retry_or_shadow_abandoned`). docs/deploy-envoy.md states both sides.
 *
 * The prefill worker holds its answer (sim.hold) so the kill lands during the prefill leg however slow
 * the machine is; Envoy balances streams round robin over the replicas, so a request whose stream the
 * surviving replica got is simply served and the next one is sent, until the doomed replica holds one.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Router } from '../../src/router.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startRouterChild, type RouterChild } from '../integration/lifecycle/router-child.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

interface Fleet {
  prefill: Simulator;
  decode: Simulator;
  /** The replica that dies: the real CLI as a child process. */
  doomed: RouterChild;
  /** The replica that survives, in-process (its worker loads are read directly). */
  survivor: Router;
  envoy: EnvoyHandle;
  url: string;
}

async function startFleet(): Promise<Fleet> {
  const prefill = await startSimulator({ role: 'prefill', kvConnector: 'nixl', timeScale: 0 });
  const decode = await startSimulator({ role: 'decode', kvConnector: 'nixl', timeScale: 0 });
  cleanups.push(() => Promise.all([prefill.close(), decode.close()]));
  const doomed = await startRouterChild([
    ...['--host', '127.0.0.1', '--grpc-port', '0', '--admin-port', '0'],
    ...['--mode', 'pd', '--prefill', prefill.url, '--decode', decode.url],
  ]);
  cleanups.push(() => doomed.kill());
  const survivor = await startTestRouter({ mode: 'pd', prefill: [prefill.url], decode: [decode.url] });
  cleanups.push(() => survivor.close());
  for (const admin of [doomed.adminPort, survivor.adminPort]) {
    await waitFor(async () => (await fetch(`http://127.0.0.1:${admin}/readyz`)).status === 200, {
      message: 'replica ready',
    });
  }
  const envoy = await startEnvoy({
    routers: [doomed, survivor].map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    requestBodyMode: 'FULL_DUPLEX_STREAMED',
    responseBodyMode: 'FULL_DUPLEX_STREAMED',
    trailerMode: 'SEND',
  });
  cleanups.push(() => envoy.close());
  return { prefill, decode, doomed, survivor, envoy, url: `http://127.0.0.1:${envoy.listenerPort}` };
}

function completion(url: string, prompt: string): Promise<Response> {
  return fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt, max_tokens: 2 }),
  });
}

function requestsRouted(metrics: string): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (/^vllm_router_requests_total[{ ]/.test(line)) sum += Number(line.split(' ').pop());
  }
  return sum;
}

/** The outcomes of the requests `sim` got for `prompt` (those that ended). */
function outcomes(sim: Simulator, prompt: string): string[] {
  return sim.records
    .filter((r) => (r.body as { prompt?: unknown }).prompt === prompt)
    .map((r) => r.outcome ?? 'open');
}

function envoyStat(text: string, name: string): number {
  return Number(new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
}

/**
 * Sends requests of `bytes` prompt characters, each held at the prefill worker, until one is held
 * there by the doomed replica's prefill leg; SIGKILLs that replica, lets the worker answer, and returns
 * that request's answer with what the survivor routed meanwhile.
 */
async function killDuringPrefill(
  fleet: Fleet,
  bytes: number,
): Promise<{ status: number; text: string; prompt: string; survivorRouted: number }> {
  const survivorPrefill = fleet.survivor.workers().find((w) => w.role === 'prefill')!;
  for (let attempt = 0; attempt < 8; attempt++) {
    const hold = fleet.prefill.hold({ count: 1 });
    try {
      const prompt = `${attempt} `.padEnd(bytes, 'p');
      const pending = completion(fleet.url, prompt);
      await hold.reached();
      if (survivorPrefill.load > 0) {
        // The survivor got this stream: let it finish and try again.
        hold.release();
        const res = await pending;
        expect(res.status, await res.text()).toBe(200);
        continue;
      }
      const before = requestsRouted(await metricsText(fleet.survivor));
      fleet.doomed.process.kill('SIGKILL');
      await fleet.doomed.exited;
      hold.release();
      const res = await pending;
      const text = await res.text();
      const after = requestsRouted(await metricsText(fleet.survivor));
      return { status: res.status, text, prompt, survivorRouted: after - before };
    } finally {
      hold.release();
    }
  }
  throw new Error('the doomed replica never got a stream');
}

describe('P/D: a router replica dies during a prefill leg (request body FULL_DUPLEX_STREAMED)', () => {
  it('a request within the 64 KiB retry buffer is retried on the other replica and served', async () => {
    const fleet = await startFleet();
    const { status, text, prompt, survivorRouted } = await killDuringPrefill(fleet, 16 * 1024);
    expect(status, text).toBe(200);
    expect(survivorRouted).toBe(1);
    // The survivor ran the prefill again (the first leg's answer went to a dead replica), then the decode.
    await waitFor(() => outcomes(fleet.prefill, prompt).length === 2, { message: 'both prefill legs ended' });
    expect(outcomes(fleet.prefill, prompt)).toContain('ok');
    expect(outcomes(fleet.decode, prompt)).toEqual(['ok']);
    const stats = await fleet.envoy.stats('^cluster\\.vllm_router\\.');
    expect(envoyStat(stats, 'cluster.vllm_router.upstream_rq_retry')).toBeGreaterThanOrEqual(1);
    expect(envoyStat(stats, 'cluster.vllm_router.retry_or_shadow_abandoned')).toBe(0);
    await expectAllLoadsZero(fleet.survivor);
  });

  it('a request over the 64 KiB retry buffer is not retried: the client gets a 503', async () => {
    const fleet = await startFleet();
    const { status, text, prompt, survivorRouted } = await killDuringPrefill(fleet, 256 * 1024);
    expect(status, text).toBe(503);
    expect(survivorRouted).toBe(0);
    expect(outcomes(fleet.decode, prompt)).toEqual([]);
    const stats = await fleet.envoy.stats('^cluster\\.vllm_router\\.');
    expect(envoyStat(stats, 'cluster.vllm_router.retry_or_shadow_abandoned')).toBeGreaterThanOrEqual(1);
    await expectAllLoadsZero(fleet.survivor);
  });
});
