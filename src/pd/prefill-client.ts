/**
 * Sends the prefill leg of a P/D request straight to the prefill worker (not through Envoy): undici
 * with a keep-alive connection pool per worker origin. Every way the call can fail becomes a
 * PrefillError with a kind the caller maps to a 502 / retry / metric.
 */
import { Agent, request, errors as undiciErrors, type Dispatcher } from 'undici';
import type { Worker } from '../workers/worker.js';
import { RouterBaseError } from '../errors.js';

export type PrefillErrorKind = 'status' | 'timeout' | 'transport' | 'invalid_response' | 'aborted';

/** A failed prefill leg; `code` is `prefill_<kind>`, `status` the prefill worker's HTTP status. */
export class PrefillError extends RouterBaseError<`prefill_${PrefillErrorKind}`> {
  constructor(
    readonly kind: PrefillErrorKind,
    message: string,
    readonly status?: number,
    /** The worker's own error message (a non-2xx answer's `message` / `error.message`), when it gave one. */
    readonly detail?: string,
  ) {
    super(`prefill_${kind}`, message);
  }
}

export interface PrefillResult {
  readonly status: number;
  /** The prefill response's `kv_transfer_params`, when it had some. */
  readonly kvTransferParams: Record<string, unknown> | undefined;
  /**
   * `usage.prompt_tokens_details.cached_tokens` (a /v1/responses leg: `usage.input_tokens_details`) as
   * the prefill worker reported it; 0 for a usage without details (vLLM writes them only when
   * something was cached); undefined without a usage.
   */
  readonly cachedTokens: number | undefined;
  /**
   * The prefill's one token ended the request (an end-of-sequence token, a stop string or stop token
   * id: finish_reason `stop`, a Messages `stop_reason` other than `max_tokens`, a completed response)
   * instead of its `max_tokens` of 1. vLLM then frees the prompt's KV blocks at once and answers without
   * `kv_transfer_params` (NIXL's request_finished keeps them only for a length-capped request).
   */
  readonly stopped: boolean;
}

/** Client headers that must not be forwarded to the prefill worker. */
const DROP = new Set([
  'host',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-connection',
  'proxy-authorization',
  'content-length',
  'expect',
  'accept-encoding',
  'x-request-id',
  'x-gateway-destination-endpoint',
  'x-prefiller-host-port',
  'x-data-parallel-rank',
]);

const MAX_PREFILL_RESPONSE = 8 * 1024 * 1024;

/** Optional parts of one prefill leg. */
export interface PrefillLegOptions {
  /** Extra request headers (e.g. `x-data-parallel-rank`). */
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * Called once a connection to the worker is up and the request is being written (undici's
   * onRequestStart). A leg that fails before it (refused or unreachable) never reached the worker.
   */
  readonly onSent?: () => void;
}

/**
 * Calls `opts.onSent` when undici starts writing the request on a connected socket: a handler that
 * delegates everything and taps onRequestStart (undici >= 7 handler API).
 */
const sentHook: Dispatcher.DispatcherComposeInterceptor = (dispatch) => (opts, handler) => {
  const onSent = (opts as { onSent?: () => void }).onSent;
  if (!onSent) return dispatch(opts, handler);
  const h = handler as Dispatcher.DispatchHandler;
  return dispatch(opts, {
    onRequestStart: (c, ctx) => {
      onSent();
      h.onRequestStart?.(c, ctx);
    },
    onRequestUpgrade: (c, s, hd, sock) => h.onRequestUpgrade?.(c, s, hd, sock),
    onResponseStart: (c, s, hd, m) => h.onResponseStart?.(c, s, hd, m),
    onResponseData: (c, d) => h.onResponseData?.(c, d),
    onResponseEnd: (c, t) => h.onResponseEnd?.(c, t),
    onResponseError: (c, e) => h.onResponseError?.(c, e),
  });
};

export class PrefillClient {
  // Idle sockets close after 4 s, below the 5 s idle timeout of vLLM's server (uvicorn) and Node's:
  // kept longer, a prefill written as the worker closes the socket fails as a transport error.
  private readonly agent = new Agent({
    keepAliveTimeout: 4_000,
    keepAliveMaxTimeout: 600_000,
    pipelining: 1,
  });
  private readonly dispatcher = this.agent.compose(sentHook);
  private closed = false;

  async send(
    worker: Worker,
    path: string,
    body: Buffer,
    clientHeaders: Readonly<Record<string, string>>,
    requestId: string,
    signal: AbortSignal,
    timeoutMs: number,
    leg: PrefillLegOptions = {},
  ): Promise<PrefillResult> {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(clientHeaders)) {
      if (k.charCodeAt(0) !== 58 /* : */ && !DROP.has(k) && !k.startsWith('x-envoy-')) headers[k] = v;
    }
    headers['content-type'] = 'application/json';
    headers['x-request-id'] = requestId;
    if (leg.headers) Object.assign(headers, leg.headers);
    // One controller for both ways the call can be cut short, and a timer that is cleared when the
    // call ends (AbortSignal.timeout would keep a timer per prefill alive for the whole timeout).
    const cut = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      cut.abort();
    }, timeoutMs);
    const onClientGone = () => cut.abort();
    if (signal.aborted) cut.abort();
    else signal.addEventListener('abort', onClientGone, { once: true });
    try {
      const res = await request(`http://${worker.endpoint}${path}`, {
        method: 'POST',
        headers,
        body,
        signal: cut.signal,
        dispatcher: this.dispatcher,
        ...(leg.onSent ? { onSent: leg.onSent } : {}),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      const text = await readLimited(res.body, MAX_PREFILL_RESPONSE);
      if (res.statusCode < 200 || res.statusCode >= 300) {
        throw new PrefillError(
          'status',
          `prefill worker ${worker.url} answered ${res.statusCode}: ${text.slice(0, 200)}`,
          res.statusCode,
          errorMessageOf(text),
        );
      }
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        throw new PrefillError(
          'invalid_response',
          `prefill worker ${worker.url} answered with invalid JSON`,
          res.statusCode,
        );
      }
      const obj = (typeof json === 'object' && json !== null ? json : {}) as Record<string, unknown>;
      const kv = obj.kv_transfer_params;
      const usage = obj.usage as
        | {
            prompt_tokens?: unknown;
            prompt_tokens_details?: { cached_tokens?: unknown } | null;
            input_tokens_details?: { cached_tokens?: unknown } | null;
          }
        | undefined;
      // vLLM writes the details only when something was cached: a usage without them is a miss. A
      // /v1/responses leg always has them, as `input_tokens_details`.
      const cached =
        usage?.prompt_tokens_details?.cached_tokens ??
        usage?.input_tokens_details?.cached_tokens ??
        (typeof usage?.prompt_tokens === 'number' && usage.prompt_tokens_details == null ? 0 : undefined);
      return {
        status: res.statusCode,
        kvTransferParams:
          typeof kv === 'object' && kv !== null && !Array.isArray(kv)
            ? (kv as Record<string, unknown>)
            : undefined,
        cachedTokens: typeof cached === 'number' ? cached : undefined,
        stopped: endedByStop(obj),
      };
    } catch (err) {
      if (err instanceof PrefillError) throw err;
      if (signal.aborted) throw new PrefillError('aborted', 'client went away during prefill');
      if (
        timedOut ||
        err instanceof undiciErrors.HeadersTimeoutError ||
        err instanceof undiciErrors.BodyTimeoutError
      ) {
        throw new PrefillError(
          'timeout',
          `prefill worker ${worker.url} did not answer within ${timeoutMs} ms`,
        );
      }
      throw new PrefillError(
        'transport',
        `prefill worker ${worker.url} unreachable: ${(err as Error).message}`,
      );
    } finally {
      clearTimeout(timer);
      signal.removeEventListener('abort', onClientGone);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.agent.destroy();
  }
}

async function readLimited(
  body: AsyncIterable<Buffer> & { destroy?(): void },
  limit: number,
): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    size += chunk.length;
    if (size > limit) {
      body.destroy?.();
      throw new PrefillError('invalid_response', `prefill response larger than ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** Whether a prefill response says its request ended before its one-token limit (PrefillResult.stopped). */
function endedByStop(obj: Record<string, unknown>): boolean {
  const { choices } = obj;
  if (Array.isArray(choices)) {
    return choices.some((c) => (c as { finish_reason?: unknown } | null)?.finish_reason === 'stop');
  }
  if (typeof obj.stop_reason === 'string') return obj.stop_reason !== 'max_tokens'; // /v1/messages
  return obj.status === 'completed'; // /v1/responses: `incomplete` when capped by max_output_tokens
}

/** vLLM's error body: `{"message": ...}` (older) or `{"error": {"message": ...}}`; undefined otherwise. */
function errorMessageOf(text: string): string | undefined {
  try {
    const j = JSON.parse(text) as { message?: unknown; error?: { message?: unknown } } | null;
    const m = j?.error?.message ?? j?.message;
    return typeof m === 'string' && m !== '' ? m : undefined;
  } catch {
    return undefined;
  }
}
