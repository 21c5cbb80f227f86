import { afterEach, describe, expect, it } from 'vitest';
import { Writable } from 'node:stream';
import * as zmq from 'zeromq';
import { encode } from '@msgpack/msgpack';
import pino from 'pino';
import { parseCidrList } from '../../../src/discovery/cidr.js';
import {
  ServiceRegistry,
  type RegisterEvent,
  type RegistryEntry,
} from '../../../src/discovery/service-registry.js';
import { ZmqDiscovery, type ZmqDiscoveryOptions } from '../../../src/discovery/zmq-discovery.js';
import { waitFor } from '../../support/wait-for.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { parallelSizes } from '../../../src/pd/kv-transfer.js';

interface Harness {
  discovery: ZmqDiscovery;
  registry: ServiceRegistry;
  endpoint: string;
  registrations: { entry: RegistryEntry; event: RegisterEvent }[];
  rejects: string[];
  disconnects: number;
  logs: { level: number; msg: string; sender?: string; reason?: string; suppressed?: number }[];
  clock: { now: number };
}

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function startDiscovery(extra: Partial<ZmqDiscoveryOptions> = {}): Promise<Harness> {
  const logs: Harness['logs'] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line.length > 0) logs.push(JSON.parse(line));
      done();
    },
  });
  const clock = { now: 0 };
  const registry = new ServiceRegistry();
  const harness = {
    registry,
    registrations: [],
    rejects: [],
    disconnects: 0,
    logs,
    clock,
  } as unknown as Harness;
  const discovery = new ZmqDiscovery({
    bind: 'tcp://127.0.0.1:0',
    registry,
    logger: pino({ level: 'info' }, sink),
    clock: () => clock.now,
    hooks: {
      onRegister: (entry, event) => harness.registrations.push({ entry, event }),
      onReject: (reason) => harness.rejects.push(reason),
      onPeerDisconnect: () => harness.disconnects++,
    },
    ...extra,
  });
  harness.discovery = discovery;
  cleanups.push(() => discovery.close());
  harness.endpoint = await discovery.start();
  return harness;
}

function dealer(endpoint: string, identity: string): zmq.Dealer {
  const socket = new zmq.Dealer({ routingId: identity, linger: 0 });
  socket.connect(endpoint);
  cleanups.push(() => socket.close());
  return socket;
}

const heartbeat = (
  type: string,
  http: string,
  zmqAddress: string,
  extra: Record<string, unknown> = {},
): Buffer => Buffer.from(encode({ type, http_address: http, zmq_address: zmqAddress, ...extra }));

describe('ZmqDiscovery (real zeromq sockets)', () => {
  it('binds an ephemeral port and registers P and D senders with the right roles', async () => {
    const h = await startDiscovery();
    expect(h.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect(h.endpoint.endsWith(':0')).toBe(false);
    const p = dealer(h.endpoint, '127.0.0.1:21001');
    const d = dealer(h.endpoint, '127.0.0.1:22001');
    await p.send(heartbeat('P', '127.0.0.1:8100', '127.0.0.1:21001'));
    await d.send(heartbeat('D', '127.0.0.1:8200', '127.0.0.1:22001', { transfer_mode: 'READ' }));
    await waitFor(() => h.registry.size('prefill') === 1 && h.registry.size('decode') === 1);
    expect(h.registry.snapshot('prefill')[0]).toMatchObject({
      role: 'prefill',
      url: 'http://127.0.0.1:8100',
      endpoint: '127.0.0.1:8100',
      zmqAddress: '127.0.0.1:21001',
    });
    expect(h.registry.snapshot('decode')[0]).toMatchObject({
      role: 'decode',
      url: 'http://127.0.0.1:8200',
      metadata: { transfer_mode: 'READ' },
    });
    expect(h.rejects).toEqual([]);
  });

  it('heartbeats keep the generation', async () => {
    const h = await startDiscovery();
    const p = dealer(h.endpoint, '127.0.0.1:21001');
    for (let i = 0; i < 3; i++) await p.send(heartbeat('P', '127.0.0.1:8100', '127.0.0.1:21001'));
    await waitFor(() => h.registrations.length === 3);
    expect(h.registrations.map((r) => r.event)).toEqual(['registered', 'heartbeat', 'heartbeat']);
    expect(new Set(h.registrations.map((r) => r.entry.generation)).size).toBe(1);
  });

  it('counts malformed frames and still registers a good sender on another socket', async () => {
    const h = await startDiscovery();
    const bad = dealer(h.endpoint, 'bad-sender');
    const good = dealer(h.endpoint, '127.0.0.1:22001');
    await bad.send(Buffer.from('not msgpack at all'));
    await bad.send(Buffer.from(encode([1, 2, 3])));
    await bad.send(heartbeat('X', '127.0.0.1:1', '127.0.0.1:2'));
    await bad.send([heartbeat('P', '127.0.0.1:1', '127.0.0.1:2'), Buffer.from('extra')]);
    await bad.send(heartbeat('P', 'nohost', '127.0.0.1:2'));
    await good.send(heartbeat('D', '127.0.0.1:8200', '127.0.0.1:22001'));
    await waitFor(() => h.rejects.length === 5 && h.registry.size('decode') === 1);
    expect([...h.rejects].sort()).toEqual([
      'bad_address',
      'multipart',
      'not_a_map',
      'not_msgpack',
      'unknown_type',
    ]);
    expect(h.registry.size('prefill')).toBe(0);
    // One warning for the bad sender within the interval; the rest are suppressed.
    const warnings = h.logs.filter((l) => l.msg === 'zmq discovery message rejected');
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ sender: 'bad-sender', level: 40 });
  });

  it('rate-limits warnings per sender and reports the suppressed count', async () => {
    const h = await startDiscovery({ warnIntervalMs: 1000 });
    const a = dealer(h.endpoint, 'sender-a');
    const b = dealer(h.endpoint, 'sender-b');
    for (let i = 0; i < 3; i++) await a.send(Buffer.from('x'));
    await waitFor(() => h.rejects.length === 3); // senders are fair-queued: keep the log order fixed
    await b.send(Buffer.from('x'));
    await waitFor(() => h.rejects.length === 4);
    h.clock.now = 1000;
    await a.send(Buffer.from('x'));
    await waitFor(() => h.rejects.length === 5);
    const warnings = h.logs.filter((l) => l.msg === 'zmq discovery message rejected');
    expect(warnings.map((w) => [w.sender, w.suppressed])).toEqual([
      ['sender-a', 0],
      ['sender-b', 0],
      ['sender-a', 2],
    ]);
  });

  it('drops an oversized frame in libzmq (peer disconnected) and keeps serving', async () => {
    const h = await startDiscovery({ maxFrameBytes: 1024 });
    const flooder = dealer(h.endpoint, '127.0.0.1:23001');
    await flooder.send(heartbeat('P', '127.0.0.1:8300', '127.0.0.1:23001', { pad: 'x'.repeat(400) }));
    await waitFor(() => h.registry.size('prefill') === 1);
    await flooder.send(Buffer.alloc(4096, 0x61));
    await waitFor(() => h.disconnects >= 1);
    const good = dealer(h.endpoint, '127.0.0.1:22001');
    await good.send(heartbeat('D', '127.0.0.1:8200', '127.0.0.1:22001'));
    await waitFor(() => h.registry.size('decode') === 1);
    expect(h.rejects).toEqual([]); // the oversized frame never reached the application
    expect(h.registrations.map((r) => r.entry.role)).toEqual(['prefill', 'decode']);
  });

  it('a restarted sender with the same identity takes over the connection (handover)', async () => {
    const h = await startDiscovery();
    const old = dealer(h.endpoint, '127.0.0.1:21001');
    await old.send(heartbeat('P', '127.0.0.1:8100', '127.0.0.1:21001'));
    await waitFor(() => h.registrations.length === 1);
    const restarted = dealer(h.endpoint, '127.0.0.1:21001'); // old connection still open
    await restarted.send(heartbeat('P', '127.0.0.1:8100', '127.0.0.1:21001'));
    await waitFor(() => h.registrations.length === 2);
  });

  it('a MoRI-IO instance restarted within one heartbeat period with another tp_size is a new worker', async () => {
    const h = await startDiscovery();
    const pool = new WorkerPool('prefill', createPolicy('round_robin'), h.registry);
    h.registry.onChange(() => pool.reconcile());
    // vLLM's MoRI-IO heartbeat (moriio_heartbeat.py): an identity-less DEALER, one payload per process.
    const mori = {
      type: 'P',
      http_address: '127.0.0.1:8100',
      zmq_address: 'host:127.0.0.1,handshake:6301,notify:61005',
    };
    const old = dealer(h.endpoint, 'mori-old');
    await old.send(Buffer.from(encode({ ...mori, dp_size: 1, tp_size: 4, transfer_mode: 'READ' })));
    await waitFor(() => h.registrations.length === 1);
    pool.reconcile();
    const before = pool.workers[0]!;
    const guard = new LoadGuard(before); // a request in flight on the old process
    // The process restarts with --tensor-parallel-size 8 before its entry expires (same addresses).
    const restarted = dealer(h.endpoint, 'mori-new');
    await restarted.send(Buffer.from(encode({ ...mori, dp_size: 1, tp_size: 8, transfer_mode: 'READ' })));
    await waitFor(() => h.registrations.length === 2);
    expect(h.registrations.map((r) => r.event)).toEqual(['registered', 'replaced']);
    const after = pool.workers[0]!;
    expect(after).not.toBe(before);
    expect(after.generation).toBeGreaterThan(before.generation);
    // What P/D sends the decode worker as remote_tp_size (kv-transfer.ts parallelSizes).
    expect(parallelSizes(after)).toEqual({ remote_tp_size: 8, remote_dp_size: 1 });
    expect(after.load).toBe(0);
    expect(guard.release()).toBe(true);
    expect(guard.release()).toBe(false);
    expect([before.load, after.load]).toEqual([0, 0]);
  });

  it('a flooding sender does not starve another sender', async () => {
    const h = await startDiscovery();
    const flooder = dealer(h.endpoint, 'flooder');
    const good = dealer(h.endpoint, '127.0.0.1:22001');
    const garbage = Buffer.from([0xc1]);
    for (let i = 0; i < 2000; i++) await flooder.send(garbage);
    await good.send(heartbeat('D', '127.0.0.1:8200', '127.0.0.1:22001'));
    await waitFor(() => h.registry.size('decode') === 1);
    await waitFor(() => h.rejects.length === 2000);
    expect(h.logs.filter((l) => l.msg === 'zmq discovery message rejected')).toHaveLength(1);
  });

  it('rejects claimed hosts outside the allow list', async () => {
    const h = await startDiscovery({ allow: parseCidrList(['127.0.0.0/8']) });
    const s = dealer(h.endpoint, '10.1.1.1:1');
    await s.send(heartbeat('P', '10.1.1.1:8000', '10.1.1.1:1'));
    await s.send(heartbeat('P', '127.0.0.2:8000', '127.0.0.2:1'));
    await waitFor(() => h.rejects.length === 1 && h.registry.size('prefill') === 1);
    expect(h.rejects).toEqual(['not_allowed']);
    expect(h.registry.snapshot('prefill')[0]?.url).toBe('http://127.0.0.2:8000');
  });

  it('resolves DNS names off the receive loop; a hung lookup does not block other senders', async () => {
    const lookups: string[] = [];
    const h = await startDiscovery({
      allow: parseCidrList(['10.0.0.0/8']),
      resolve: (host) => {
        lookups.push(host);
        if (host === 'hung.test') return new Promise<string>(() => {});
        if (host === 'outside.test') return Promise.resolve('192.0.2.1');
        if (host === 'missing.test') return Promise.reject(new Error('ENOTFOUND'));
        if (host === 'throws.test') throw new Error('resolver bug');
        return Promise.resolve('10.2.3.4');
      },
    });
    const hung = dealer(h.endpoint, 'hung');
    const named = dealer(h.endpoint, 'named');
    await hung.send(heartbeat('P', 'hung.test:8000', 'hung.test:1'));
    await named.send(heartbeat('D', 'Decode-0.test:8200', 'decode-0.test:1'));
    await named.send(heartbeat('D', 'outside.test:8200', 'outside.test:1'));
    await named.send(heartbeat('D', 'missing.test:8200', 'missing.test:1'));
    await named.send(heartbeat('D', 'throws.test:8200', 'throws.test:1'));
    await waitFor(() => h.registry.size('decode') === 1 && h.rejects.length === 3);
    expect(h.registry.snapshot('decode')[0]).toMatchObject({
      url: 'http://decode-0.test:8200',
      endpoint: '10.2.3.4:8200',
    });
    expect([...h.rejects].sort()).toEqual(['dns_failed', 'dns_failed', 'not_allowed']);
    // Heartbeats use the cache: no second lookup for decode-0.test.
    await named.send(heartbeat('D', 'decode-0.test:8200', 'decode-0.test:1'));
    await waitFor(() => h.registrations.length === 2);
    expect(h.registrations[1]?.event).toBe('heartbeat');
    expect(lookups.filter((name) => name === 'decode-0.test')).toHaveLength(1);
    expect(h.registry.size('prefill')).toBe(0);
  });

  it('a static --decode worker stays in the registry when vLLM heartbeats carrying its zmq address stop', async () => {
    let now = 0;
    const registry = new ServiceRegistry({ clock: () => now });
    // router.ts staticWorkersStep: `--decode http://127.0.0.1:8200`.
    registry.register({
      role: 'decode',
      url: 'http://127.0.0.1:8200',
      endpoint: '127.0.0.1:8200',
      permanent: true,
    });
    const h = await startDiscovery({ registry });
    const d = dealer(h.endpoint, '127.0.0.1:22001');
    await d.send(heartbeat('D', '127.0.0.1:8200', '127.0.0.1:22001'));
    await waitFor(() => registry.get('decode', 'http://127.0.0.1:8200')?.zmqAddress === '127.0.0.1:22001');
    // The heartbeats stop (vLLM's proxy address changed, the ZMQ port is firewalled): long past the TTL.
    now += 10 * registry.ttlMs;
    expect(registry.cleanup()).toEqual([]);
    expect(registry.snapshot('decode')).toMatchObject([
      { url: 'http://127.0.0.1:8200', zmqAddress: '127.0.0.1:22001', permanent: true },
    ]);
  });

  it('close() is idempotent, ends the loop and releases the port', async () => {
    const h = await startDiscovery();
    const p = dealer(h.endpoint, '127.0.0.1:21001');
    await p.send(heartbeat('P', '127.0.0.1:8100', '127.0.0.1:21001'));
    await waitFor(() => h.registry.size('prefill') === 1);
    const timersBefore = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    await Promise.all([h.discovery.close(), h.discovery.close()]);
    await h.discovery.close();
    // The port is free again: a new ROUTER can bind the exact endpoint. libzmq releases a closed
    // socket's port on its I/O thread, asynchronously: bounded retries, no sleep-based guess.
    await waitFor(
      async () => {
        const rebound = new zmq.Router({ linger: 0 });
        try {
          await rebound.bind(h.endpoint);
          return true;
        } finally {
          rebound.close();
        }
      },
      { timeoutMs: 5000, intervalMs: 20, message: 'the endpoint can be bound again' },
    );
    // No timer of the discovery outlives close(). Other timers in the process (a poll, a socket's
    // own) come and go: wait for the count to come back rather than sampling one instant.
    await waitFor(
      () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length <= timersBefore,
      { timeoutMs: 5000, message: 'no timer left behind by close()' },
    );
    await expect(h.discovery.start()).rejects.toThrow(/closed/);
  });
});
