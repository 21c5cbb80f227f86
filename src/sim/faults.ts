/**
 * Fault injection queue of the simulator (pure).
 *
 * Each injected fault applies to the next `count` matching requests, oldest injection first. A fault
 * without a `path` filter matches only the generation endpoints (`/v1/completions`,
 * `/v1/chat/completions`, `/v1/responses`), so a router's background health checks or metric scrapes
 * never consume faults meant for traffic; with `path`, it matches any request whose path contains that
 * substring (e.g. `{ path: '/health' }` to fail health checks; `{ path: '/v1/responses' }` also matches
 * `GET /v1/responses/{id}` and `POST /v1/responses/{id}/cancel`, `{ path: '/cancel' }` only the latter).
 */

export type Fault =
  /** Answer with this HTTP status and an OpenAI-style JSON error. */
  | { status: number; message?: string }
  /**
   * Streaming: destroy the socket right after the n-th SSE event (chat role chunk, token chunks, usage
   * and [DONE] all count); 0 = before the response headers. Non-streaming: always before the headers.
   * If the stream has fewer events than n it completes normally.
   */
  | { resetAfterChunks: number }
  /** Never answer; the request ends only when the client aborts (or the simulator closes). */
  | { hang: true }
  /** Extra delay before the request enters the engine (so before the first byte), not time-scaled. */
  | { delayMs: number };

export interface FaultOptions {
  /** How many matching requests the fault applies to. Default 1. */
  count?: number;
  /** Path substring filter; default: generation endpoints only. */
  path?: string;
}

interface Entry {
  readonly fault: Fault;
  readonly path: string | undefined;
  remaining: number;
}

export function isGenerationPath(path: string): boolean {
  return path === '/v1/completions' || path === '/v1/chat/completions' || path === '/v1/responses';
}

export class FaultQueue {
  private entries: Entry[] = [];

  add(fault: Fault, opts: FaultOptions = {}): void {
    const count = opts.count ?? 1;
    if (!Number.isInteger(count) || count < 1) throw new RangeError('fault count must be a positive integer');
    validateFault(fault);
    this.entries.push({ fault, path: opts.path, remaining: count });
  }

  /** Consumes and returns the fault for a request on `path`, if one matches. */
  take(path: string): Fault | undefined {
    if (this.entries.length === 0) return undefined;
    for (let i = 0; i < this.entries.length; i++) {
      const e = this.entries[i]!;
      const matches = e.path === undefined ? isGenerationPath(path) : path.includes(e.path);
      if (!matches) continue;
      e.remaining--;
      if (e.remaining === 0) this.entries.splice(i, 1);
      return e.fault;
    }
    return undefined;
  }

  get pending(): number {
    return this.entries.reduce((n, e) => n + e.remaining, 0);
  }

  clear(): void {
    this.entries = [];
  }
}

function validateFault(fault: Fault): void {
  if ('status' in fault) {
    if (!Number.isInteger(fault.status) || fault.status < 100 || fault.status > 599) {
      throw new RangeError('fault status must be an HTTP status code');
    }
  } else if ('resetAfterChunks' in fault) {
    if (!Number.isInteger(fault.resetAfterChunks) || fault.resetAfterChunks < 0) {
      throw new RangeError('resetAfterChunks must be an integer >= 0');
    }
  } else if ('delayMs' in fault) {
    if (!Number.isFinite(fault.delayMs) || fault.delayMs < 0) throw new RangeError('delayMs must be >= 0');
  } else if (!('hang' in fault) || fault.hang !== true) {
    throw new TypeError('unknown fault');
  }
}
