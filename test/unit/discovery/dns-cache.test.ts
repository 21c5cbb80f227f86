import { describe, expect, it } from 'vitest';
import { DnsCache, type DnsCacheState } from '../../../src/discovery/dns-cache.js';
import { resolveEndpoint, resolveHost } from '../../../src/workers/endpoint.js';

type Step = { record: string | undefined; at: number } | { get: DnsCacheState; at: number };

describe('DnsCache', () => {
  it.each<[string, Step[]]>([
    ['unknown name is a miss', [{ get: { state: 'miss' }, at: 0 }]],
    [
      'a good answer is fresh for ttl, then stale (served while refreshed)',
      [
        { record: '10.0.0.1', at: 0 },
        { get: { state: 'fresh', ip: '10.0.0.1' }, at: 29_999 },
        { get: { state: 'stale', ip: '10.0.0.1' }, at: 30_000 },
      ],
    ],
    [
      'a failure is remembered for the negative ttl, then looked up again',
      [
        { record: undefined, at: 0 },
        { get: { state: 'failed' }, at: 4_999 },
        { get: { state: 'miss' }, at: 5_000 },
      ],
    ],
    [
      'a failed refresh keeps the last good answer, stale again after the negative ttl',
      [
        { record: '10.0.0.1', at: 0 },
        { record: undefined, at: 31_000 },
        { get: { state: 'fresh', ip: '10.0.0.1' }, at: 35_999 },
        { get: { state: 'stale', ip: '10.0.0.1' }, at: 36_000 },
      ],
    ],
    [
      'a refresh with a new address replaces the old one',
      [
        { record: '10.0.0.1', at: 0 },
        { record: '10.0.0.2', at: 30_000 },
        { get: { state: 'fresh', ip: '10.0.0.2' }, at: 30_001 },
      ],
    ],
  ])('%s', (_what, steps) => {
    const cache = new DnsCache();
    for (const step of steps) {
      if ('record' in step) cache.record('worker-a', step.record, step.at);
      else expect(cache.get('worker-a', step.at)).toEqual(step.get);
    }
  });

  it('record returns the address to use now', () => {
    const cache = new DnsCache();
    expect(cache.record('a', undefined, 0)).toBeUndefined();
    expect(cache.record('a', '10.0.0.1', 10_000)).toBe('10.0.0.1');
    expect(cache.record('a', undefined, 50_000)).toBe('10.0.0.1');
  });

  it('keeps at most maxNames, evicting the least recently recorded', () => {
    const cache = new DnsCache({ maxNames: 2 });
    cache.record('a', '10.0.0.1', 0);
    cache.record('b', '10.0.0.2', 0);
    cache.record('a', '10.0.0.1', 1); // a is newest now
    cache.record('c', '10.0.0.3', 2);
    expect(cache.size).toBe(2);
    expect(cache.get('b', 3).state).toBe('miss');
    expect(cache.get('a', 3).state).toBe('fresh');
    expect(cache.get('c', 3).state).toBe('fresh');
  });
});

describe('resolveHost (the one resolver)', () => {
  it.each([
    ['10.0.0.5', '10.0.0.5'],
    ['[fd00::1]', 'fd00::1'],
    ['fd00::1', 'fd00::1'],
  ])('passes the IP literal %s through', async (host, ip) => {
    expect(await resolveHost(host)).toBe(ip);
  });

  it('prefers IPv4 for a name (localhost from /etc/hosts)', async () => {
    expect(await resolveHost('localhost')).toBe('127.0.0.1');
    expect(await resolveEndpoint('localhost', 8000)).toBe('127.0.0.1:8000');
  });

  it('formats an IPv6 endpoint in brackets; a custom resolver is used as given', async () => {
    expect(await resolveEndpoint('fd00::1', 8000)).toBe('[fd00::1]:8000');
    expect(await resolveEndpoint('worker-a', 9000, async () => '10.1.1.1')).toBe('10.1.1.1:9000');
  });
});
