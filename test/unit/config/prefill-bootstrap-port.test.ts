/** `--prefill URL [BOOTSTRAP_PORT]` (vLLM's Mooncake proxy spelling), in flags and YAML. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig, parsePrefillArg, type Config } from '../../../src/config.js';

function config(argv: string[]): Config {
  const r = parseConfig(argv, {});
  if (r.help) throw new Error('help');
  return r.config;
}

describe('parsePrefillArg', () => {
  it.each([
    ['http://p:8000', { url: 'http://p:8000' }],
    ['http://p:8000 9000', { url: 'http://p:8000', bootstrapPort: 9000 }],
    ['http://p:8000 none', { url: 'http://p:8000' }],
    ['  http://p:8000   8998 ', { url: 'http://p:8000', bootstrapPort: 8998 }],
  ])('%s', (raw, expected) => {
    expect(parsePrefillArg(raw)).toEqual(expected);
  });
  it.each(['http://p:8000 0', 'http://p:8000 70000', 'http://p:8000 x', 'http://p:8000 1 2'])(
    'rejects %s',
    (raw) => {
      expect(() => parsePrefillArg(raw)).toThrow(ConfigError);
    },
  );
});

describe('--prefill flag', () => {
  it('takes an optional port after the URL, and keeps other flags working', () => {
    const c = config([
      '--mode',
      'pd',
      '--prefill',
      'http://p1:8000',
      '9001',
      '--prefill',
      'http://p2:8000',
      '--prefill=http://p3:8000',
      'none',
      '--decode',
      'http://d:8000',
    ]);
    expect(c.prefill.map(parsePrefillArg)).toEqual([
      { url: 'http://p1:8000', bootstrapPort: 9001 },
      { url: 'http://p2:8000' },
      { url: 'http://p3:8000' },
    ]);
    expect(c.decode).toEqual(['http://d:8000']);
  });
  it('rejects a bad bootstrap port with a clear error', () => {
    expect(() => config(['--prefill', 'http://p:8000', '99999'])).toThrow(/invalid bootstrap port/);
  });
  it('reads YAML as "URL PORT" strings or {url, bootstrapPort} objects', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cfg-'));
    const file = join(dir, 'c.yaml');
    writeFileSync(
      file,
      'mode: pd\nprefill:\n  - "http://p1:8000 9001"\n  - { url: "http://p2:8000", bootstrapPort: 9002 }\n  - url: http://p3:8000\n',
    );
    expect(config(['--config', file]).prefill.map(parsePrefillArg)).toEqual([
      { url: 'http://p1:8000', bootstrapPort: 9001 },
      { url: 'http://p2:8000', bootstrapPort: 9002 },
      { url: 'http://p3:8000' },
    ]);
  });
});
