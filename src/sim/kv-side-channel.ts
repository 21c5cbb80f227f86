/**
 * The simulated prefill instance's KV side channel: one small HTTP server per prefill simulator that
 * plays the parts of vLLM a decode worker talks to directly (never the router's business except
 * `/query`):
 *
 *   GET  /query       Mooncake bootstrap server (`VLLM_MOONCAKE_BOOTSTRAP_PORT`, default 8998 in vLLM):
 *                     `{"<dp_rank>": {"engine_id": "...", "worker_addr": {"0": {"0": "host:port"}}}}`,
 *                     the shape of vLLM's MooncakeBootstrapServer (mooncake_utils.py).
 *   GET  /sim/pull?transfer_id=&engine_id=
 *                     Mooncake KV pull, standing in for the transfer engine's ZMQ exchange: waits until
 *                     the prefill leg carrying `transfer_id` has finished on the engine `engine_id`
 *                     (200), or fails: 409 when that transfer is held by another engine (the wrong DP
 *                     rank's engine id: real vLLM would time out), 410 when the prefill leg failed,
 *                     504 when no such transfer arrives within `pullTimeoutMs`.
 *   POST /sim/nixl/read {remote_engine_id, remote_block_ids}
 *                     NIXL side channel (`VLLM_NIXL_SIDE_CHANNEL_PORT`): the decode worker's handshake
 *                     and block read; 200 only for the engine id and blocks this prefill issued (once).
 *
 * Engine ids are fresh random ids per simulator start, one per DP rank, as vLLM generates an engine
 * id per engine: a restarted prefill has new ids, so a router holding the old ones fails its decodes.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';

interface Transfer {
  readonly engineId: string;
  state: 'running' | 'done' | 'failed';
  readonly waiters: Array<() => void>;
}

export interface KvSideChannelOptions {
  readonly host: string;
  /** Default 0 (ephemeral). */
  readonly port?: number;
  /** Data-parallel ranks (one engine id each). Default 1. */
  readonly dpSize?: number;
  /** Longest a pull waits for its transfer. Default 5000 ms. */
  readonly pullTimeoutMs?: number;
  /** Transfers and NIXL grants kept (oldest dropped). Default 10000. */
  readonly maxEntries?: number;
}

export class KvSideChannel {
  readonly engineIds: readonly string[];
  port = 0;
  private readonly server: Server;
  private readonly transfers = new Map<string, Transfer>();
  private readonly grants = new Map<string, string>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly pullTimeoutMs: number;
  private readonly maxEntries: number;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: KvSideChannelOptions) {
    const dp = opts.dpSize ?? 1;
    if (!Number.isInteger(dp) || dp < 1) throw new RangeError('dpSize must be an integer >= 1');
    this.engineIds = Array.from({ length: dp }, () => randomUUID());
    this.pullTimeoutMs = opts.pullTimeoutMs ?? 5000;
    this.maxEntries = opts.maxEntries ?? 10_000;
    this.server = createServer({ keepAliveTimeout: 30_000 }, (req, res) => this.handle(req, res));
  }

  get addr(): string {
    return `http://${this.opts.host}:${this.port}`;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port ?? 0, this.opts.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** A prefill leg with `transfer_id` started on DP rank `rank`. */
  beginTransfer(transferId: string, rank: number): void {
    this.bound(this.transfers);
    this.transfers.set(transferId, { engineId: this.engineIds[rank]!, state: 'running', waiters: [] });
  }

  /** The prefill leg ended: its KV is ready (`ok`) or will never be (`failed`). */
  endTransfer(transferId: string, ok: boolean): void {
    const t = this.transfers.get(transferId);
    if (!t || t.state !== 'running') return;
    t.state = ok ? 'done' : 'failed';
    for (const wake of t.waiters.splice(0)) wake();
  }

  /** NIXL: blocks this prefill hands to one decode read. */
  grantBlocks(engineId: string, blockIds: readonly number[]): void {
    this.bound(this.grants);
    this.grants.set(blockIds.join(','), engineId);
  }

  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      for (const t of this.timers) clearTimeout(t);
      this.timers.clear();
      for (const t of this.transfers.values()) for (const wake of t.waiters.splice(0)) wake();
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    return this.closing;
  }

  private bound(map: Map<string, unknown>): void {
    if (map.size < this.maxEntries) return;
    const oldest = map.keys().next();
    if (!oldest.done) map.delete(oldest.value);
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://side');
    if (req.method === 'GET' && url.pathname === '/query') return send(res, 200, this.queryAnswer());
    if (req.method === 'GET' && url.pathname === '/sim/pull') {
      return this.pull(
        res,
        url.searchParams.get('transfer_id') ?? '',
        url.searchParams.get('engine_id') ?? '',
      );
    }
    if (req.method === 'POST' && url.pathname === '/sim/nixl/read') return this.nixlRead(req, res);
    req.resume();
    send(res, 404, { error: `no route ${req.method ?? ''} ${url.pathname}` });
  }

  private queryAnswer(): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    this.engineIds.forEach((engineId, rank) => {
      out[String(rank)] = {
        engine_id: engineId,
        worker_addr: { '0': { '0': `${this.opts.host}:${this.port}` } },
      };
    });
    return out;
  }

  private pull(res: ServerResponse, transferId: string, engineId: string): void {
    if (!this.engineIds.includes(engineId)) {
      return send(res, 404, { error: `engine ${engineId} is not served here` });
    }
    let timer: NodeJS.Timeout | undefined;
    const answer = (): boolean => {
      const t = this.transfers.get(transferId);
      if (!t) return false;
      if (t.engineId !== engineId) {
        send(res, 409, { error: `transfer ${transferId} is held by engine ${t.engineId}, not ${engineId}` });
      } else if (t.state === 'failed') send(res, 410, { error: `transfer ${transferId}: prefill failed` });
      else if (t.state === 'done') send(res, 200, { ok: true });
      else {
        t.waiters.push(check);
        return true;
      }
      if (timer) {
        clearTimeout(timer);
        this.timers.delete(timer);
      }
      return true;
    };
    const check = (): void => {
      if (res.writableEnded || res.destroyed) return;
      if (this.closing) return void res.destroy();
      if (!answer()) poll();
    };
    // The decode leg may arrive before the prefill leg (vLLM's proxy sends both at once): poll for the
    // transfer to appear, bounded by pullTimeoutMs.
    const deadline = Date.now() + this.pullTimeoutMs;
    const poll = (): void => {
      if (Date.now() >= deadline) {
        send(res, 504, { error: `no transfer ${transferId} within ${this.pullTimeoutMs} ms` });
        return;
      }
      timer = setTimeout(() => {
        if (timer) this.timers.delete(timer);
        timer = undefined;
        check();
      }, 5);
      timer.unref();
      this.timers.add(timer);
    };
    res.on('close', () => {
      if (timer) {
        clearTimeout(timer);
        this.timers.delete(timer);
      }
    });
    check();
  }

  private nixlRead(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      let body: { remote_engine_id?: unknown; remote_block_ids?: unknown };
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as typeof body;
      } catch {
        return send(res, 400, { error: 'invalid JSON' });
      }
      const ids = Array.isArray(body.remote_block_ids) ? body.remote_block_ids.join(',') : undefined;
      const engine = ids === undefined ? undefined : this.grants.get(ids);
      if (engine === undefined || engine !== body.remote_engine_id) {
        return send(res, 404, { error: 'no such blocks granted to this engine id' });
      }
      this.grants.delete(ids!);
      send(res, 200, { ok: true });
    });
  }
}

function send(res: ServerResponse, status: number, body: unknown): void {
  if (res.headersSent || res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}
