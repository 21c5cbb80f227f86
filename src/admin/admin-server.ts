/**
 * Admin HTTP API on --admin-port:
 *   GET    /metrics   Prometheus text (prom-client)
 *   GET    /healthz   liveness: 200 while the process runs
 *   GET    /readyz    200 when every pool the mode needs has a member and we are not draining; else 503
 *   GET    /workers   every pool member: role, url, endpoint, zmqAddress, generation, load, processed,
 *                     healthy, expiresInMs
 *   POST   /workers   {role, url, zmqAddress?, permanent?, bootstrapPort?, metadata?}: register or
 *                     heartbeat a worker (`bootstrapPort`: a prefill instance's Mooncake bootstrap
 *                     server port; `metadata`: flat scalars, e.g. {"data_parallel_size": 8,
 *                     "metrics_port": 9100, "kv_events_port": 5557})
 *   DELETE /workers?role=&url=   deregister
 *   POST   /workers/cordon?url=      no new requests to the worker at url (every role there)
 *   POST   /workers/uncordon?url=    lifts it
 *   POST   /workers/sleep?url=&level=1|2&timeout_ms=   cordon, drain, then vLLM's POST /sleep
 *   POST   /workers/wake_up?url=     vLLM's POST /wake_up (after a level-2 sleep: the weights, their
 *                                    reload, the KV cache), then back in selection (worker-sleep.ts)
 * Writes need `Authorization: Bearer <token>` when a token is configured, and a peer address inside
 * --discovery-allow when that is set. The GET routes answer HEAD too; a 405 names the methods in Allow.
 */
import http from 'node:http';
import { timingSafeEqual } from 'node:crypto';
import type { Logger } from 'pino';
import { isValidZmqAddress } from '../discovery/registration-message.js';
import { RouterError } from '../request/router-error.js';
import { isRole, type Role } from '../workers/role.js';
import { dataParallelSizeOf, MAX_DATA_PARALLEL_SIZE } from '../workers/data-parallel.js';

export interface WorkerView {
  role: Role;
  url: string;
  endpoint: string;
  zmqAddress: string | null;
  generation: number;
  load: number;
  processed: number;
  healthy: boolean;
  /** null for static workers (never expire). */
  expiresInMs: number | null;
  [extra: string]: unknown;
}

export interface Readiness {
  ready: boolean;
  detail: Record<string, unknown>;
}

export interface WorkerRegistrationRequest {
  role: Role;
  url: string;
  zmqAddress?: string;
  permanent?: boolean;
  bootstrapPort?: number;
  /** Flat scalars kept as the worker's metadata (validated: validateRegistration). */
  metadata?: Record<string, string | number | boolean | null>;
}

export interface AdminBackend {
  metrics(): Promise<string>;
  metricsContentType: string;
  readiness(): Readiness;
  workers(): WorkerView[];
  /** Throws AdminInputError for bad registrations. */
  register(req: WorkerRegistrationRequest): Promise<{ generation: number; event: string }>;
  deregister(role: Role, url: string): boolean;
  /** CIDR check of the peer address for writes. */
  peerAllowed(peer: string): boolean;
  /** Cordon, sleep and wake of the workers at one URL (admin/worker-sleep.ts). */
  readonly workerSleep?: WorkerSleepOps;
}

export interface WorkerSleepOps {
  cordon(url: string, on: boolean): string[];
  sleep(url: string, level: 1 | 2, timeoutMs?: number): Promise<unknown>;
  wakeUp(url: string): Promise<unknown>;
}

/** Stable codes of the admin API's error answers, with their HTTP status. */
export const ADMIN_ERROR_STATUS = {
  invalid_registration: 400,
  invalid_request: 400,
  dns_failed: 400,
  unauthorized: 401,
  forbidden: 403,
  worker_not_allowed: 403,
  not_found: 404,
  method_not_allowed: 405,
  registration_conflict: 409,
  worker_busy: 409,
  body_too_large: 413,
  worker_error: 502,
} as const;
export type AdminErrorCode = keyof typeof ADMIN_ERROR_STATUS;

/** An admin request the router refuses: answered as JSON `{error: {message, type, code}}`. */
export class AdminInputError extends RouterError<AdminErrorCode> {
  constructor(message: string, code: AdminErrorCode = 'invalid_registration') {
    super(code, ADMIN_ERROR_STATUS[code], message);
  }
}

const MAX_ADMIN_BODY = 64 * 1024;

/** The methods each admin path answers (a 405 names them in `Allow`; HEAD is answered as GET). */
export const ADMIN_ALLOWED_METHODS: Readonly<Record<string, string>> = {
  '/metrics': 'GET, HEAD',
  '/healthz': 'GET, HEAD',
  '/readyz': 'GET, HEAD',
  '/workers': 'GET, HEAD, POST, DELETE',
  '/workers/cordon': 'POST',
  '/workers/uncordon': 'POST',
  '/workers/sleep': 'POST',
  '/workers/wake_up': 'POST',
};

export class AdminServer {
  private readonly server: http.Server;
  private closed = false;

  constructor(
    private readonly backend: AdminBackend,
    private readonly opts: { host: string; port: number; token: string; logger: Logger },
  ) {
    this.server = http.createServer((req, res) => {
      this.handle(req, res).catch((err) => {
        opts.logger.error({ err }, 'admin request failed');
        if (!res.headersSent)
          json(res, 500, new RouterError('internal_error', 500, 'internal error').toJSON());
        else res.destroy();
      });
    });
    this.server.keepAliveTimeout = 5000;
  }

  async start(): Promise<number> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port, this.opts.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    const addr = this.server.address();
    return typeof addr === 'object' && addr ? addr.port : this.opts.port;
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    try {
      await this.route(req, res);
    } catch (err) {
      if (!(err instanceof AdminInputError)) throw err;
      req.resume();
      json(res, err.status, err.toJSON());
    }
  }

  private async route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let url: URL;
    const target = req.url ?? '/';
    try {
      // An origin-form target is a path: against a base, `//workers` would be read as a host
      // ("workers") with the path `/`.
      url = target.startsWith('/') ? new URL(`http://admin${target}`) : new URL(target, 'http://admin');
    } catch {
      throw new AdminInputError(`malformed request target ${JSON.stringify(req.url)}`, 'invalid_request');
    }
    // HEAD is GET without the body (RFC 9110 9.3.2; node:http leaves the body out): `curl -I`,
    // `wget --spider` probes.
    const route = `${req.method === 'HEAD' ? 'GET' : req.method} ${url.pathname}`;
    switch (route) {
      case 'GET /metrics': {
        const body = await this.backend.metrics();
        res.writeHead(200, { 'content-type': this.backend.metricsContentType });
        res.end(body);
        return;
      }
      case 'GET /healthz':
        return json(res, 200, { status: 'ok' });
      case 'GET /readyz': {
        const r = this.backend.readiness();
        return json(res, r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not_ready', ...r.detail });
      }
      case 'GET /workers':
        return json(res, 200, this.backend.workers());
      case 'POST /workers':
      case 'DELETE /workers':
        return this.write(req, res, url);
      case 'POST /workers/cordon':
      case 'POST /workers/uncordon':
      case 'POST /workers/sleep':
      case 'POST /workers/wake_up':
        return this.sleepOp(req, res, url);
      default: {
        const allowed = Object.hasOwn(ADMIN_ALLOWED_METHODS, url.pathname)
          ? ADMIN_ALLOWED_METHODS[url.pathname]
          : undefined;
        if (allowed === undefined) throw new AdminInputError(`no admin route ${url.pathname}`, 'not_found');
        res.setHeader('allow', allowed); // a 405 must name the methods (RFC 9110 15.5.6)
        throw new AdminInputError(`${req.method} not allowed on ${url.pathname}`, 'method_not_allowed');
      }
    }
  }

  private authorise(req: http.IncomingMessage, what: string): void {
    const peer = req.socket.remoteAddress ?? '';
    if (this.opts.token && !tokenMatches(req.headers.authorization, this.opts.token))
      throw new AdminInputError('missing or wrong bearer token', 'unauthorized');
    if (!this.backend.peerAllowed(peer))
      throw new AdminInputError(`${what} from ${peer} are not allowed`, 'forbidden');
  }

  private async sleepOp(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    this.authorise(req, 'worker operations');
    req.resume();
    const ops = this.backend.workerSleep;
    if (!ops) throw new AdminInputError('worker operations are not available', 'not_found');
    const target = url.searchParams.get('url');
    if (!target) throw new AdminInputError(`${url.pathname} needs ?url=<worker url>`, 'invalid_request');
    switch (url.pathname) {
      case '/workers/cordon':
      case '/workers/uncordon': {
        const on = url.pathname === '/workers/cordon';
        const workers = ops.cordon(target, on);
        this.audit(req, { url: target, workers }, on ? 'worker cordoned' : 'worker uncordoned');
        return json(res, 200, { url: target, cordoned: on, workers });
      }
      case '/workers/sleep': {
        const level = url.searchParams.get('level') ?? '1';
        if (level !== '1' && level !== '2')
          throw new AdminInputError(`level must be 1 or 2, got ${level}`, 'invalid_request');
        const rawTimeout = url.searchParams.get('timeout_ms');
        // Decimal digits only: Number() reads '' as 0 (an unset `timeout_ms=$T`), and 0x10, 1e3, ' 5'.
        const timeout =
          rawTimeout === null ? undefined : /^\d{1,7}$/.test(rawTimeout) ? Number(rawTimeout) : NaN;
        if (timeout !== undefined && !(Number.isInteger(timeout) && timeout >= 0 && timeout <= 3_600_000))
          throw new AdminInputError(
            `timeout_ms must be an integer in [0, 3600000], got ${JSON.stringify(rawTimeout)}`,
            'invalid_request',
          );
        const slept = await ops.sleep(target, level === '1' ? 1 : 2, timeout);
        this.audit(req, { url: target, level: Number(level) }, 'worker put to sleep');
        return json(res, 200, slept);
      }
      default: {
        const woken = await ops.wakeUp(target);
        this.audit(req, { url: target }, 'worker woken up');
        return json(res, 200, woken);
      }
    }
  }

  /**
   * One info line per admin write that changed the fleet (not per heartbeat), with the peer that
   * asked: like ZMQ and Kubernetes discovery's lines, so a worker that came or went can be traced.
   */
  private audit(req: http.IncomingMessage, fields: Record<string, unknown>, msg: string): void {
    this.opts.logger.info({ ...fields, peer: req.socket.remoteAddress }, `${msg} via admin API`);
  }

  private async write(req: http.IncomingMessage, res: http.ServerResponse, url: URL): Promise<void> {
    this.authorise(req, 'registrations');
    if (req.method === 'DELETE') {
      const role = url.searchParams.get('role');
      const workerUrl = url.searchParams.get('url');
      if (!isRole(role) || !workerUrl)
        throw new AdminInputError('DELETE /workers needs ?role=prefill|decode|regular&url=');
      req.resume();
      const removed = this.backend.deregister(role, workerUrl);
      if (removed) this.audit(req, { role, url: workerUrl }, 'worker deregistered');
      return json(res, removed ? 200 : 404, { removed });
    }
    const reg = validateRegistration(await readJson(req));
    const result = await this.backend.register(reg);
    if (result.event !== 'heartbeat') {
      const { generation, event } = result;
      this.audit(req, { role: reg.role, url: reg.url, generation, event }, 'worker registered');
    }
    return json(res, 200, result);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}

const REGISTRATION_FIELDS = ['role', 'url', 'zmqAddress', 'permanent', 'bootstrapPort', 'metadata'];

function validateRegistration(body: unknown): WorkerRegistrationRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new AdminInputError(
      'body must be a JSON object {role, url, zmqAddress?, permanent?, bootstrapPort?, metadata?}',
    );
  }
  // A field the API does not take would be dropped with a 200: a P2P NCCL decode registered with
  // vLLM's `zmq_address` spelling gets request ids naming its HTTP port instead of its KV port.
  const unknown = Object.keys(body).filter((k) => !REGISTRATION_FIELDS.includes(k));
  if (unknown.length > 0) {
    const hints = unknown.map((k) => {
      const field = REGISTRATION_FIELDS.find((f) => f.toLowerCase() === k.replaceAll('_', '').toLowerCase());
      return field !== undefined ? `${JSON.stringify(k)} (did you mean "${field}"?)` : JSON.stringify(k);
    });
    throw new AdminInputError(
      `unknown field ${hints.join(', ')}: the body is {${REGISTRATION_FIELDS.join(', ')}}; ` +
        'facts about the worker (data_parallel_size, metrics_port, ...) go in "metadata"',
    );
  }
  const { role, url, zmqAddress, permanent, bootstrapPort, metadata } = body as Record<string, unknown>;
  if (!isRole(role)) throw new AdminInputError('"role" must be prefill, decode or regular');
  if (typeof url !== 'string' || url.length === 0 || url.length > 512)
    throw new AdminInputError('"url" must be a string');
  if (
    zmqAddress !== undefined &&
    (typeof zmqAddress !== 'string' || zmqAddress.length > 512 || !isValidZmqAddress(zmqAddress))
  ) {
    // As a heartbeat's zmq_address (it becomes the P/D request ids' and headers' address).
    throw new AdminInputError('"zmqAddress" must be host:port (or a MoRI-IO key:value list)');
  }
  if (permanent !== undefined && typeof permanent !== 'boolean')
    throw new AdminInputError('"permanent" must be a boolean');
  if (
    bootstrapPort !== undefined &&
    !(
      typeof bootstrapPort === 'number' &&
      Number.isInteger(bootstrapPort) &&
      bootstrapPort >= 1 &&
      bootstrapPort <= 65535
    )
  ) {
    throw new AdminInputError('"bootstrapPort" must be an integer port (1-65535)');
  }
  const meta = metadata === undefined ? undefined : validateMetadata(metadata);
  return {
    role,
    url,
    zmqAddress,
    permanent,
    ...(bootstrapPort !== undefined ? { bootstrapPort } : {}),
    ...(meta !== undefined ? { metadata: meta } : {}),
  };
}

const MAX_METADATA_KEYS = 32;

/** A registration's metadata: at most 32 keys of flat scalars; known fields checked (see the header). */
function validateMetadata(raw: unknown): Record<string, string | number | boolean | null> {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new AdminInputError('"metadata" must be a JSON object of scalars');
  const entries = Object.entries(raw as Record<string, unknown>);
  if (entries.length > MAX_METADATA_KEYS)
    throw new AdminInputError(`"metadata" may hold at most ${MAX_METADATA_KEYS} keys`);
  const out: Record<string, string | number | boolean | null> = {};
  for (const [key, value] of entries) {
    if (key.length === 0 || key.length > 64)
      throw new AdminInputError('"metadata" keys must be 1-64 characters');
    if (
      typeof value === 'string'
        ? value.length > 512
        : !(value === null || ['number', 'boolean'].includes(typeof value))
    )
      throw new AdminInputError(`"metadata.${key}" must be a scalar (a string of at most 512 characters)`);
    // JSON.parse reads 1e400 as Infinity, which /workers would list as null.
    if (typeof value === 'number' && !Number.isFinite(value))
      throw new AdminInputError(`"metadata.${key}" is a number too large to keep`);
    out[key] = value as string | number | boolean | null;
  }
  if (out.data_parallel_size !== undefined && dataParallelSizeOf(out) === undefined)
    throw new AdminInputError(`"metadata.data_parallel_size" must be an integer 1-${MAX_DATA_PARALLEL_SIZE}`);
  for (const port of ['metrics_port', 'kv_events_port', 'bootstrap_port']) {
    const v = out[port];
    if (v !== undefined && !(typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65535))
      throw new AdminInputError(`"metadata.${port}" must be an integer port (1-65535)`);
  }
  return out;
}

async function readJson(req: http.IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_ADMIN_BODY)
      throw new AdminInputError(`body larger than ${MAX_ADMIN_BODY} bytes`, 'body_too_large');
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new AdminInputError('body is not valid JSON');
  }
}

function tokenMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer\s+(.+)$/i.exec(header ?? '');
  if (!m) return false;
  const a = Buffer.from(m[1] as string);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

function json(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
