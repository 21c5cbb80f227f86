/**
 * `npm run sim -- --role prefill --kv-connector mooncake` binds its Mooncake bootstrap server
 * (`GET /query`) on an ephemeral port that nothing reports: the router's `--prefill URL PORT`, the admin
 * API's `bootstrapPort` and a ZMQ heartbeat (router default 8998) could not name it, so a CLI-started
 * Mooncake prefill instance never became ready (`bootstrap.state: unreachable`, /readyz 503).
 * `--bootstrap-port N` binds it on N, logs it, and the heartbeat carries it as `bootstrap_port`.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { afterEach, describe, expect, it } from 'vitest';
import { freePorts } from '../../support/free-ports.js';
import { decodeHeartbeat } from '../../../src/discovery/registration-message.js';
import { Router as ZmqRouter } from 'zeromq';

const children: ChildProcess[] = [];
afterEach(async () => {
  await Promise.all(
    children.splice(0).map(
      (c) =>
        new Promise<void>((resolve) => {
          if (c.exitCode !== null || c.signalCode !== null) return resolve();
          c.once('exit', () => resolve());
          c.kill('SIGTERM');
        }),
    ),
  );
});

function startSimCli(args: string[]): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/sim/cli.ts', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let stderr = '';
  child.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`sim exited ${code}: ${stderr}`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const rec = JSON.parse(line) as Record<string, unknown>;
      if (rec.msg === 'simulator listening') resolve(rec);
    });
  });
}

describe('sim CLI: a Mooncake prefill instance on a known bootstrap port', () => {
  it('binds --bootstrap-port, logs it and announces it in its heartbeat', async () => {
    const [http, bootstrap, zmq] = await freePorts(3);
    const sock = new ZmqRouter();
    await sock.bind(`tcp://127.0.0.1:${zmq}`);
    try {
      const line = await startSimCli([
        '--role',
        'prefill',
        '--kv-connector',
        'mooncake',
        '--host',
        '127.0.0.1',
        '--port',
        String(http),
        '--bootstrap-port',
        String(bootstrap),
        '--register',
        `tcp://127.0.0.1:${zmq}`,
        '--register-interval-ms',
        '200',
      ]);
      expect(line.bootstrapPort).toBe(bootstrap);
      const q = await fetch(`http://127.0.0.1:${bootstrap}/query`);
      expect(q.status).toBe(200);
      const [, frame] = (await sock.receive()) as Buffer[];
      const reg = decodeHeartbeat(frame!);
      expect(reg.ok && reg.metadata.bootstrap_port).toBe(bootstrap);
    } finally {
      sock.close();
    }
  });
});
