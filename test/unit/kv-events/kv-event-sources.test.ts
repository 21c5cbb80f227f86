import { describe, expect, it } from 'vitest';
import {
  hasKvEventSources,
  parseKvEventSources,
  publishersOf,
} from '../../../src/kv-events/kv-event-sources.js';

interface Opts {
  sources: string[];
  replays: string[];
  defaultPort: number;
  defaultReplayPort: number;
  dpSize: number;
}
const base: Opts = { sources: [], replays: [], defaultPort: 0, defaultReplayPort: 0, dpSize: 1 };

describe('kv event sources', () => {
  it('explicit sources, one endpoint per rank, with replay endpoints in the same order', () => {
    const rules = parseKvEventSources({
      ...base,
      sources: ['http://10.0.0.5:8000=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558'],
      replays: ['http://10.0.0.5:8000/=tcp://10.0.0.5:6557,tcp://10.0.0.5:6558'],
    });
    expect(publishersOf(rules, 'http://10.0.0.5:8000')).toEqual([
      { endpoint: 'tcp://10.0.0.5:5557', replayEndpoint: 'tcp://10.0.0.5:6557' },
      { endpoint: 'tcp://10.0.0.5:5558', replayEndpoint: 'tcp://10.0.0.5:6558' },
    ]);
    expect(publishersOf(rules, 'http://10.0.0.6:8000')).toEqual([]);
    expect(hasKvEventSources(rules)).toBe(true);
    expect(hasKvEventSources(parseKvEventSources(base))).toBe(false);
  });

  it("a worker's own KV-events port (pod annotation / metadata) beats the default rule, not an explicit source", () => {
    const rules = parseKvEventSources({
      ...base,
      sources: ['http://10.0.0.5:8000=tcp://10.0.0.5:5557'],
      defaultPort: 5557,
      dpSize: 2,
    });
    expect(publishersOf(rules, 'http://10.0.0.6:8000', 6000)).toEqual([
      { endpoint: 'tcp://10.0.0.6:6000' },
      { endpoint: 'tcp://10.0.0.6:6001' },
    ]);
    expect(publishersOf(rules, 'http://10.0.0.5:8000', 6000)).toEqual([{ endpoint: 'tcp://10.0.0.5:5557' }]);
    // No default rule: only workers that name their own port publish.
    const none = parseKvEventSources(base);
    expect(publishersOf(none, 'http://10.0.0.7:8000', 5560)).toEqual([{ endpoint: 'tcp://10.0.0.7:5560' }]);
    expect(publishersOf(none, 'http://10.0.0.7:8000')).toEqual([]);
  });

  it('default rule: the worker host at the configured port (+ rank)', () => {
    const rules = parseKvEventSources({ ...base, defaultPort: 5557, defaultReplayPort: 5600, dpSize: 2 });
    expect(publishersOf(rules, 'http://Worker-1.svc:8000')).toEqual([
      { endpoint: 'tcp://worker-1.svc:5557', replayEndpoint: 'tcp://worker-1.svc:5600' },
      { endpoint: 'tcp://worker-1.svc:5558', replayEndpoint: 'tcp://worker-1.svc:5601' },
    ]);
    expect(publishersOf(parseKvEventSources({ ...base, defaultPort: 5557 }), 'http://[::1]:8000')).toEqual([
      { endpoint: 'tcp://[::1]:5557' },
    ]);
  });

  it.each<[string, Partial<Opts>, RegExp]>([
    ['no =', { sources: ['http://a:1'] }, /WORKER_URL=ENDPOINT/],
    ['bad endpoint', { sources: ['http://a:1=udp://a:2'] }, /not tcp:\/\/host:port/],
    ['bad port', { sources: ['http://a:1=tcp://a:70000'] }, /not tcp/],
    ['twice', { sources: ['http://a:1=tcp://a:2', 'http://a:1/=tcp://a:3'] }, /given twice/],
    ['replay without source', { replays: ['http://a:1=tcp://a:2'] }, /needs a --kv-event-source/],
    ['dp size 0', { dpSize: 0 }, /dp-size/],
    ['port range', { defaultPort: 70000 }, /kv-event-port/],
  ])('rejects %s', (_name, patch, message) => {
    expect(() => parseKvEventSources({ ...base, ...patch })).toThrow(message);
  });
});

describe('KV-event options in the router config', () => {
  it('parses flags (repeatable lists) and rejects bad values with a ConfigError', async () => {
    const { parseConfig, ConfigError } = await import('../../../src/config.js');
    const parsed = parseConfig([
      '--policy',
      'kv_aware',
      '--kv-event-source',
      'http://10.0.0.5:8000=tcp://10.0.0.5:5557',
      '--kv-event-source',
      'http://10.0.0.6:8000=tcp://10.0.0.6:5557',
      '--kv-tier-credit',
      'CPU=0.25',
      '--tokenizer',
      'm=/models/m',
    ]);
    expect(parsed.help).toBe(false);
    if (parsed.help) return;
    expect(parsed.config.policy).toBe('kv_aware');
    expect(parsed.config.kvEventSource).toHaveLength(2);
    expect(parsed.config.kvTierCredit).toEqual(['CPU=0.25']);
    expect(() => parseConfig(['--kv-event-source', 'http://a:1=udp://x'])).toThrow(ConfigError);
    // One publisher per data-parallel rank, in the reference router's spelling (commas inside one item).
    const dp = parseConfig([
      '--kv-event-source',
      'http://10.0.0.5:8000=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558',
      '--kv-event-replay',
      'http://10.0.0.5:8000=tcp://10.0.0.5:6557,tcp://10.0.0.5:6558',
    ]);
    expect(dp.help ? [] : dp.config.kvEventSource).toEqual([
      'http://10.0.0.5:8000=tcp://10.0.0.5:5557,tcp://10.0.0.5:5558',
    ]);
    expect(dp.help ? [] : dp.config.kvEventReplay).toHaveLength(1);
    expect(() => parseConfig(['--kv-tier-credit', 'CPU=2'])).toThrow(/MEDIUM=0..1/);
    expect(() => parseConfig(['--tokenizer', 'nopath'])).toThrow(/MODEL=PATH/);
  });
});
