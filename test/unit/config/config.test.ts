import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ConfigError,
  defaultConfig,
  helpText,
  parseConfig,
  parseWorkerUrl,
  type Config,
} from '../../../src/config.js';
import { OPTIONS, type OptionSpec } from '../../../src/config-schema.js';
import { DEFAULT_CACHE_AWARE_OPTIONS } from '../../../src/routing/cache-aware.js';
import { DEFAULT_BREAKER_OPTIONS } from '../../../src/health/circuit-breaker.js';
import { POLICY_NAMES } from '../../../src/routing/policy.js';

const dir = mkdtempSync(path.join(tmpdir(), 'router-config-'));
function yamlFile(text: string): string {
  const file = path.join(dir, `c${Math.random().toString(36).slice(2)}.yaml`);
  writeFileSync(file, text);
  return file;
}
function parse(argv: string[], env: NodeJS.ProcessEnv = {}): Readonly<Config> {
  const r = parseConfig(argv, env);
  if (r.help) throw new Error('unexpected --help');
  return r.config;
}

describe('defaults', () => {
  it('are the option table defaults, frozen, with fresh list copies', () => {
    const c = parse([]);
    for (const o of OPTIONS as readonly OptionSpec[])
      expect(c[o.key as keyof Config], o.key).toEqual(o.default);
    expect(Object.isFrozen(c)).toBe(true);
    const a = defaultConfig();
    a.workers.push('http://x:1');
    expect(defaultConfig().workers).toEqual([]);
  });

  it('take cache-aware and breaker defaults and policy names from the modules that own them', () => {
    const c = defaultConfig();
    expect(c).toMatchObject({
      cacheThreshold: DEFAULT_CACHE_AWARE_OPTIONS.cacheThreshold,
      balanceAbsThreshold: DEFAULT_CACHE_AWARE_OPTIONS.balanceAbsThreshold,
      balanceRelThreshold: DEFAULT_CACHE_AWARE_OPTIONS.balanceRelThreshold,
      cacheAwareMode: DEFAULT_CACHE_AWARE_OPTIONS.mode,
      evictionIntervalMs: DEFAULT_CACHE_AWARE_OPTIONS.evictionIntervalMs,
      maxTreeSize: DEFAULT_CACHE_AWARE_OPTIONS.maxTreeSize,
      cbFailureThreshold: DEFAULT_BREAKER_OPTIONS.failureThreshold,
      cbSuccessThreshold: DEFAULT_BREAKER_OPTIONS.successThreshold,
      cbCooldownMs: DEFAULT_BREAKER_OPTIONS.cooldownMs,
    });
    for (const key of ['policy', 'prefillPolicy', 'decodePolicy']) {
      const o = (OPTIONS as readonly OptionSpec[]).find((x) => x.key === key);
      expect(o?.values).toBe(POLICY_NAMES);
    }
  });

  it('every key and flag is unique', () => {
    const specs = OPTIONS as readonly OptionSpec[];
    expect(new Set(specs.map((o) => o.key)).size).toBe(specs.length);
    expect(new Set(specs.map((o) => o.flag)).size).toBe(specs.length);
  });
});

describe('flags', () => {
  it.each<[string, string[], Partial<Config>]>([
    ['an int', ['--grpc-port', '9100'], { grpcPort: 9100 }],
    ['an int with underscores', ['--max-body-bytes', '1_000_000'], { maxBodyBytes: 1_000_000 }],
    ['a number', ['--cache-threshold', '0.5'], { cacheThreshold: 0.5 }],
    ['an enum', ['--policy', 'round_robin'], { policy: 'round_robin' }],
    ['a bool', ['--decision-header'], { decisionHeader: true }],
    ['a negated bool', ['--no-decision-header'], { decisionHeader: false }],
    [
      'a repeated list',
      ['--worker', 'http://a:1', '--worker', 'http://b:2'],
      { workers: ['http://a:1', 'http://b:2'] },
    ],
    [
      'a comma list',
      ['--mode', 'pd', '--prefill', 'http://a:1, http://b:2,'],
      { prefill: ['http://a:1', 'http://b:2'] },
    ],
    [
      'request objectives, a negative priority included',
      ['--objective', 'batch=-1', '--objective', 'realtime=5', '--saturation-kv-usage', '0.9'],
      { objective: ['batch=-1', 'realtime=5'], saturationKvUsage: 0.9, saturationWaiting: 5 },
    ],
    [
      'a grace setting',
      ['--close-grace-ms', '250', '--drain-grace-ms', '0'],
      { closeGraceMs: 250, drainGraceMs: 0 },
    ],
    [
      'per-model media weights (repeatable; a spec keeps its commas)',
      ['--media-tokens', 'gemma=min:256,max:256', '--media-tokens', 'llava=min:576,max:576'],
      { mediaTokens: ['gemma=min:256,max:256', 'llava=min:576,max:576'] },
    ],
  ])('parses %s', (_what, argv, expected) => {
    expect(parse(argv)).toMatchObject(expected);
  });

  it.each<[string, string[], RegExp]>([
    ['an unknown flag', ['--nope'], /nope/],
    ['a negative int', ['--grpc-port=-1'], /non-negative integer/],
    ['a fractional int', ['--prefill-retries', '1.5'], /non-negative integer/],
    ['a non-number', ['--cache-threshold', 'high'], /non-negative number/],
    ['an unknown enum value', ['--policy', 'fastest'], /expected one of round_robin/],
    ['a port above 65535', ['--admin-port', '70000'], /out of range/],
    ['a cache threshold above 1', ['--cache-threshold', '1.5'], /within \[0, 1\]/],
    ['a worker URL with a path', ['--worker', 'http://a:1/v1'], /must not have a path/],
    ['an https worker URL', ['--decode', 'https://a:1'], /must use http/],
    ['a bad ZMQ bind', ['--discovery-zmq', 'ipc:///tmp/x'], /tcp:\/\/host:port/],
    [
      'static P/D workers without --mode pd (they would never get a request)',
      ['--prefill', 'http://p:8000', '--decode', 'http://d:8000'],
      /--prefill \/ --decode workers are routed only with --mode pd/,
    ],
    [
      'a regular --worker in pd mode (it would never get a request)',
      [
        '--mode',
        'pd',
        '--worker',
        'http://w:8000',
        '--prefill',
        'http://p:8000',
        '--decode',
        'http://d:8000',
      ],
      /--worker is a regular worker, which --mode pd never routes to/,
    ],
    ['an objective without a priority', ['--objective', 'batch'], /expected NAME=PRIORITY/],
    ['an objective given twice', ['--objective', 'a=-1,a=2'], /"a" given twice/],
    ['a media-tokens field without a value', ['--media-tokens', 'llava=max'], /--media-tokens llava/],
    ['an image token patch of 0', ['--image-token-patch', '0'], /--image-token-patch must be >= 1/],
    ['a prefill timeout of 0', ['--prefill-timeout-ms', '0'], /--prefill-timeout-ms must be > 0/],
    [
      "a timeout past Node's longest timer",
      ['--prefill-timeout-ms', '3000000000'],
      /--prefill-timeout-ms must be <= 2147483647/,
    ],
    ['a scrape interval past it', ['--scrape-interval-ms', '2147483648'], /--scrape-interval-ms must be <=/],
    [
      'a scrape interval at or past the staleness bound',
      ['--scrape-interval-ms', '2000'],
      /--load-stale-ms \(1000\) must be above --scrape-interval-ms \(2000\)/,
    ],
    [
      'a staleness bound of 0 with scraping off',
      ['--scrape-interval-ms', '0', '--load-stale-ms', '0'],
      /--load-stale-ms must be > 0/,
    ],
    [
      'a pace forget time of 0',
      ['--cost-worker-pace-forget-ms', '0'],
      /--cost-worker-pace-forget-ms must be > 0/,
    ],
  ])('rejects %s with a ConfigError', (_what, argv, message) => {
    expect(() => parseConfig(argv, {})).toThrow(ConfigError);
    expect(() => parseConfig(argv, {})).toThrow(message);
  });

  it('--help short-circuits', () => {
    expect(parseConfig(['--help'], {})).toEqual({ help: true });
  });

  it('--help names the --no- form of a switch that is on by default, which is how it goes off', () => {
    expect(helpText()).toMatch(/^ {2}--\[no-\]fleet-control /m);
    expect(() => parseConfig(['--fleet-control', 'false'], {})).toThrow(ConfigError);
    expect(parse(['--no-fleet-control'])).toMatchObject({ fleetControl: false });
  });
});

describe('YAML file', () => {
  it('accepts camelCase and flag names; flags win over the file, the file over defaults', () => {
    const file = yamlFile(
      'grpcPort: 9200\nadmin-port: 9201\npolicy: random\nworkers: [http://a:1]\ndecisionHeader: true\n',
    );
    expect(parse(['--config', file])).toMatchObject({
      grpcPort: 9200,
      adminPort: 9201,
      policy: 'random',
      workers: ['http://a:1'],
      decisionHeader: true,
    });
    expect(parse(['--config', file, '--grpc-port', '9300', '--no-decision-header'])).toMatchObject({
      grpcPort: 9300,
      adminPort: 9201,
      decisionHeader: false,
    });
  });

  it('an empty file is the defaults', () => {
    expect(parse(['--config', yamlFile('')])).toEqual(defaultConfig());
  });

  it.each<[string, string, RegExp]>([
    ['an unknown key', 'grcpPort: 1\n', /unknown setting "grcpPort"/],
    ['a list document', '- a\n- b\n', /must be a YAML mapping/],
    ['a wrong type', 'decisionHeader: maybe\n', /decisionHeader: expected true or false/],
    ['invalid YAML', 'a: [\n', /cannot read config file/],
  ])('rejects %s', (_what, text, message) => {
    expect(() => parseConfig(['--config', yamlFile(text)], {})).toThrow(message);
  });

  it('a missing file is a ConfigError naming it', () => {
    expect(() => parseConfig(['--config', path.join(dir, 'absent.yaml')], {})).toThrow(/absent\.yaml/);
  });
});

describe('environment', () => {
  it("VLLM_ROUTER_WORKER_API_KEY sets the workers' API key unless the flag is given", () => {
    expect(parse([]).workerApiKey).toBe('');
    expect(parse([], { VLLM_ROUTER_WORKER_API_KEY: 'env-key' }).workerApiKey).toBe('env-key');
    expect(
      parse(['--worker-api-key', 'flag-key'], { VLLM_ROUTER_WORKER_API_KEY: 'env-key' }).workerApiKey,
    ).toBe('flag-key');
  });

  it('VLLM_ROUTER_ADMIN_TOKEN sets the admin token unless the flag is given', () => {
    expect(parse([], { VLLM_ROUTER_ADMIN_TOKEN: 'env-token' }).adminToken).toBe('env-token');
    expect(parse(['--admin-token', 'flag-token'], { VLLM_ROUTER_ADMIN_TOKEN: 'env-token' }).adminToken).toBe(
      'flag-token',
    );
  });

  it('the admin token loses the whitespace around it (a Secret file ending in a newline); only whitespace is an error', () => {
    expect(parse([], { VLLM_ROUTER_ADMIN_TOKEN: 'env-token\n' }).adminToken).toBe('env-token');
    expect(parse(['--admin-token', ' flag-token\r\n']).adminToken).toBe('flag-token');
    expect(() => parse([], { VLLM_ROUTER_ADMIN_TOKEN: '\n' })).toThrow(ConfigError);
  });
});

describe('parseWorkerUrl', () => {
  it.each([
    ['http://10.0.0.5:8000', { url: 'http://10.0.0.5:8000', host: '10.0.0.5', port: 8000 }],
    ['10.0.0.5:8000', { url: 'http://10.0.0.5:8000', host: '10.0.0.5', port: 8000 }],
    ['http://worker-a', { url: 'http://worker-a:80', host: 'worker-a', port: 80 }],
    ['http://[fd00::1]:8000/', { url: 'http://[fd00::1]:8000', host: 'fd00::1', port: 8000 }],
  ])('normalises %s', (raw, expected) => {
    expect(parseWorkerUrl(raw)).toEqual(expected);
  });
});
