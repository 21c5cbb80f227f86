/**
 * Load drivers: send a workload's requests to ONE base URL on 127.0.0.1 with undici (a real HTTP
 * client with a keep-alive connection pool) and measure each response at the client.
 *
 * - Closed loop (`runClosedLoop`): `concurrency` virtual users; each sends the next request as soon as
 *   its previous one ended (so throughput = concurrency / latency). Requests go out in workload order.
 * - Open loop (`runOpenLoop`): Poisson arrivals at `ratePerSec` (exponential gaps from a seeded
 *   mulberry32), regardless of how many are in flight.
 * Both are bounded: at most `requests.length` requests (closed loop: `repeat` cycles through them up to
 * `maxRequests`), no new request after `maxDurationMs` or once `stop` fires (which also aborts the
 * requests in flight: background load), and every request aborts after `requestTimeoutMs` (an error).
 *
 * Streaming responses are parsed as SSE at the client: every `data:` event carrying generated text
 * (completions `text` or chat `delta.content`) is one token; TTFT is the arrival of the first such
 * event, inter-token times are the gaps between later ones (events that arrive in the same TCP read
 * get a gap of ~0, as a real client would see). A `usage` event gives prompt / cached tokens.
 * Non-streaming: TTFT = full response time; tokens from `usage.completion_tokens`.
 */
import { Pool } from 'undici';
import { mulberry32, type BenchRequest } from './workloads.js';

export interface RequestResult {
  readonly index: number;
  /** HTTP status (0 when no response). */
  status: number;
  error?: string;
  /** Send time relative to the run start, ms. */
  startMs: number;
  ttftMs?: number;
  latencyMs: number;
  /** Gaps between consecutive token events, ms (streaming only). */
  itlMs: number[];
  outputTokens: number;
  promptTokens?: number;
  cachedTokens?: number;
  /** The router's `x-vllm-router-decision` response header, when it sends one. */
  decision?: string;
}

export interface RunResult {
  /** Indexed by request index; requests never sent (deadline) are absent. */
  readonly results: RequestResult[];
  readonly wallMs: number;
  readonly sent: number;
}

export interface DriverOptions {
  /** http://127.0.0.1:<port> */
  baseUrl: string;
  requests: readonly BenchRequest[];
  /** Stop sending new requests after this long. Default 10 minutes. */
  maxDurationMs?: number;
  /** Per-request abort. Default 120 s. */
  requestTimeoutMs?: number;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** Extra headers per request (after `headers`), e.g. a session key. */
  requestHeaders?: (req: BenchRequest) => Record<string, string> | undefined;
  /** Called with each finished result (live progress / sampling). */
  onResult?: (r: RequestResult) => void;
  /** No new request once aborted; requests in flight are aborted too. */
  stop?: AbortSignal;
}

export async function runClosedLoop(
  opts: DriverOptions & { concurrency: number; repeat?: boolean; maxRequests?: number },
): Promise<RunResult> {
  if (!Number.isInteger(opts.concurrency) || opts.concurrency < 1) {
    throw new RangeError('concurrency must be a positive integer');
  }
  const pool = makePool(opts.baseUrl, opts.concurrency);
  const results: RequestResult[] = [];
  const t0 = performance.now();
  const deadline = t0 + (opts.maxDurationMs ?? 600_000);
  const total = opts.repeat ? (opts.maxRequests ?? opts.requests.length) : opts.requests.length;
  let next = 0;
  const user = async (): Promise<void> => {
    while (next < total && performance.now() < deadline && !opts.stop?.aborted) {
      const n = next++;
      const req = opts.requests[n % opts.requests.length]!;
      const r = await sendOne(pool, req, t0, opts);
      if (opts.repeat) results[n] = r;
      else results[req.index] = r;
      opts.onResult?.(r);
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(opts.concurrency, total) }, user));
  } finally {
    await pool.close();
  }
  return { results, wallMs: performance.now() - t0, sent: next };
}

export async function runOpenLoop(
  opts: DriverOptions & { ratePerSec: number; seed?: number; maxConnections?: number },
): Promise<RunResult> {
  if (!(opts.ratePerSec > 0)) throw new RangeError('ratePerSec must be > 0');
  const pool = makePool(opts.baseUrl, opts.maxConnections ?? 1024);
  const rng = mulberry32(opts.seed ?? 1);
  const results: RequestResult[] = [];
  const t0 = performance.now();
  const deadline = t0 + (opts.maxDurationMs ?? 600_000);
  const pending: Array<Promise<void>> = [];
  let at = 0;
  let sent = 0;
  try {
    for (const req of opts.requests) {
      at += (-Math.log(1 - rng()) / opts.ratePerSec) * 1000;
      if (t0 + at > deadline) break;
      const wait = t0 + at - performance.now();
      if (wait > 1) await sleep(wait);
      sent++;
      pending.push(
        sendOne(pool, req, t0, opts).then((r) => {
          results[req.index] = r;
          opts.onResult?.(r);
        }),
      );
    }
    await Promise.all(pending);
  } finally {
    await pool.close();
  }
  return { results, wallMs: performance.now() - t0, sent };
}

function makePool(baseUrl: string, connections: number): Pool {
  const u = new URL(baseUrl);
  if (u.hostname !== '127.0.0.1') throw new Error(`benchmarks send to 127.0.0.1 only, got ${baseUrl}`);
  return new Pool(u.origin, {
    connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    headersTimeout: 0,
    bodyTimeout: 0,
  });
}

async function sendOne(
  pool: Pool,
  req: BenchRequest,
  t0: number,
  opts: DriverOptions,
): Promise<RequestResult> {
  const payload = JSON.stringify(req.body);
  const start = performance.now();
  const r: RequestResult = {
    index: req.index,
    status: 0,
    startMs: start - t0,
    latencyMs: 0,
    itlMs: [],
    outputTokens: 0,
  };
  try {
    const res = await pool.request({
      path: req.path,
      method: 'POST',
      headers: { 'content-type': 'application/json', ...opts.headers, ...opts.requestHeaders?.(req) },
      body: payload,
      signal: requestSignal(opts),
    });
    r.status = res.statusCode;
    const decision = res.headers['x-vllm-router-decision'];
    if (typeof decision === 'string') r.decision = decision;
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      r.error = `HTTP ${res.statusCode}: ${text.slice(0, 200)}`;
    } else if (req.stream) {
      await readSse(res.body, start, r);
      if (r.outputTokens === 0) r.error = 'stream ended without tokens';
    } else {
      const body = (await res.body.json()) as { usage?: Usage };
      r.ttftMs = performance.now() - start;
      applyUsage(r, body.usage);
      r.outputTokens = body.usage?.completion_tokens ?? 0;
    }
  } catch (err) {
    r.error = (err as Error).message || String(err);
  }
  r.latencyMs = performance.now() - start;
  return r;
}

interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number } | null;
}

interface SseEvent {
  choices?: Array<{ text?: string; delta?: { content?: string | null } }>;
  usage?: Usage | null;
}

function applyUsage(r: RequestResult, usage: Usage | null | undefined): void {
  if (!usage) return;
  r.promptTokens = usage.prompt_tokens;
  r.cachedTokens = usage.prompt_tokens_details?.cached_tokens ?? undefined;
}

async function readSse(body: AsyncIterable<Buffer>, start: number, r: RequestResult): Promise<void> {
  let buf = '';
  let last = 0;
  for await (const chunk of body) {
    const now = performance.now();
    buf += chunk.toString('utf8');
    let sep: number;
    while ((sep = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, sep);
      buf = buf.slice(sep + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]' || data === '') continue;
        const ev = JSON.parse(data) as SseEvent;
        if (ev.usage) applyUsage(r, ev.usage);
        const c = ev.choices?.[0];
        const text = c?.text ?? c?.delta?.content;
        if (typeof text !== 'string' || text.length === 0) continue;
        r.outputTokens++;
        if (r.ttftMs === undefined) r.ttftMs = now - start;
        else r.itlMs.push(now - last);
        last = now;
      }
    }
  }
}

function requestSignal(opts: DriverOptions): AbortSignal {
  const timeout = AbortSignal.timeout(opts.requestTimeoutMs ?? 120_000);
  return opts.stop ? AbortSignal.any([timeout, opts.stop]) : timeout;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
