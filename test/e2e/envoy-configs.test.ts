/**
 * The real Envoy 1.40 accepts every reference configuration shipped in envoy/ (`--mode validate`).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { findEnvoy } from '../../src/envoy/envoy-process.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

describe('reference Envoy configurations', () => {
  it.each(['envoy/envoy.yaml', 'envoy/envoy-replicas.yaml', 'envoy/envoy-replicas-fail-open.yaml'])(
    '%s passes envoy --mode validate',
    (file) => {
      const r = spawnSync(findEnvoy(), ['--mode', 'validate', '-c', path.join(ROOT, file), '-l', 'error'], {
        encoding: 'utf8',
        timeout: 60_000,
      });
      expect(r.status, r.stdout + r.stderr).toBe(0);
      expect(r.stdout + r.stderr).toMatch(/OK/);
    },
  );
});
