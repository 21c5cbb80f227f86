import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import { LeastLoadPolicy } from '../../../src/routing/least-load.js';
import { POLICY_NAMES } from '../../../src/routing/policy.js';
import { PowerOfTwoPolicy } from '../../../src/routing/power-of-two.js';
import { RandomPolicy } from '../../../src/routing/random.js';
import { RoundRobinPolicy } from '../../../src/routing/round-robin.js';
import { leastLoaded } from '../../../src/routing/tie-break.js';
import { counts, input, makeWorkers, route, seededRng, sequenceRng } from './fixtures.js';

describe('leastLoaded', () => {
  it.each([
    { name: 'lowest load', loads: [3, 1, 2], processed: [0, 9, 0], indices: undefined, want: 1 },
    {
      name: 'equal load -> fewer processed',
      loads: [1, 1, 1],
      processed: [5, 2, 3],
      indices: undefined,
      want: 1,
    },
    {
      name: 'all equal -> lowest index',
      loads: [0, 0, 0],
      processed: [4, 4, 4],
      indices: undefined,
      want: 0,
    },
    { name: 'restricted to indices', loads: [0, 5, 4], processed: [0, 0, 0], indices: [1, 2], want: 2 },
    {
      name: 'index order of the subset does not matter',
      loads: [0, 1, 1],
      processed: [0, 0, 0],
      indices: [2, 1],
      want: 1,
    },
  ])('$name', ({ loads, processed, indices, want }) => {
    const workers = makeWorkers(loads.length, loads);
    workers.forEach((w, i) => (w.processed = processed[i] as number));
    expect(leastLoaded(workers, indices)).toBe(want);
  });

  it('throws when there is no candidate', () => {
    expect(() => leastLoaded([])).toThrow(RangeError);
    expect(() => leastLoaded(makeWorkers(2), [])).toThrow(RangeError);
  });
});

describe('round_robin', () => {
  it('rotates through the candidates; the cursor advances only in routed()', () => {
    const policy = new RoundRobinPolicy();
    const workers = makeWorkers(3);
    const sel = input(workers);
    expect(policy.select(sel).worker).toBe(workers[0]);
    expect(policy.select(sel).worker).toBe(workers[0]); // select() is pure
    const picked = Array.from({ length: 6 }, () => route(policy, sel).decision);
    expect(picked.map((d) => d.worker.id)).toEqual([0, 1, 2, 0, 1, 2].map((i) => workers[i]?.id));
    expect(picked.every((d) => d.branch === 'round_robin')).toBe(true);
  });

  it('stays in range when the candidate list shrinks', () => {
    const policy = new RoundRobinPolicy();
    const workers = makeWorkers(4);
    for (let i = 0; i < 3; i++) route(policy, input(workers));
    const two = workers.slice(0, 2);
    expect(two).toContain(policy.select(input(two)).worker);
  });
});

describe('random', () => {
  it.each([
    { r: 0, want: 0 },
    { r: 0.49, want: 1 },
    { r: 0.999, want: 2 },
    { r: 1, want: 2 },
  ])('rng $r -> index $want of 3', ({ r, want }) => {
    const workers = makeWorkers(3);
    const d = new RandomPolicy(() => r).select(input(workers));
    expect(d).toEqual({ worker: workers[want], branch: 'random' });
  });

  it('covers every candidate', () => {
    const workers = makeWorkers(4);
    const policy = new RandomPolicy(seededRng(7));
    const seen = counts(Array.from({ length: 400 }, () => policy.select(input(workers)).worker.id));
    expect(seen.size).toBe(4);
  });
});

describe('power_of_two', () => {
  it.each([
    // i = 0, j = floor(0.5 * 3) = 1 -> 2 (j skips i): workers 0 and 2 compete, not the global minimum 1.
    { name: 'lower load of the two drawn', rng: [0, 0.5], loads: [5, 0, 1, 9], want: 2 },
    // i = 2, j = floor(0.7 * 3) = 2 -> 3.
    { name: 'draws are distinct: j skips i', rng: [0.5, 0.7], loads: [0, 0, 2, 1], want: 3 },
    { name: 'equal load -> tie-break (processed, index)', rng: [0.9, 0], loads: [1, 0, 0, 1], want: 0 },
  ])('$name', ({ rng, loads, want }) => {
    const workers = makeWorkers(loads.length, loads);
    const d = new PowerOfTwoPolicy(sequenceRng(rng)).select(input(workers));
    expect(d).toEqual({ worker: workers[want], branch: 'power_of_two' });
  });

  it('never compares a worker with itself', () => {
    const workers = makeWorkers(2, [7, 3]);
    // Both draws 0: i = 0, j = 0 -> skipped to 1, so the lighter worker 1 always competes.
    const policy = new PowerOfTwoPolicy(() => 0);
    expect(policy.select(input(workers)).worker).toBe(workers[1]);
  });

  it('returns the only candidate', () => {
    const workers = makeWorkers(1, [100]);
    expect(new PowerOfTwoPolicy(() => 0.3).select(input(workers)).worker).toBe(workers[0]);
  });
});

describe('least_load', () => {
  it('spreads equal-load traffic when requests complete at once (processed tie-break)', () => {
    const policy = new LeastLoadPolicy();
    const workers = makeWorkers(8);
    const ids: string[] = [];
    for (let i = 0; i < 80; i++) {
      const { decision, guard } = route(policy, input(workers));
      expect(decision.branch).toBe('least_load');
      ids.push(decision.worker.id);
      guard.release();
    }
    expect([...counts(ids).values()]).toEqual(Array(8).fill(10));
  });

  it('picks the least loaded', () => {
    const workers = makeWorkers(3, [4, 2, 3]);
    expect(new LeastLoadPolicy().select(input(workers)).worker).toBe(workers[1]);
  });
});

describe('createPolicy', () => {
  it.each(POLICY_NAMES.map((name) => ({ name })))('creates $name', ({ name }) => {
    const policy = createPolicy(name, { rng: () => 0 });
    expect(policy.name).toBe(name);
    const workers = makeWorkers(2);
    expect(workers).toContain(
      policy.select(input(workers, { text: 'hi', headers: { 'x-user-id': 'u' } })).worker,
    );
  });

  it('passes cache_aware options and the rng through', () => {
    const policy = createPolicy('cache_aware', { cacheAware: { cacheThreshold: 0.9, mode: 'global' } });
    expect(policy).toBeInstanceOf(CacheAwarePolicy);
    expect((policy as CacheAwarePolicy).options).toMatchObject({
      cacheThreshold: 0.9,
      mode: 'global',
      balanceAbsThreshold: 64,
    });
    const workers = makeWorkers(3);
    expect(createPolicy('random', { rng: () => 0.99 }).select(input(workers)).worker).toBe(workers[2]);
  });

  it('returns a fresh instance per call', () => {
    expect(createPolicy('round_robin')).not.toBe(createPolicy('round_robin'));
  });
});
