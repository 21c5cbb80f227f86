/**
 * Every shipped way to start the router gives node the same flags (src/runtime/node-flags.ts): the
 * package's bin shebang, `npm start`, the container ENTRYPOINT; and the startup note names exactly
 * the flags a process was started without.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { missingNodeFlags, nodeFlagsNote, ROUTER_NODE_FLAGS } from '../../../src/runtime/node-flags.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');

describe('router node flags', () => {
  it('the bin shebang runs node with them', () => {
    const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string> };
    expect(pkg.bin['vllm-extproc-router']).toBe('dist/src/cli.js');
    const shebang = read('src/cli.ts').split('\n')[0];
    expect(shebang).toBe(`#!/usr/bin/env -S node ${ROUTER_NODE_FLAGS.join(' ')}`);
  });

  it('npm start runs node with them', () => {
    const pkg = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
    expect(pkg.scripts.start).toBe(`node ${ROUTER_NODE_FLAGS.join(' ')} dist/src/cli.js`);
  });

  it('the container entrypoint runs node with them', () => {
    const line = read('Dockerfile')
      .split('\n')
      .find((l) => l.startsWith('ENTRYPOINT '));
    expect(JSON.parse(line!.slice('ENTRYPOINT '.length))).toEqual([
      'node',
      ...ROUTER_NODE_FLAGS,
      'dist/src/cli.js',
    ]);
  });

  it('notes the flags a process was started without, and only those', () => {
    expect(missingNodeFlags([])).toEqual([...ROUTER_NODE_FLAGS]);
    expect(missingNodeFlags([...ROUTER_NODE_FLAGS])).toEqual([]);
    // Any value counts (an operator may choose other sizes); V8 accepts underscores too.
    expect(missingNodeFlags(['--min_semi_space_size=32', '--cpu-prof'])).toEqual([
      '--initial-old-space-size=128',
    ]);
    expect(nodeFlagsNote([])).toContain(`node ${ROUTER_NODE_FLAGS.join(' ')} dist/src/cli.js`);
    expect(nodeFlagsNote([...ROUTER_NODE_FLAGS])).toBeUndefined();
  });
});
