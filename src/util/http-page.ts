/**
 * One small GET read whole, for the pollers that read the workers' pages (load/metrics-scraper.ts:
 * `/metrics`; discovery/models-poller.ts: `/v1/models`).
 *
 * It goes through the Agent's low-level dispatch (no AbortSignal, no body stream: ~2x less CPU than
 * `request()` measured in one process) and settles once: on the response's end, an error, the body
 * passing `maxBytes`, the timeout, or `handle.abort()` (the poller closing); whatever settles it first
 * aborts the exchange if it is still running. Outcomes:
 * - `ok`: a 2xx response and its body (other bodies are read and dropped);
 * - `absent`: 404 or 405 (the worker does not serve that page);
 * - `failed`: any other status (`status 503`), a connect error or reset (its code), `too_large`,
 *   `timeout`, `closed`;
 * - `stalled`: the timeout's own timer fired over LOOP_STALL_MS late, so the router's event loop was
 *   blocked and the wait says nothing about the worker (util/loop-stall.ts).
 */
import { Agent, type Dispatcher } from 'undici';
import { LOOP_STALL_MS, timeoutWithLateness } from './loop-stall.js';

/** Idle keep-alive sockets close after this, below the 5 s idle timeout of Node and uvicorn servers. */
const KEEP_ALIVE_MS = 4_000;

/** A keep-alive Agent for one poller's page reads. */
export function pageAgent(connectTimeoutMs: number): Agent {
  return new Agent({
    keepAliveTimeout: KEEP_ALIVE_MS,
    keepAliveMaxTimeout: KEEP_ALIVE_MS,
    connect: { timeout: connectTimeoutMs },
  });
}

export type PageResult =
  | { kind: 'ok'; text: string }
  | { kind: 'absent' }
  | { kind: 'failed'; reason: string }
  | { kind: 'stalled' };

/** Set while the GET is running: ends it (its result is `failed: closed`). */
export interface PageHandle {
  abort?: () => void;
}

export function getPage(
  agent: Agent,
  url: string,
  timeoutMs: number,
  maxBytes: number,
  handle: PageHandle,
  /** Extra request headers (e.g. the workers' API key). */
  headers?: Readonly<Record<string, string>>,
): Promise<PageResult> {
  return new Promise<PageResult>((resolve) => {
    let settled = false;
    let controller: Dispatcher.DispatchController | undefined;
    let status = 0;
    let size = 0;
    const chunks: Buffer[] = [];
    const finish = (result: PageResult, abortWith?: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      handle.abort = undefined;
      if (abortWith !== undefined && controller !== undefined && !controller.aborted) {
        controller.abort(new Error(abortWith));
      }
      resolve(result);
    };
    const timer = timeoutWithLateness(timeoutMs, (late) =>
      finish(
        late > LOOP_STALL_MS ? { kind: 'stalled' } : { kind: 'failed', reason: 'timeout' },
        'page read timed out',
      ),
    );
    handle.abort = () => finish({ kind: 'failed', reason: 'closed' }, 'poller closed');
    let target: URL;
    try {
      target = new URL(url);
    } catch (err) {
      finish({ kind: 'failed', reason: (err as Error).message });
      return;
    }
    const handler: Dispatcher.DispatchHandler = {
      onRequestStart: (c) => {
        controller = c;
        if (settled) c.abort(new Error('page read already settled')); // timed out while queued
      },
      onResponseStart: (_c, statusCode) => {
        status = statusCode;
      },
      onResponseData: (_c, chunk) => {
        size += chunk.length;
        if (size > maxBytes) finish({ kind: 'failed', reason: 'too_large' }, 'page too large');
        else if (status >= 200 && status < 300) chunks.push(chunk);
      },
      onResponseEnd: () => {
        if (status === 404 || status === 405) finish({ kind: 'absent' });
        else if (status < 200 || status >= 300) finish({ kind: 'failed', reason: `status ${status}` });
        else finish({ kind: 'ok', text: Buffer.concat(chunks, size).toString('utf8') });
      },
      onResponseError: (_c, err) => {
        const code = (err as { code?: unknown }).code;
        finish({ kind: 'failed', reason: typeof code === 'string' ? code : err.message });
      },
    };
    try {
      agent.dispatch(
        {
          origin: target.origin,
          path: `${target.pathname}${target.search}`,
          method: 'GET',
          ...(headers ? { headers } : {}),
        },
        handler,
      );
    } catch (err) {
      finish({ kind: 'failed', reason: (err as Error).message });
    }
  });
}

/** `base` + `path` with exactly one slash between them. */
export function joinUrl(base: string, path: string): string {
  return base.replace(/\/+$/, '') + (path.startsWith('/') ? path : `/${path}`);
}
