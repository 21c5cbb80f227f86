import { describe, expect, it } from 'vitest';
import { RegistryJanitor } from '../../../src/discovery/registry-janitor.js';
import { ServiceRegistry, type RegistryEntry } from '../../../src/discovery/service-registry.js';
import { waitFor } from '../../support/wait-for.js';

function setup(): { clock: { now: number }; registry: ServiceRegistry } {
  const clock = { now: 0 };
  return { clock, registry: new ServiceRegistry({ ttlMs: 100, clock: () => clock.now }) };
}

describe('RegistryJanitor', () => {
  it('runOnce removes expired entries and reports them once', () => {
    const { clock, registry } = setup();
    const reported: RegistryEntry[][] = [];
    const janitor = new RegistryJanitor({ registry, intervalMs: 60_000, onExpired: (e) => reported.push(e) });
    try {
      registry.register({ role: 'decode', url: 'http://a:1', endpoint: 'a:1' });
      registry.register({ role: 'decode', url: 'http://b:1', endpoint: 'b:1', permanent: true });
      expect(janitor.runOnce()).toEqual([]);
      clock.now = 100;
      expect(janitor.runOnce().map((e) => e.url)).toEqual(['http://a:1']);
      expect(janitor.runOnce()).toEqual([]);
      expect(reported.map((batch) => batch.map((e) => e.url))).toEqual([['http://a:1']]);
    } finally {
      janitor.close();
    }
  });

  it('runs on its interval and routes onExpired errors to onError', async () => {
    const { clock, registry } = setup();
    const errors: unknown[] = [];
    registry.register({ role: 'prefill', url: 'http://a:1', endpoint: 'a:1' });
    clock.now = 1000;
    const janitor = new RegistryJanitor({
      registry,
      intervalMs: 5,
      onExpired: () => {
        throw new Error('boom');
      },
      onError: (err) => errors.push(err),
    });
    try {
      await waitFor(() => errors.length === 1);
      expect(registry.cleanup()).toEqual([]);
    } finally {
      janitor.close();
      janitor.close();
    }
  });

  it('a registry listener that throws while it removes entries goes to onError, not out of the timer', () => {
    const { clock, registry } = setup();
    const errors: unknown[] = [];
    registry.register({ role: 'prefill', url: 'http://a:1', endpoint: 'a:1' });
    registry.onChange(() => {
      throw new Error('listener failed');
    });
    clock.now = 1000;
    const janitor = new RegistryJanitor({ registry, intervalMs: 60_000, onError: (err) => errors.push(err) });
    try {
      expect(() => janitor.runOnce()).not.toThrow();
      expect(errors.map((e) => (e as Error).message)).toEqual(['listener failed']);
      expect(registry.size('prefill')).toBe(0);
    } finally {
      janitor.close();
    }
  });

  it('rejects a non-positive interval', () => {
    expect(() => new RegistryJanitor({ registry: new ServiceRegistry(), intervalMs: 0 })).toThrow(RangeError);
  });
});
