/**
 * Helpers for lifecycle tests: the real CLI (`src/cli.ts`) as a child process, and a gRPC health
 * client.
 *
 * The child runs `node --import tsx src/cli.ts <args>`; pino writes one JSON line per log record on
 * stdout, and the line with msg 'vllm-extproc-router started' carries the bound ports. Every line is
 * kept (bounded to the last 500) so a test can look for the 'draining' / 'closing' records. `kill()`
 * sends SIGKILL if the child is still alive and is idempotent; tests call it in their cleanup.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { protoPath } from 'grpc-health-check';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const MAX_LINES = 500;
const START_TIMEOUT_MS = 30_000;

export interface LogLine {
  msg?: string;
  [key: string]: unknown;
}

export interface RouterChild {
  readonly process: ChildProcess;
  readonly grpcPort: number;
  readonly adminPort: number;
  readonly discovery: string | undefined;
  readonly lines: LogLine[];
  /** Resolves with the exit code (null when killed by a signal) and the signal. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  kill(): Promise<void>;
}

export async function startRouterChild(args: string[]): Promise<RouterChild> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: LogLine[] = [];
  let stderr = '';
  let partial = '';
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  const started = new Promise<LogLine>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`router did not start: ${stderr}`)),
      START_TIMEOUT_MS,
    ).unref();
    child.stdout?.on('data', (d: Buffer) => {
      partial += d.toString();
      const parts = partial.split('\n');
      partial = parts.pop() ?? '';
      for (const text of parts) {
        if (!text.trim()) continue;
        let line: LogLine;
        try {
          line = JSON.parse(text) as LogLine;
        } catch {
          line = { msg: text };
        }
        lines.push(line);
        if (lines.length > MAX_LINES) lines.shift();
        if (line.msg === 'vllm-extproc-router started') {
          clearTimeout(timer);
          resolve(line);
        }
      }
    });
    child.stderr?.on('data', (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-8192);
    });
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`router exited with ${code} before starting: ${stderr}`));
    });
  });
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
  };
  let line: LogLine;
  try {
    line = await started;
  } catch (err) {
    await kill();
    throw err;
  }
  return {
    process: child,
    grpcPort: Number(line.grpcPort),
    adminPort: Number(line.adminPort),
    discovery: typeof line.discovery === 'string' ? line.discovery : undefined,
    lines,
    exited,
    kill,
  };
}

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

export interface HealthClient {
  check(service: string): Promise<ServingStatus>;
  close(): void;
}

/** grpc.health.v1.Health client for `127.0.0.1:<port>`. */
export function healthClient(port: number): HealthClient {
  const def = protoLoader.loadSync(protoPath, { keepCase: true, enums: String });
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
  };
  const client = new pkg.grpc.health.v1.Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const check = client.check as unknown as (
    this: grpc.Client,
    req: { service: string },
    opts: grpc.CallOptions,
    cb: (err: grpc.ServiceError | null, res?: { status: ServingStatus }) => void,
  ) => void;
  return {
    check: (service) =>
      new Promise((resolve, reject) =>
        check.call(client, { service }, { deadline: Date.now() + 5000 }, (err, res) =>
          err ? reject(err) : resolve(res?.status ?? 'UNKNOWN'),
        ),
      ),
    close: () => client.close(),
  };
}
