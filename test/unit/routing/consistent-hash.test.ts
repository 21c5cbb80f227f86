import { describe, expect, it } from 'vitest';
import { ConsistentHashPolicy, sessionKey } from '../../../src/routing/consistent-hash.js';
import { HashRing, hash32 } from '../../../src/routing/hash-ring.js';
import type { Worker } from '../../../src/workers/worker.js';
import { counts, input, makeWorker, makeWorkers } from './fixtures.js';

function policyWith(workers: readonly Worker[]): ConsistentHashPolicy {
  const policy = new ConsistentHashPolicy();
  for (const w of workers) policy.addWorker(w);
  return policy;
}

const userKey = (k: string) => ({ headers: { 'x-user-id': k } });
const keys = Array.from({ length: 2000 }, (_, i) => `user-${i}`);

describe('sessionKey', () => {
  it.each([
    {
      name: 'x-session-id first',
      headers: { 'x-session-id': 's', 'x-user-id': 'u' },
      body: { user: 'b' },
      want: 's',
    },
    {
      name: "then Claude Code's session",
      headers: { 'x-claude-code-session-id': 'cc', 'x-user-id': 'u' },
      want: 'cc',
    },
    {
      name: 'then x-user-id',
      headers: { 'x-user-id': 'u' },
      body: { user: 'b', session_id: 'sid' },
      want: 'u',
    },
    { name: 'then body user', headers: {}, body: { user: 'b', session_id: 'sid' }, want: 'b' },
    {
      name: 'then body session_id',
      headers: {},
      body: { session_id: 'sid', prompt_cache_key: 'p' },
      want: 'sid',
    },
    { name: 'then body prompt_cache_key', headers: {}, body: { prompt_cache_key: 'conv-1' }, want: 'conv-1' },
    { name: 'numbers as text', headers: {}, body: { user: 42 }, want: '42' },
    {
      name: 'empty values skipped',
      headers: { 'x-session-id': '' },
      body: { user: '', session_id: 'sid' },
      want: 'sid',
    },
    { name: 'non-scalar ignored', headers: {}, body: { user: { id: 1 } }, want: undefined },
    { name: 'none', headers: {}, body: undefined, want: undefined },
  ] as Array<{
    name: string;
    headers: Record<string, string>;
    body?: Record<string, unknown>;
    want?: string;
  }>)('$name', ({ headers, body, want }) => {
    expect(sessionKey({ headers, body })).toBe(want);
  });
});

describe('consistent_hash', () => {
  it('is sticky per key and spreads keys over the workers', () => {
    const workers = makeWorkers(8);
    const policy = policyWith(workers);
    const owners = keys.map((k) => {
      const d = policy.select(input(workers, userKey(k)));
      expect(d.branch).toBe('hash');
      expect(policy.select(input(workers, userKey(k))).worker).toBe(d.worker);
      return d.worker.id;
    });
    const share = counts(owners);
    expect(share.size).toBe(8);
    // 160 virtual nodes: every worker's share is near 1/8 (250 of 2000).
    for (const n of share.values()) {
      expect(n).toBeGreaterThan(150);
      expect(n).toBeLessThan(350);
    }
  });

  it('falls to the NEXT candidate on the ring when the owner is not a candidate', () => {
    const workers = makeWorkers(8);
    const policy = policyWith(workers);
    for (const key of keys.slice(0, 200)) {
      const order = policy.ringOrder(key);
      expect(order).toHaveLength(8);
      const [owner, next, third] = order;
      const without = workers.filter((w) => w.id !== owner);
      const d = policy.select(input(without, userKey(key)));
      expect(d).toEqual({ worker: without.find((w) => w.id === next), branch: 'hash_fallback' });
      const withoutTwo = without.filter((w) => w.id !== next);
      expect(policy.select(input(withoutTwo, userKey(key))).worker.id).toBe(third);
    }
  });

  it("spreads an unavailable worker's keys over the others, and moves no other key", () => {
    const workers = makeWorkers(8);
    const policy = policyWith(workers);
    const down = workers[0] as Worker;
    const healthy = workers.slice(1);
    const moved: string[] = [];
    for (const key of keys) {
      const before = policy.select(input(workers, userKey(key))).worker;
      const after = policy.select(input(healthy, userKey(key))).worker;
      if (before === down) moved.push(after.id);
      else expect(after).toBe(before);
    }
    expect(moved.length).toBeGreaterThan(0);
    // Not "the first healthy worker": the orphaned keys land on several workers.
    expect(counts(moved).size).toBeGreaterThanOrEqual(4);
  });

  it('rebuilds the ring on removeWorker, and a same-URL re-registration takes the same arcs', () => {
    const workers = makeWorkers(4);
    const policy = policyWith(workers);
    const old = workers[2] as Worker;
    const owned = keys.filter((k) => policy.select(input(workers, userKey(k))).worker === old);
    expect(owned.length).toBeGreaterThan(0);

    policy.removeWorker(old);
    const rest = workers.filter((w) => w !== old);
    for (const k of owned) expect(policy.select(input(rest, userKey(k))).branch).toBe('hash');

    const reborn = makeWorker(2, 2); // same URL, new generation, new id
    expect(reborn.id).not.toBe(old.id);
    policy.addWorker(reborn);
    const now = [...rest, reborn];
    for (const k of owned)
      expect(policy.select(input(now, userKey(k)))).toEqual({ worker: reborn, branch: 'hash' });
  });

  it('uses least load without a key, and when no ring member is a candidate', () => {
    const workers = makeWorkers(3, [2, 0, 1]);
    const policy = policyWith(workers.slice(0, 1));
    expect(policy.select(input(workers))).toEqual({ worker: workers[1], branch: 'no_key' });
    const others = workers.slice(1);
    expect(policy.select(input(others, userKey('k')))).toEqual({
      worker: workers[1],
      branch: 'hash_fallback',
    });
    expect(new ConsistentHashPolicy().select(input(workers, userKey('k'))).branch).toBe('hash_fallback');
  });
});

describe('HashRing', () => {
  it('hash32 is deterministic and unsigned', () => {
    expect(hash32('abc')).toBe(hash32('abc'));
    expect(hash32('abc')).not.toBe(hash32('abd'));
    for (const s of ['', 'a', '😀', 'x'.repeat(1000)]) {
      expect(Number.isInteger(hash32(s))).toBe(true);
      expect(hash32(s)).toBeGreaterThanOrEqual(0);
      expect(hash32(s)).toBeLessThan(2 ** 32);
    }
  });

  it('tracks membership and finds nothing when empty or nothing is accepted', () => {
    const ring = new HashRing(4);
    expect(ring.find(123)).toBeUndefined();
    ring.set('a', 'http://a');
    ring.set('b', 'http://b');
    expect(ring.size).toBe(2);
    expect(ring.find(0)?.id).toMatch(/^[ab]$/);
    expect(ring.find(0, () => false)).toBeUndefined();
    expect(ring.find(2 ** 32 - 1)?.fellThrough).toBe(false); // wraps to the first point
    ring.delete('a');
    expect(ring.has('a')).toBe(false);
    expect(ring.find(7)).toEqual({ id: 'b', fellThrough: false });
    expect(() => new HashRing(0)).toThrow(RangeError);
  });
});
