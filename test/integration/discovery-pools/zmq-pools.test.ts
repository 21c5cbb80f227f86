/**
 * ZMQ self-registration into the router's persistent role pools, over real sockets: simulated vLLM
 * workers heartbeat the router's `--discovery-zmq` ROUTER socket exactly like vLLM's P2P NCCL
 * connector (DEALER, identity = zmq_address, msgpack {type, http_address, zmq_address}); malformed
 * frames from a raw DEALER are counted and dropped without disturbing the real workers. A fake clock
 * is used only in the test that needs to control expiry.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import * as zmq from 'zeromq';
import { encode } from '@msgpack/msgpack';
import type { Config } from '../../../src/config.js';
import type { Router } from '../../../src/router.js';
import type { WorkerView } from '../../../src/admin/admin-server.js';
import { choose, reserve } from '../../../src/routing/selector.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';
import { adminJson, expectAllLoadsZero, metricsText, startTestRouter } from '../../support/router-fixture.js';
import { freePorts } from '../../support/free-ports.js';
import { waitFor } from '../../support/wait-for.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import {
  ExtProcTestClient,
  requestBody,
  requestHeaders,
  responseBody,
  responseHeaders,
  setHeader,
} from '../../support/extproc-client.js';

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function router(overrides: Partial<Config> = {}, clock?: () => number): Promise<Router> {
  const r = await startTestRouter(
    { mode: 'pd', discoveryZmq: 'tcp://127.0.0.1:0', ...overrides },
    clock ? { clock } : {},
  );
  cleanups.push(async () => {
    await expectAllLoadsZero(r);
    await r.close();
  });
  return r;
}

async function sim(r: Router, role: 'prefill' | 'decode', extra: SimulatorOptions = {}): Promise<Simulator> {
  const endpoint = r.discoveryEndpoint;
  if (endpoint === undefined) throw new Error('router has no discovery endpoint');
  const s = await startSimulator({
    role,
    timeScale: 0,
    register: { zmq: endpoint, intervalMs: 200 },
    ...extra,
  });
  cleanups.push(() => s.close());
  return s;
}

function dealer(endpoint: string, identity: string): zmq.Dealer {
  const socket = new zmq.Dealer({ routingId: identity, linger: 0 });
  socket.connect(endpoint);
  cleanups.push(() => socket.close());
  return socket;
}

const workers = async (r: Router): Promise<WorkerView[]> =>
  (await adminJson<WorkerView[]>(r, '/workers')).body;

function sample(text: string, name: string, labels: Record<string, string>): number {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.indexOf('}');
    const parts = line.slice(name.length + 1, close).split(',');
    if (want.every((p) => parts.includes(p))) return Number(line.slice(close + 1).trim());
  }
  return 0;
}

describe('ZMQ registration into role pools', () => {
  it('prefill and decode simulators appear in /workers, keep their generation while heartbeating, make pd ready', async () => {
    const r = await router();
    expect(r.discoveryEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect((await adminJson(r, '/readyz')).status).toBe(503);
    const p = await sim(r, 'prefill');
    const d = await sim(r, 'decode');

    await waitFor(async () => (await workers(r)).length === 2, { message: 'both simulators registered' });
    const listed = await workers(r);
    expect(
      listed.map((w) => ({ role: w.role, url: w.url, endpoint: w.endpoint, zmqAddress: w.zmqAddress })),
    ).toEqual([
      { role: 'prefill', url: p.url, endpoint: p.hostPort, zmqAddress: p.zmqAddress },
      { role: 'decode', url: d.url, endpoint: d.hostPort, zmqAddress: d.zmqAddress },
    ]);
    for (const w of listed) {
      expect(w).toMatchObject({ load: 0, processed: 0, healthy: true });
      expect(w.generation).toBeGreaterThan(0);
      expect(w.expiresInMs).toBeGreaterThan(0);
    }
    expect(await adminJson(r, '/readyz')).toMatchObject({
      status: 200,
      body: { workers: { prefill: 1, decode: 1 } },
    });

    // Several heartbeats later: the same generations and the same persistent Worker objects.
    const objects = r.workers();
    await waitFor(
      async () => {
        const text = await metricsText(r);
        return (
          sample(text, 'vllm_router_discovery_updates_total', { role: 'prefill', event: 'heartbeat' }) >= 3 &&
          sample(text, 'vllm_router_discovery_updates_total', { role: 'decode', event: 'heartbeat' }) >= 3
        );
      },
      { message: 'three heartbeats per role' },
    );
    expect((await workers(r)).map((w) => w.generation)).toEqual(listed.map((w) => w.generation));
    const again = r.workers();
    expect(again).toHaveLength(2);
    again.forEach((w, i) => expect(w).toBe(objects[i]));
    const text = await metricsText(r);
    expect(
      sample(text, 'vllm_router_discovery_updates_total', { role: 'prefill', event: 'registered' }),
    ).toBe(1);
    expect(sample(text, 'vllm_router_discovery_updates_total', { role: 'decode', event: 'registered' })).toBe(
      1,
    );
    expect(sample(text, 'vllm_router_pool_workers', { role: 'prefill' })).toBe(1);
    expect(sample(text, 'vllm_router_pool_workers', { role: 'decode' })).toBe(1);
  });

  it('a prefill and a decode registration at the same url are separate Workers', async () => {
    const r = await router();
    const endpoint = r.discoveryEndpoint as string;
    const same = { http_address: '127.0.0.1:9777', zmq_address: '127.0.0.1:19777' };
    const pd = dealer(endpoint, '127.0.0.1:19777');
    await pd.send(Buffer.from(encode({ type: 'P', ...same })));
    await pd.send(Buffer.from(encode({ type: 'D', ...same })));
    await waitFor(() => r.workers().length === 2);
    const [p, d] = [r.pools.prefill.workers[0], r.pools.decode.workers[0]];
    expect(p).toBeDefined();
    expect(p).not.toBe(d);
    expect([p?.url, d?.url]).toEqual(['http://127.0.0.1:9777', 'http://127.0.0.1:9777']);
    expect(p?.generation).not.toBe(d?.generation);
  });

  it('malformed frames are counted, dropped, and do not disturb other senders', async () => {
    const r = await router();
    const p = await sim(r, 'prefill');
    await waitFor(async () => (await workers(r)).length === 1);
    const good = (await workers(r))[0];

    const rogue = dealer(r.discoveryEndpoint as string, 'rogue-sender');
    const bad: Array<[string, Buffer | Buffer[]]> = [
      ['not_msgpack', Buffer.from([0xc1, 0x00, 0xff, 0x13])], // 0xc1 is never valid MessagePack
      ['not_msgpack', Buffer.from('this is not a heartbeat')],
      ['multipart', [Buffer.from('a'), Buffer.from('b')]],
      [
        'unknown_type',
        Buffer.from(encode({ type: 'X', http_address: '127.0.0.1:9001', zmq_address: '127.0.0.1:19001' })),
      ],
      ['missing_field', Buffer.from(encode({ type: 'P', zmq_address: '127.0.0.1:19002' }))],
    ];
    for (const [, frame] of bad) await rogue.send(frame);

    const expected = new Map<string, number>();
    for (const [reason] of bad) expected.set(reason, (expected.get(reason) ?? 0) + 1);
    const counts = async (): Promise<Map<string, number>> => {
      const text = await metricsText(r);
      return new Map(
        [...expected.keys()].map((k) => [
          k,
          sample(text, 'vllm_router_discovery_rejected_total', { reason: k }),
        ]),
      );
    };
    await waitFor(async () => [...(await counts())].every(([k, n]) => n >= (expected.get(k) ?? 0)), {
      message: 'every malformed frame counted',
    });
    expect(await counts()).toEqual(expected);

    // Nothing from the rogue sender got in; the real worker is untouched and keeps heartbeating.
    const heartbeats = async () =>
      sample(await metricsText(r), 'vllm_router_discovery_updates_total', {
        role: 'prefill',
        event: 'heartbeat',
      });
    const before = await heartbeats();
    await waitFor(async () => (await heartbeats()) > before, {
      message: 'heartbeats continue after garbage',
    });
    const after = await workers(r);
    expect(after.map((w) => [w.role, w.url, w.generation])).toEqual([['prefill', p.url, good?.generation]]);
    expect((await adminJson(r, '/healthz')).status).toBe(200);

    // The same rogue connection can still register with a valid frame afterwards.
    await rogue.send(
      Buffer.from(encode({ type: 'D', http_address: '127.0.0.1:9003', zmq_address: '127.0.0.1:19003' })),
    );
    await waitFor(async () => (await workers(r)).some((w) => w.role === 'decode'));
  });

  it('a worker that stops, expires and comes back at the same url gets a new generation and a fresh Worker (fake clock)', async () => {
    let now = 0;
    const r = await router({ discoveryTtlMs: 5000 }, () => now);
    // A port below the ephemeral range: no outgoing connection can take it while the worker is down.
    const [port] = (await freePorts(1)) as [number];
    const first = await sim(r, 'decode', { port });
    await waitFor(() => r.workers().length === 1);
    r.pools.decode.reconcile();
    const old = r.pools.decode.workers[0];
    expect(old?.url).toBe(first.url);

    // An in-flight request holds the old Worker (what a streaming decode leg does).
    const chosen = choose(r.pools.decode, { model: 'm', text: 'hello', headers: {} });
    expect(chosen?.decision.worker).toBe(old);
    if (chosen === undefined || old === undefined) return;
    const held = reserve(r.pools.decode, chosen, {}, now);
    expect(old.load).toBe(1);

    await first.close(); // the process dies: its DEALER closes, heartbeats stop
    now += 5000; // ... and its registration expires
    await waitFor(async () => (await workers(r)).length === 0, { message: 'old lifetime expired' });
    expect((await adminJson(r, '/readyz')).status).toBe(503);

    const second = await startSimulator({
      role: 'decode',
      port,
      timeScale: 0,
      register: { zmq: r.discoveryEndpoint as string, intervalMs: 200 },
    });
    cleanups.push(() => second.close());
    expect(second.url).toBe(first.url);
    expect(second.zmqAddress).toBe(first.zmqAddress);
    await waitFor(async () => (await workers(r)).length === 1, { message: 'restarted worker registered' });

    const listed = (await workers(r))[0];
    expect(listed?.generation).toBeGreaterThan(old.generation);
    const successor = r.pools.decode.workers[0];
    expect(successor).not.toBe(old);
    expect([successor?.load, successor?.processed, successor?.healthy]).toEqual([0, 0, true]);
    expect(listed).toMatchObject({ url: first.url, load: 0, processed: 0 });

    // The old request ends now: only the old Worker changes.
    held.guard.release();
    expect([old.load, old.processed]).toEqual([0, 1]);
    expect([successor?.load, successor?.processed]).toEqual([0, 0]);
    const text = await metricsText(r);
    expect(
      sample(text, 'vllm_router_pool_changes_total', { role: 'decode', change: 'departed' }) +
        sample(text, 'vllm_router_pool_changes_total', { role: 'decode', change: 'replaced' }),
    ).toBe(1);
  });
});

describe('a worker restarted within its TTL', () => {
  it('gets a new generation and a fresh Worker: its heartbeats never lapsed, its process start time moved on', async () => {
    const r = await router({ discoveryTtlMs: 60_000, scrapeIntervalMs: 20 });
    const [port] = (await freePorts(1)) as [number];
    const first = await sim(r, 'decode', { port });
    await waitFor(() => r.workers().length === 1);
    const old = r.pools.decode.workers[0]!;
    await waitFor(() => first.metricsReads >= 1, { message: 'the first process scraped' });

    // A request in flight holds the old Worker; the process under it restarts (a crash, a `docker
    // restart`) and heartbeats again with the same registration long before the TTL.
    const chosen = choose(r.pools.decode, { model: 'm', text: 'hello', headers: {} });
    expect(chosen?.decision.worker).toBe(old);
    if (chosen === undefined) return;
    const held = reserve(r.pools.decode, chosen, {}, performance.now());
    await first.close();
    const second = await startSimulator({
      role: 'decode',
      port,
      timeScale: 0,
      register: { zmq: r.discoveryEndpoint as string, intervalMs: 200 },
    });
    cleanups.push(() => second.close());
    expect([second.url, second.zmqAddress]).toEqual([first.url, first.zmqAddress]);
    await waitFor(() => second.metricsReads >= 2, { message: 'the restarted process scraped' });

    const successor = r.pools.decode.workers[0];
    expect(successor, "the router kept the old process's Worker").not.toBe(old);
    expect(successor!.generation).toBeGreaterThan(old.generation);
    expect([successor?.load, successor?.processed]).toEqual([0, 0]);
    held.guard.release();
    expect([old.load, successor?.load]).toEqual([0, 0]);
    const text = await metricsText(r);
    expect(sample(text, 'vllm_router_discovery_updates_total', { role: 'decode', event: 'restarted' })).toBe(
      1,
    );
    // Its heartbeats go on as heartbeats of the new lifetime.
    const beats = sample(text, 'vllm_router_discovery_updates_total', { role: 'decode', event: 'heartbeat' });
    await waitFor(
      async () =>
        sample(await metricsText(r), 'vllm_router_discovery_updates_total', {
          role: 'decode',
          event: 'heartbeat',
        }) >=
        beats + 2,
      { message: 'two more heartbeats' },
    );
    expect(r.pools.decode.workers[0]).toBe(successor);
  });
});

describe('two sources at one url', () => {
  it("an operator's repeated POST /workers with metadata and vLLM's own heartbeats at the same url keep one Worker", async () => {
    const r = await router();
    const p = await sim(r, 'prefill');
    await waitFor(() => r.workers().length === 1, { message: 'simulator registered' });
    const metrics = async (event: string): Promise<number> =>
      sample(await metricsText(r), 'vllm_router_discovery_updates_total', { role: 'prefill', event });
    // An operator's registrar adds what vLLM's heartbeat does not carry, and repeats its POST.
    const body = { role: 'prefill', url: p.url, zmqAddress: p.zmqAddress, metadata: { tp_size: 2 } };
    const post = async (): Promise<{ generation: number; event: string }> => {
      const res = await adminJson<{ generation: number; event: string }>(r, '/workers', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      return res.body;
    };
    const first = await post();
    expect(first.event).toBe('replaced');
    r.pools.prefill.reconcile();
    const worker = r.pools.prefill.workers[0]!;
    expect(worker.generation).toBe(first.generation);
    const guard = new LoadGuard(worker); // a request in flight on it
    try {
      for (let round = 0; round < 2; round++) {
        // vLLM keeps heartbeating (every 200 ms here) between the operator's POSTs.
        const seen = await metrics('heartbeat');
        await waitFor(async () => (await metrics('heartbeat')) >= seen + 2, { message: 'two heartbeats' });
        expect(await post()).toMatchObject({ generation: first.generation, event: 'heartbeat' });
      }
      const [listed] = await workers(r);
      expect([listed?.generation, listed?.metadata, listed?.load]).toEqual([
        first.generation,
        { tp_size: 2 },
        1,
      ]);
      expect(r.pools.prefill.workers[0]).toBe(worker);
      expect(await metrics('replaced')).toBe(1);
    } finally {
      guard.release();
    }
    expect(worker.load).toBe(0);
  });
});

/** Whether nothing listens on `port` any more (the socket was closed). */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });
}

describe('a drain (SIGTERM)', () => {
  it('the workers whose heartbeats the closed ZMQ socket no longer hears still serve the streams of the drain', async () => {
    let now = 0;
    const r = await router({}, () => now);
    const p = await sim(r, 'prefill');
    const d = await sim(r, 'decode');
    await waitFor(async () => (await workers(r)).length === 2, { message: 'both simulators registered' });

    // Readiness off and the discovery socket closed (the workers' heartbeats go to the replacement
    // router); Envoy keeps opening streams on this one for the grace, then they drain.
    void r.drain(600_000, 600_000);
    const port = Number(r.discoveryEndpoint!.split(':').pop());
    await waitFor(() => refused(port), { message: 'discovery socket closed' });
    now += 6_000; // past --discovery-ttl-ms (5 s) since the last heartbeat the router heard

    const client = new ExtProcTestClient(r.grpcPort);
    cleanups.push(() => client.close());
    const s = client.open();
    await s.send(requestHeaders('POST', '/v1/completions'));
    const routed = await s.send(
      requestBody({ model: 'sim-model', prompt: 'during the drain', max_tokens: 2 }),
    );
    expect(routed?.immediate_response).toBeUndefined();
    expect(setHeader(routed, 'x-gateway-destination-endpoint')).toBe(d.hostPort);
    expect(p.records.length).toBe(1); // its prefill leg ran on the prefill worker
    await s.send(responseHeaders(200));
    await s.send(responseBody('data: [DONE]\n\n', true));
    s.halfClose();
    await s.done;
    expect(
      r
        .workers()
        .map((w) => w.role)
        .sort(),
    ).toEqual(['decode', 'prefill']);
  });
});
