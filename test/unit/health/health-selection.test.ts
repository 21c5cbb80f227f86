/**
 * Health as selection sees it: a real ServiceRegistry (fake clock), a persistent WorkerPool, real
 * policies, and WorkerHealth writing `worker.healthy`. Unselectable workers never reach the policy's
 * input (so they are not in its load arithmetic); state survives heartbeats and resets on a new
 * generation.
 */
import { describe, expect, it } from 'vitest';
import { ServiceRegistry } from '../../../src/discovery/service-registry.js';
import { WorkerHealth } from '../../../src/health/worker-health.js';
import { createPolicy } from '../../../src/routing/create-policy.js';
import type { PolicyName } from '../../../src/routing/policy.js';
import { choose, commit, type RoutingObserver } from '../../../src/routing/selector.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';

const CTX = { model: 'm', text: 'hello', headers: {} };
const URLS = ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000'];

function setup(policy: PolicyName = 'round_robin') {
  let now = 0;
  const clock = () => now;
  const registry = new ServiceRegistry({ ttlMs: 5000, clock });
  const register = (url: string) =>
    registry.register({ role: 'decode', url, endpoint: url.slice('http://'.length) });
  for (const url of URLS) register(url);
  const pool = new WorkerPool('decode', createPolicy(policy, {}), registry);
  const health = new WorkerHealth({
    breaker: { failureThreshold: 2, successThreshold: 1, cooldownMs: 1000 },
  });
  pool.reconcile();
  // The router's wiring: a decision takes a half-open probe slot in the same synchronous step.
  const observer: RoutingObserver = { decided: (_pool, d) => health.routed(d.worker, now) };
  return {
    pool,
    health,
    register,
    advance: (ms: number) => (now += ms),
    now: () => now,
    byUrl: (url: string) => pool.workers.find((w) => w.url === url)!,
    /** Selected urls over n decisions, each in one synchronous step like the dispatchers. */
    select(n: number): string[] {
      const out: string[] = [];
      for (let i = 0; i < n; i++) {
        health.refresh(now);
        pool.reconcile();
        const chosen = choose(pool, CTX);
        if (!chosen) {
          out.push('none');
          continue;
        }
        out.push(chosen.decision.worker.url);
        expect(chosen.input.workers.every((w) => w.healthy)).toBe(true);
        commit(pool, chosen, observer, now); // policy.routed + observer.decided, as reserve() does
      }
      return out;
    },
  };
}

describe('health and selection', () => {
  it.each<PolicyName>([
    'round_robin',
    'random',
    'power_of_two',
    'least_load',
    'consistent_hash',
    'cache_aware',
  ])('%s never selects an unhealthy or open worker', (policy) => {
    const s = setup(policy);
    const [a, b, c] = URLS.map((u) => s.byUrl(u));
    for (let i = 0; i < 3; i++) s.health.recordCheck(a!, false, s.now()); // active: unhealthy
    for (let i = 0; i < 2; i++) s.health.recordOutcome(b!, 'server_error', s.now()); // breaker: open
    expect(new Set(s.select(20))).toEqual(new Set([c!.url]));
    for (let i = 0; i < 2; i++) s.health.recordCheck(a!, true, s.now());
    expect(s.select(40)).not.toContain(b!.url);
  });

  it('every worker out of selection: no candidate (the dispatcher answers 503)', () => {
    const s = setup();
    for (const w of s.pool.workers) for (let i = 0; i < 2; i++) s.health.recordOutcome(w, 'server_error', 0);
    expect(s.select(1)).toEqual(['none']);
  });

  it('half-open lets one probe through; its success closes the breaker', () => {
    const s = setup();
    const b = s.byUrl(URLS[1]!);
    for (let i = 0; i < 2; i++) s.health.recordOutcome(b, 'server_error', 0);
    s.advance(1000);
    const picks = s.select(6);
    expect(picks.filter((u) => u === b.url)).toHaveLength(1); // the probe, then out until it ends
    s.health.recordOutcome(b, 'success', s.now());
    expect(s.health.view(b, s.now()).breaker).toBe('closed');
    expect(s.select(3)).toContain(b.url);
  });

  it('health survives heartbeats and resets with a new generation', () => {
    const s = setup();
    const a = s.byUrl(URLS[0]!);
    for (let i = 0; i < 3; i++) s.health.recordCheck(a, false, 0);
    s.advance(3000);
    for (const url of URLS) s.register(url); // heartbeats
    s.pool.reconcile();
    expect(s.byUrl(URLS[0]!)).toBe(a);
    expect(a.healthy).toBe(false);

    s.advance(6000); // no heartbeats for 6 s (TTL 5 s): every lifetime ends; then a re-registers
    s.register(URLS[0]!);
    s.pool.reconcile();
    const successor = s.byUrl(URLS[0]!);
    expect(successor).not.toBe(a);
    expect(successor.generation).toBeGreaterThan(a.generation);
    expect(successor.healthy).toBe(true);
    expect(s.health.view(successor, s.now())).toEqual({
      active: 'healthy',
      breaker: 'closed',
      asleep: false,
      cordoned: false,
      paused: false,
      selectable: true,
    });
    expect(s.health.view(a, s.now()).active).toBe('unhealthy');
    expect(s.select(3)).toEqual([URLS[0], URLS[0], URLS[0]]); // the only live worker now
  });
});
