/**
 * A simulated `vllm serve --data-parallel-size N` with internal load balancing: N engines, each with
 * its own queue, prefix cache, metrics and KV-event publisher, behind ONE HTTP server.
 *
 * Each engine is a whole simulator (simulator.ts) on its own loopback port; this front is what clients
 * and the router see, and forwards each request to one engine as vLLM's API server does:
 * - a generation request (completions, chat, responses, messages, embeddings) goes to the rank its
 *   `X-data-parallel-rank` header names (out of range or not a number: 400, as vLLM refuses it), else
 *   to the rank vLLM's own balancer picks: the lowest `waiting * 4 + running`, the lowest rank on a tie
 *   (vllm/v1/engine/core_client.py DPLBAsyncMPClient). That balancer reads queues, not caches: the
 *   reason a router schedules the ranks itself (workers/data-parallel.ts);
 * - `GET /metrics` is every engine's page merged, each engine's samples labelled `engine="<rank>"`
 *   (vLLM's per-engine label), one HELP/TYPE per family; with `sglangMetrics`, SGLang's page
 *   (`python -m sglang.launch_server --dp-size N`), each rank's series labelled `dp_rank` instead;
 * - admin writes (`/sleep`, `/wake_up`, `/collective_rpc`, `/pause`, `/resume`, cache resets, LoRA
 *   loads) go to every engine, and the answer is rank 0's; every other request (health, model list,
 *   tokenize) is rank 0's, uncounted.
 * KV events: each engine publishes on its own endpoint, stamped with its rank (`kvEvents` of the
 * options is given to rank r with `dataParallelRank: r`; a fixed endpoint port is offset by the rank,
 * as vLLM does).
 *
 * `close()` closes the front, then every engine; nothing is left behind.
 */
import {
  createServer,
  request as httpRequest,
  Agent,
  type IncomingMessage,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { startSimulator, type Simulator, type SimulatorOptions } from './simulator.js';

export interface DpSimulatorOptions extends SimulatorOptions {
  /** Engines (data-parallel ranks), 1..64. */
  readonly dataParallelSize: number;
}

export interface DpSimulator {
  readonly id: string;
  readonly url: string;
  readonly port: number;
  /** The engines, by rank. */
  readonly ranks: readonly Simulator[];
  /** Generation requests per rank that named it in `X-data-parallel-rank`. */
  readonly pinned: readonly number[];
  /** Generation requests per rank that the front's own balancer placed there. */
  readonly balanced: readonly number[];
  /** Generation requests refused for a bad rank header. */
  readonly badRank: number;
  close(): Promise<void>;
}

const RANK_HEADER = 'x-data-parallel-rank';
const BROADCAST = new Set([
  '/sleep',
  '/wake_up',
  '/collective_rpc',
  '/reset_prefix_cache',
  '/reset_mm_cache',
  '/reset_encoder_cache',
  '/pause',
  '/resume',
  '/v1/load_lora_adapter',
  '/v1/unload_lora_adapter',
]);
/** What the engines generate for (the simulator's generation and pooling paths); the rest is rank 0's. */
const GENERATION = new Set([
  '/v1/completions',
  '/v1/chat/completions',
  '/v1/responses',
  '/v1/messages',
  '/v1/embeddings',
]);
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host']);

export async function startDpSimulator(opts: DpSimulatorOptions): Promise<DpSimulator> {
  const size = opts.dataParallelSize;
  if (!Number.isInteger(size) || size < 1 || size > 64)
    throw new RangeError('dataParallelSize must be 1..64');
  const { dataParallelSize: _n, port: frontPort, register: _r, ...engineOpts } = opts;
  const id = opts.id ?? 'sim-dp';
  const settled = await Promise.allSettled(
    Array.from({ length: size }, (_, rank) =>
      startSimulator({
        ...engineOpts,
        id: `${id}-dp${rank}`,
        port: 0,
        ...(opts.kvEvents !== undefined ? { kvEvents: rankKvEvents(opts.kvEvents, rank) } : {}),
        // SGLang labels each rank's scheduler series `dp_rank` itself (no `engine` label).
        ...(opts.sglangMetrics !== undefined
          ? { sglangMetrics: { ...opts.sglangMetrics, dpRank: rank } }
          : {}),
      }),
    ),
  );
  const ranks = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failed) {
    await Promise.all(ranks.map((r) => r.close()));
    throw failed.reason;
  }
  const front = new DpFront(id, ranks, opts.sglangMetrics === undefined);
  try {
    await front.listen(opts.host ?? '127.0.0.1', frontPort ?? 0);
  } catch (err) {
    await Promise.all(ranks.map((r) => r.close()));
    throw err;
  }
  return front;
}

/** Rank r's publisher options: its rank stamp, and a fixed port offset by the rank (vLLM's rule). */
function rankKvEvents(
  kv: NonNullable<SimulatorOptions['kvEvents']>,
  rank: number,
): NonNullable<SimulatorOptions['kvEvents']> {
  const offset = (endpoint: string | undefined): string | undefined => {
    if (endpoint === undefined) return undefined;
    const m = /^(.*):(\d+)$/.exec(endpoint);
    if (m === null || m[2] === '0') return endpoint;
    return `${m[1]}:${Number(m[2]) + rank}`;
  };
  const endpoint = offset(kv.endpoint);
  const replayEndpoint = offset(kv.replayEndpoint);
  return {
    ...kv,
    ...(endpoint !== undefined ? { endpoint } : {}),
    ...(replayEndpoint !== undefined ? { replayEndpoint } : {}),
    dataParallelRank: rank,
  };
}

class DpFront implements DpSimulator {
  url = '';
  port = 0;
  readonly pinned: number[];
  readonly balanced: number[];
  badRank = 0;
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 256 });
  private readonly server = createServer((req, res) => this.onRequest(req, res));
  private closing: Promise<void> | undefined;

  constructor(
    readonly id: string,
    readonly ranks: readonly Simulator[],
    /** Label each engine's merged series `engine="<rank>"` (vLLM); false: they carry SGLang's `dp_rank`. */
    private readonly labelEngines: boolean,
  ) {
    this.pinned = ranks.map(() => 0);
    this.balanced = ranks.map(() => 0);
    this.server.keepAliveTimeout = 5000;
  }

  listen(host: string, port: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        this.port = (this.server.address() as AddressInfo).port;
        this.url = `http://${host}:${this.port}`;
        resolve();
      });
    });
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await new Promise<void>((resolve) => {
        this.server.close(() => resolve());
        this.server.closeAllConnections();
      });
      this.agent.destroy();
      await Promise.all(this.ranks.map((r) => r.close()));
    })();
    return this.closing;
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0] as string;
    if (req.method === 'GET' && path === '/metrics') {
      void this.metrics(res);
      return;
    }
    if (req.method === 'POST' && BROADCAST.has(path)) {
      void this.broadcast(req, res);
      return;
    }
    if (req.method !== 'POST' || !GENERATION.has(path)) {
      this.forward(req, res, 0);
      return;
    }
    const header = req.headers[RANK_HEADER];
    const raw = Array.isArray(header) ? header[0] : header;
    if (raw !== undefined) {
      const rank = /^\s*\d{1,3}\s*$/.test(raw) ? Number(raw) : NaN;
      if (!(rank >= 0 && rank < this.ranks.length)) {
        this.badRank += 1;
        req.resume();
        const body = JSON.stringify({
          error: {
            message: `X-data-parallel-rank ${raw} out of range [0, ${this.ranks.length})`,
            type: 'BadRequestError',
            code: 400,
          },
        });
        res.writeHead(400, { 'content-type': 'application/json' }).end(body);
        return;
      }
      this.pinned[rank] = (this.pinned[rank] ?? 0) + 1;
      this.forward(req, res, rank);
      return;
    }
    const rank = this.leastBusy();
    this.balanced[rank] = (this.balanced[rank] ?? 0) + 1;
    this.forward(req, res, rank);
  }

  /** vLLM's internal balancer: the lowest `waiting * 4 + running`, the lowest rank on a tie. */
  private leastBusy(): number {
    let best = 0;
    let bestScore = Infinity;
    this.ranks.forEach((r, rank) => {
      const waiting = r.waiting();
      const running = Math.max(r.running(), r.inFlight() - waiting);
      const score = waiting * 4 + running;
      if (score < bestScore) {
        best = rank;
        bestScore = score;
      }
    });
    return best;
  }

  private forward(req: IncomingMessage, res: ServerResponse, rank: number): void {
    const target = this.ranks[rank] as Simulator;
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) {
      if (v !== undefined && !HOP_BY_HOP.has(k) && k !== RANK_HEADER) headers[k] = v;
    }
    const upstream = httpRequest(
      `${target.url}${req.url ?? '/'}`,
      { method: req.method, headers, agent: this.agent },
      (up) => {
        const out: Record<string, string | string[]> = {};
        for (const [k, v] of Object.entries(up.headers))
          if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
        res.writeHead(up.statusCode ?? 502, out);
        up.pipe(res);
        up.on('error', () => res.destroy());
      },
    );
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' });
      res.end();
    });
    // The client went away before the answer ended: so does the engine's request (vLLM aborts it).
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  }

  private async broadcast(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const answers = await Promise.all(
      this.ranks.map((r) =>
        fetch(`${r.url}${req.url ?? '/'}`, {
          method: 'POST',
          headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
          ...(body.length > 0 ? { body } : {}),
        }).then(async (a) => ({
          status: a.status,
          text: await a.text(),
          type: a.headers.get('content-type'),
        })),
      ),
    );
    const first = answers[0] as { status: number; text: string; type: string | null };
    res.writeHead(first.status, first.type !== null ? { 'content-type': first.type } : {}).end(first.text);
  }

  private async metrics(res: ServerResponse): Promise<void> {
    try {
      const pages = await Promise.all(this.ranks.map((r) => fetch(`${r.url}/metrics`).then((a) => a.text())));
      res
        .writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' })
        .end(mergePages(pages, this.labelEngines));
    } catch {
      res.writeHead(500).end();
    }
  }
}

/**
 * Every engine's page as one: per family its HELP/TYPE once, then each engine's samples, labelled
 * `engine="<rank>"` (vLLM's label) unless `labelEngines` is false (the pages carry their own rank).
 */
export function mergePages(pages: readonly string[], labelEngines = true): string {
  const families = new Map<string, { head: string[]; samples: string[] }>();
  const familyOf = (name: string): { head: string[]; samples: string[] } => {
    let f = families.get(name);
    if (f === undefined) families.set(name, (f = { head: [], samples: [] }));
    return f;
  };
  pages.forEach((page, rank) => {
    let current = '';
    for (const line of page.split('\n')) {
      if (line === '') continue;
      const comment = /^# (HELP|TYPE) (\S+)/.exec(line);
      if (comment !== null) {
        current = comment[2] as string;
        if (rank === 0) familyOf(current).head.push(line);
        continue;
      }
      if (line.startsWith('#')) continue;
      familyOf(current).samples.push(labelEngines ? withEngine(line, rank) : line);
    }
  });
  let out = '';
  for (const f of families.values()) out += [...f.head, ...f.samples].join('\n') + '\n';
  return out;
}

/** A sample line with its `engine` label set to `rank` (added when it has none). */
function withEngine(line: string, rank: number): string {
  const brace = line.indexOf('{');
  const space = line.indexOf(' ');
  if (brace === -1 || (space !== -1 && space < brace)) {
    return `${line.slice(0, space)}{engine="${rank}"}${line.slice(space)}`;
  }
  const close = line.indexOf('}', brace);
  const labels = line.slice(brace + 1, close);
  const relabelled = /(^|,)engine="[^"]*"/.test(labels)
    ? labels.replace(/(^|,)engine="[^"]*"/, `$1engine="${rank}"`)
    : labels === ''
      ? `engine="${rank}"`
      : `engine="${rank}",${labels}`;
  return `${line.slice(0, brace + 1)}${relabelled}${line.slice(close)}`;
}
