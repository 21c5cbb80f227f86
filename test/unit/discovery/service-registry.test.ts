import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  ServiceRegistry,
  type Registration,
  type RegistryEntry,
} from '../../../src/discovery/service-registry.js';
import type { Role } from '../../../src/workers/role.js';

class FakeClock {
  nowMs = 1_000;
  readonly now = (): number => this.nowMs;
  advance(ms: number): void {
    this.nowMs += ms;
  }
}

function setup(ttlMs = 5000): { clock: FakeClock; registry: ServiceRegistry } {
  const clock = new FakeClock();
  return { clock, registry: new ServiceRegistry({ ttlMs, clock: clock.now }) };
}

function reg(url: string, role: Role = 'prefill', extra: Partial<Registration> = {}): Registration {
  return { role, url, endpoint: url.replace('http://', ''), zmqAddress: `${url.slice(7)}-kv`, ...extra };
}

function registered(result: ReturnType<ServiceRegistry['register']>): {
  entry: RegistryEntry;
  event: string;
} {
  if ('rejected' in result) throw new Error(`unexpected rejection: ${result.rejected}`);
  return result;
}

describe('ServiceRegistry', () => {
  it('first registration gets a generation and event registered', () => {
    const { registry } = setup();
    const { entry, event } = registered(registry.register(reg('http://10.0.0.1:8000')));
    expect(event).toBe('registered');
    expect(entry.generation).toBeGreaterThan(0);
    expect(entry.expiresAtMs).toBe(1_000 + 5000);
    expect(entry.registeredAtMs).toBe(1_000);
    expect(registry.get('prefill', 'http://10.0.0.1:8000')).toBe(entry);
  });

  it('a heartbeat of a live entry keeps its generation and pushes expiry', () => {
    const { clock, registry } = setup();
    const first = registered(
      registry.register(reg('http://10.0.0.1:8000', 'prefill', { metadata: { tp: 2 } })),
    ).entry;
    clock.advance(3000);
    // vLLM sends one payload per process: the heartbeat repeats it.
    const second = registered(
      registry.register(reg('http://10.0.0.1:8000', 'prefill', { metadata: { tp: 2 } })),
    );
    expect(second.event).toBe('heartbeat');
    expect(second.entry.generation).toBe(first.generation);
    expect(second.entry.registeredAtMs).toBe(first.registeredAtMs);
    expect(second.entry.expiresAtMs).toBe(clock.nowMs + 5000);
    expect(second.entry.metadata).toEqual({ tp: 2 });
    clock.advance(4000); // past the first expiry, within the second
    expect(registry.snapshot('prefill').map((e) => e.generation)).toEqual([first.generation]);
  });

  it('expiry then same-URL registration gets a new generation before cleanup runs', () => {
    const { clock, registry } = setup();
    const first = registered(registry.register(reg('http://10.0.0.1:8000'))).entry;
    clock.advance(5000); // expiresAtMs <= now: expired
    const second = registered(registry.register(reg('http://10.0.0.1:8000')));
    expect(second.event).toBe('replaced');
    expect(second.entry.generation).toBeGreaterThan(first.generation);
    expect(second.entry.registeredAtMs).toBe(clock.nowMs);
    expect(registry.cleanup()).toEqual([]);
  });

  it('snapshot excludes expired entries and cleanup removes them', () => {
    const { clock, registry } = setup();
    registry.register(reg('http://10.0.0.1:8000'));
    clock.advance(2000);
    registry.register(reg('http://10.0.0.2:8000'));
    expect(registry.snapshot('prefill').map((e) => e.url)).toEqual([
      'http://10.0.0.1:8000',
      'http://10.0.0.2:8000',
    ]);
    clock.advance(3000);
    expect(registry.snapshot('prefill').map((e) => e.url)).toEqual(['http://10.0.0.2:8000']);
    expect(registry.size('prefill')).toBe(1);
    expect(registry.get('prefill', 'http://10.0.0.1:8000')).toBeUndefined();
    expect(registry.cleanup().map((e) => e.url)).toEqual(['http://10.0.0.1:8000']);
    expect(registry.cleanup()).toEqual([]);
  });

  it('holdExpiry (a draining router closed its ZMQ socket): entries live then never expire', () => {
    const { clock, registry } = setup();
    registry.register(reg('http://10.0.0.1:8000'));
    clock.advance(4000);
    registry.holdExpiry();
    clock.advance(60_000);
    expect(registry.snapshot('prefill').map((e) => e.url)).toEqual(['http://10.0.0.1:8000']);
    expect(registry.get('prefill', 'http://10.0.0.1:8000')).toBeDefined();
    expect(registry.cleanup()).toEqual([]);
  });

  it('generations strictly increase across endpoints and roles', () => {
    const { registry } = setup();
    const generations = [
      registered(registry.register(reg('http://b:1'))).entry.generation,
      registered(registry.register(reg('http://a:1', 'decode'))).entry.generation,
      registered(registry.register(reg('http://c:1', 'regular'))).entry.generation,
      registered(registry.register(reg('http://a:1'))).entry.generation,
    ];
    for (let i = 1; i < generations.length; i++) {
      expect(generations[i]).toBeGreaterThan(generations[i - 1] ?? Infinity);
    }
  });

  it('deregister then register starts a new lifetime', () => {
    const { registry } = setup();
    const first = registered(registry.register(reg('http://10.0.0.1:8000'))).entry;
    expect(registry.deregister('prefill', 'http://10.0.0.1:8000')).toBe(true);
    expect(registry.deregister('prefill', 'http://10.0.0.1:8000')).toBe(false);
    expect(registry.snapshot('prefill')).toEqual([]);
    const second = registered(registry.register(reg('http://10.0.0.1:8000')));
    expect(second.event).toBe('registered');
    expect(second.entry.generation).toBeGreaterThan(first.generation);
  });

  it('permanent entries never expire, and permanence is sticky for the lifetime', () => {
    const { clock, registry } = setup();
    const entry = registered(
      registry.register(reg('http://static:8000', 'regular', { permanent: true })),
    ).entry;
    expect(entry.expiresAtMs).toBe(Infinity);
    clock.advance(1e9);
    expect(registry.cleanup()).toEqual([]);
    expect(registry.snapshot('regular')).toEqual([entry]);
    const heartbeat = registered(registry.register(reg('http://static:8000', 'regular')));
    expect(heartbeat.event).toBe('heartbeat');
    expect(heartbeat.entry.expiresAtMs).toBe(Infinity);
  });

  it('a static worker stays after a heartbeat that added a zmq address stops (a new lifetime, still permanent)', () => {
    const { clock, registry } = setup();
    // --worker / admin `permanent: true`: no zmq address.
    registered(
      registry.register({
        role: 'decode',
        url: 'http://10.0.0.1:8000',
        endpoint: '10.0.0.1:8000',
        permanent: true,
      }),
    );
    // vLLM's P2P NCCL connector heartbeats the same url with its zmq address: a new Worker (lifetime).
    const hb = registered(registry.register(reg('http://10.0.0.1:8000', 'decode')));
    expect(hb.event).toBe('replaced');
    expect(hb.entry).toMatchObject({
      zmqAddress: '10.0.0.1:8000-kv',
      permanent: true,
      expiresAtMs: Infinity,
    });
    // The heartbeats stop; the process still serves: the configured worker must not leave.
    clock.advance(1e9);
    expect(registry.cleanup()).toEqual([]);
    expect(registry.snapshot('decode')).toEqual([hb.entry]);
    // Only a deregistration ends it; the next heartbeat then starts an expiring lifetime.
    expect(registry.deregister('decode', 'http://10.0.0.1:8000')).toBe(true);
    expect(registered(registry.register(reg('http://10.0.0.1:8000', 'decode'))).entry.permanent).toBe(false);
  });

  it("a source-owned permanent entry (Kubernetes) does not pass its permanence to another source's lifetime", () => {
    const { clock, registry } = setup();
    const url = 'http://10.0.0.1:8000';
    const kube = registered(
      registry.register({
        role: 'decode',
        url,
        endpoint: '10.0.0.1:8000',
        permanent: true,
        sourceOwned: true,
      }),
    ).entry;
    // A heartbeat of the same identity stays the source's lifetime.
    const same = registered(registry.register({ role: 'decode', url, endpoint: '10.0.0.1:8000' }));
    expect(same.entry).toMatchObject({ generation: kube.generation, permanent: true, sourceOwned: true });
    const zmq = registered(registry.register(reg(url, 'decode')));
    expect(zmq.event).toBe('replaced');
    expect(zmq.entry.permanent).toBe(false);
    clock.advance(registry.ttlMs);
    expect(registry.cleanup().map((e) => e.generation)).toEqual([zmq.entry.generation]);
  });

  it('a process restarted under a live registration starts a new lifetime; its heartbeats then keep that one', () => {
    const { clock, registry } = setup();
    const url = 'http://10.0.0.1:8000';
    const changes: Role[] = [];
    registry.onChange((role) => changes.push(role));
    const first = registered(registry.register({ ...reg(url, 'decode'), source: 'zmq' })).entry;
    const next = registry.restarted('decode', url, first.generation);
    expect(next).toMatchObject({ url, endpoint: first.endpoint, permanent: false });
    expect(next!.generation).toBeGreaterThan(first.generation);
    expect(changes).toEqual(['decode', 'decode']);
    // The same heartbeat from the new process: a heartbeat of the new lifetime.
    clock.advance(1000);
    const beat = registered(registry.register({ ...reg(url, 'decode'), source: 'zmq' }));
    expect(beat).toMatchObject({ event: 'heartbeat', entry: { generation: next!.generation } });
    // A report about the old lifetime changes nothing.
    expect(registry.restarted('decode', url, first.generation)).toBeUndefined();
    // A static worker stays permanent.
    const fixed = registered(registry.register({ ...reg('http://10.0.0.2:8000'), permanent: true })).entry;
    expect(registry.restarted('prefill', fixed.url, fixed.generation)).toMatchObject({
      permanent: true,
      expiresAtMs: Infinity,
    });
  });

  it('a Kubernetes entry is not restarted by the registry: its source tells restarts and removes its own generation', () => {
    const { registry } = setup();
    const url = 'http://10.0.0.1:8000';
    const kube = registered(
      registry.register({
        role: 'decode',
        url,
        endpoint: '10.0.0.1:8000',
        permanent: true,
        sourceOwned: true,
      }),
    ).entry;
    expect(registry.restarted('decode', url, kube.generation)).toBeUndefined();
    expect(registry.get('decode', url)?.generation).toBe(kube.generation);
  });

  it('keeps roles separate at identical urls', () => {
    const { registry } = setup();
    const p = registered(registry.register(reg('http://10.0.0.1:8000', 'prefill'))).entry;
    const d = registered(registry.register(reg('http://10.0.0.1:8000', 'decode')));
    expect(d.event).toBe('registered');
    expect(d.entry.generation).not.toBe(p.generation);
    expect(registry.snapshot('prefill')).toEqual([p]);
    expect(registry.snapshot('decode')).toEqual([d.entry]);
    registry.deregister('decode', 'http://10.0.0.1:8000');
    expect(registry.snapshot('prefill')).toEqual([p]);
    expect(registry.snapshot('regular')).toEqual([]);
  });

  it.each([
    { name: 'different mode', first: { transfer_mode: 'READ' }, next: { transfer_mode: 'WRITE' } },
    { name: 'mode dropped', first: { transfer_mode: 'READ' }, next: {} },
    { name: 'mode added', first: {}, next: { transfer_mode: 'WRITE' } },
  ])('rejects a heartbeat whose transfer_mode differs ($name) and changes nothing', ({ first, next }) => {
    const { clock, registry } = setup();
    const entry = registered(registry.register(reg('http://m:1', 'decode', { metadata: first }))).entry;
    clock.advance(1000);
    expect(registry.register(reg('http://m:1', 'decode', { metadata: next }))).toEqual({
      rejected: 'transfer_mode_mismatch',
    });
    expect(registry.get('decode', 'http://m:1')).toBe(entry);
  });

  it('accepts a different transfer_mode once the previous lifetime expired', () => {
    const { clock, registry } = setup();
    registry.register(reg('http://m:1', 'decode', { metadata: { transfer_mode: 'READ' } }));
    clock.advance(5000);
    const next = registered(
      registry.register(reg('http://m:1', 'decode', { metadata: { transfer_mode: 'WRITE' } })),
    );
    expect(next.event).toBe('replaced');
    expect(next.entry.metadata).toEqual({ transfer_mode: 'WRITE' });
  });

  it.each([
    { name: 'endpoint', change: { endpoint: '10.9.9.9:8000' } },
    { name: 'zmqAddress', change: { zmqAddress: 'other:1' } },
  ])('a live heartbeat that changes $name starts a new lifetime', ({ change }) => {
    const { registry } = setup();
    const first = registered(registry.register(reg('http://w:8000'))).entry;
    const next = registered(registry.register(reg('http://w:8000', 'prefill', change)));
    expect(next.event).toBe('replaced');
    expect(next.entry.generation).toBeGreaterThan(first.generation);
    expect(registry.snapshot('prefill')).toEqual([next.entry]);
  });

  it.each([
    { name: 'tp_size', next: { transfer_mode: 'READ', tp_size: 8, dp_size: 1 } },
    { name: 'dp_size', next: { transfer_mode: 'READ', tp_size: 4, dp_size: 2 } },
    { name: 'a field added', next: { transfer_mode: 'READ', tp_size: 4, dp_size: 1, pp_size: 2 } },
  ])(
    'a live MoRI-IO heartbeat that announces another $name is another process: a new lifetime with that metadata',
    ({ next }) => {
      const { clock, registry } = setup();
      const first = registered(
        registry.register(
          reg('http://m:1', 'prefill', { metadata: { transfer_mode: 'READ', tp_size: 4, dp_size: 1 } }),
        ),
      ).entry;
      clock.advance(1000); // within one heartbeat period: the old lifetime is still live
      const second = registered(registry.register(reg('http://m:1', 'prefill', { metadata: next })));
      expect(second.event).toBe('replaced');
      expect(second.entry.generation).toBeGreaterThan(first.generation);
      expect(registry.snapshot('prefill')).toEqual([second.entry]);
      expect(registry.snapshot('prefill')[0]?.metadata).toEqual(next);
    },
  );

  it('two sources repeating their own different views at one url keep one lifetime; a changed view starts one', () => {
    const { clock, registry } = setup();
    const url = 'http://10.0.0.9:8000';
    const vllm = reg(url, 'prefill', { source: 'zmq', metadata: { transfer_mode: 'READ' } });
    const admin = reg(url, 'prefill', { source: 'admin', metadata: { transfer_mode: 'READ', tp_size: 2 } });
    registered(registry.register(vllm));
    const layered = registered(registry.register(admin));
    expect(layered.event).toBe('replaced');
    for (let i = 0; i < 3; i++) {
      clock.advance(3000);
      for (const r of [vllm, admin]) {
        const hb = registered(registry.register(r));
        expect([hb.event, hb.entry.generation, hb.entry.metadata]).toEqual([
          'heartbeat',
          layered.entry.generation,
          { transfer_mode: 'READ', tp_size: 2 },
        ]);
        expect(hb.entry.expiresAtMs).toBe(clock.nowMs + 5000);
      }
    }
    // vLLM restarted with another size: its own view changed, a new lifetime with what it announces.
    const restarted = registered(
      registry.register({ ...vllm, metadata: { transfer_mode: 'READ', tp_size: 4 } }),
    );
    expect(restarted.event).toBe('replaced');
    expect(restarted.entry.metadata).toEqual({ transfer_mode: 'READ', tp_size: 4 });
    // After the key went (expiry), a source's old view is forgotten.
    clock.advance(5000);
    registry.cleanup();
    expect(registered(registry.register(admin)).event).toBe('registered');
    expect(registered(registry.register(vllm)).event).toBe('replaced');
  });

  it('snapshot is cached, frozen, and refreshed on membership changes', () => {
    const { clock, registry } = setup();
    registry.register(reg('http://b:1'));
    const s1 = registry.snapshot('prefill');
    expect(Object.isFrozen(s1)).toBe(true);
    expect(registry.snapshot('prefill')).toBe(s1);
    clock.advance(1000);
    registry.register(reg('http://b:1')); // plain heartbeat: cache kept
    expect(registry.snapshot('prefill')).toBe(s1);
    registry.register(reg('http://a:1'));
    const s2 = registry.snapshot('prefill');
    expect(s2).not.toBe(s1);
    expect(s2.map((e) => e.url)).toEqual(['http://a:1', 'http://b:1']);
    // The heartbeat kept b alive past its first expiry: the rebuilt snapshot still contains it.
    clock.advance(4500);
    expect(registry.snapshot('prefill').map((e) => e.url)).toEqual(['http://a:1', 'http://b:1']);
    registry.register(reg('http://a:1')); // plain heartbeat: the cached entry's expiry now lags
    clock.advance(1000); // past b's expiry and a's cached (stale) expiry, before a's real one
    expect(registry.get('prefill', 'http://a:1')?.expiresAtMs).toBe(clock.nowMs + 4000);
    expect(registry.snapshot('prefill').map((e) => e.url)).toEqual(['http://a:1']);
  });

  it('rejects a non-positive ttl', () => {
    expect(() => new ServiceRegistry({ ttlMs: 0 })).toThrow(RangeError);
  });
});

type Op =
  | { kind: 'register'; role: Role; url: number; endpoint: number; permanent: boolean }
  | { kind: 'advance'; ms: number }
  | { kind: 'cleanup' }
  | { kind: 'deregister'; role: Role; url: number }
  | { kind: 'snapshot'; role: Role };

const roleArb = fc.constantFrom<Role>('prefill', 'decode');
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant('register' as const),
      role: roleArb,
      url: fc.integer({ min: 0, max: 3 }),
      endpoint: fc.integer({ min: 0, max: 1 }),
      permanent: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
    }),
  },
  {
    weight: 3,
    arbitrary: fc.record({ kind: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 7000 }) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cleanup' as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('deregister' as const),
      role: roleArb,
      url: fc.integer({ min: 0, max: 3 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('snapshot' as const), role: roleArb }) },
);

describe('ServiceRegistry properties', () => {
  it('generations strictly increase per lifetime and snapshots match a reference model', () => {
    fc.assert(
      fc.property(fc.array(opArb, { maxLength: 80 }), (ops) => {
        const { clock, registry } = setup(5000);
        // Reference model: key -> {generation, expiresAtMs, endpoint}.
        const model = new Map<string, { generation: number; expiresAtMs: number; endpoint: string }>();
        let maxGeneration = 0;
        for (const op of ops) {
          const now = clock.nowMs;
          switch (op.kind) {
            case 'register': {
              const url = `http://w${op.url}:8000`;
              const endpoint = `10.0.0.${op.endpoint}:8000`;
              const key = `${op.role} ${url}`;
              const previous = model.get(key);
              const result = registered(
                registry.register({ role: op.role, url, endpoint, permanent: op.permanent }),
              );
              const heartbeat =
                previous !== undefined && previous.expiresAtMs > now && previous.endpoint === endpoint;
              if (heartbeat) {
                expect(result.event).toBe('heartbeat');
                expect(result.entry.generation).toBe(previous.generation);
              } else {
                expect(result.event).not.toBe('heartbeat');
                expect(result.entry.generation).toBeGreaterThan(maxGeneration);
                maxGeneration = result.entry.generation;
              }
              // Permanence is sticky for the key while it is live (a new lifetime there included).
              const permanent = op.permanent || (previous !== undefined && previous.expiresAtMs === Infinity);
              model.set(key, {
                generation: result.entry.generation,
                expiresAtMs: permanent ? Infinity : now + 5000,
                endpoint,
              });
              break;
            }
            case 'advance':
              clock.advance(op.ms);
              break;
            case 'cleanup': {
              const removed = registry.cleanup();
              for (const entry of removed) {
                expect(entry.expiresAtMs).toBeLessThanOrEqual(now);
                model.delete(`${entry.role} ${entry.url}`);
              }
              for (const value of model.values()) expect(value.expiresAtMs).toBeGreaterThan(now);
              break;
            }
            case 'deregister': {
              const key = `${op.role} http://w${op.url}:8000`;
              expect(registry.deregister(op.role, `http://w${op.url}:8000`)).toBe(model.delete(key));
              break;
            }
            case 'snapshot': {
              const snapshot = registry.snapshot(op.role);
              const expected = [...model.entries()]
                .filter(([key, value]) => key.startsWith(`${op.role} `) && value.expiresAtMs > now)
                .map(([key, value]) => ({ url: key.slice(op.role.length + 1), generation: value.generation }))
                .sort((a, b) => (a.url < b.url ? -1 : 1));
              expect(snapshot.map((e) => ({ url: e.url, generation: e.generation }))).toEqual(expected);
              for (const entry of snapshot) expect(entry.expiresAtMs).toBeGreaterThan(now);
              break;
            }
          }
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('ServiceRegistry snapshot cost', () => {
  it('serves 1,000 entries from the cache (cost printed, not asserted)', () => {
    const { clock, registry } = setup(5000);
    for (let i = 0; i < 1000; i++) registry.register(reg(`http://10.0.${i >> 8}.${i & 255}:8000`, 'decode'));
    const first = registry.snapshot('decode');
    expect(first).toHaveLength(1000);
    const iterations = 10_000;
    let start = performance.now();
    for (let i = 0; i < iterations; i++) registry.snapshot('decode');
    const cachedUs = ((performance.now() - start) * 1000) / iterations;
    start = performance.now();
    for (let i = 0; i < 200; i++) {
      registry.deregister('decode', 'http://10.0.0.0:8000');
      registry.register(reg('http://10.0.0.0:8000', 'decode'));
      registry.snapshot('decode');
    }
    const rebuildUs = ((performance.now() - start) * 1000) / 200;
    clock.advance(1);
    console.info(
      `snapshot(1000 entries): cached ${cachedUs.toFixed(3)} us, rebuild ${rebuildUs.toFixed(1)} us`,
    );
    expect(registry.snapshot('decode')).toHaveLength(1000);
  });
});
