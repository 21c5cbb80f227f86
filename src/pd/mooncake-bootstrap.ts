/**
 * Mooncake bootstrap directory: what the router must know about each prefill instance before it may
 * send it Mooncake traffic (shared/reference/vllm-pd-protocol.md, "Mooncake"; docs/pd-connectors.md).
 *
 * A vLLM prefill instance with the MooncakeConnector runs a bootstrap server on
 * `VLLM_MOONCAKE_BOOTSTRAP_PORT` (default 8998; per instance `--prefill URL PORT`). `GET /query`
 * answers `{"<dp_rank>": {"engine_id": "...", "worker_addr": {...}}, ...}`: one engine id per
 * data-parallel rank; the number of ranks is the instance's DP size. The decode leg must carry
 * `remote_bootstrap_addr = http://<prefill host>:<bootstrap port>` and the engine id of the DP rank the
 * prefill leg was sent to (header `X-data-parallel-rank`), or the decode worker cannot find the KV.
 *
 * Life cycle per Worker (one registration generation; a new generation is a new Worker, so a
 * restarted process that re-registers is queried afresh):
 *   track()      -> `pending` (not selectable), query at once
 *   query ok     -> `ready` with the engine ids (selectable)
 *   query fails  -> `unreachable` (not selectable), retried with backoff `retryMinMs` doubling up to
 *                   `retryMaxMs`; an empty answer (no rank registered yet) counts as a failure
 *   invalidate() -> `pending` again and re-queried now: the prefill leg failed at transport level, so
 *                   the process may have restarted with new engine ids (static workers keep their
 *                   generation across a restart)
 *   recheck()    -> re-query in the background, staying selectable meanwhile (a decode leg failed:
 *                   maybe stale engine ids, maybe not the prefill's fault)
 *   untrack()    -> forgotten (left its pool); a late answer is dropped
 * `notReady` is the live set of tracked workers that are not `ready`: the dispatcher passes it to
 * selection as the exclusion set, so selection stays one synchronous step with no allocation.
 *
 * DP rank per request: the rank with the fewest prefill legs in flight, ties broken by rotation
 * (vLLM's own proxy simply rotates over (instance, rank)); a Worker that stands for one rank
 * (Worker.dpRank, workers/data-parallel.ts) always gets that rank (none when the instance has fewer
 * engines). `acquireRank()` returns a release function; releases of a rank that a re-query removed
 * are ignored.
 *
 * Owns one undici Agent and per-worker retry timers (unref'd); close() is idempotent.
 */
import { Agent, request } from 'undici';
import type { Worker } from '../workers/worker.js';

export const DEFAULT_BOOTSTRAP_PORT = 8998;

export type BootstrapState = 'pending' | 'ready' | 'unreachable';

export interface BootstrapView {
  readonly state: BootstrapState;
  /** `http://host:port` of the instance's bootstrap server. */
  readonly addr: string;
  readonly dpSize: number;
  /** Engine id by DP rank (empty unless ready). */
  readonly engineIds: readonly string[];
  readonly lastError?: string;
}

export interface RankLease {
  readonly rank: number;
  readonly engineId: string;
  readonly addr: string;
  release(): void;
}

export interface BootstrapDirectoryOptions {
  /** Bootstrap port of workers that name none. Default 8998. */
  readonly defaultPort?: number;
  /** Timeout of one `/query`. Default 2000 ms. */
  readonly timeoutMs?: number;
  /** First retry delay of an unreachable bootstrap server; doubles up to retryMaxMs. Default 250 ms. */
  readonly retryMinMs?: number;
  /** Default 1000 ms (a restarted instance is found within this long of answering). */
  readonly retryMaxMs?: number;
  /** A worker's view changed (logs). */
  readonly onChange?: (worker: Worker, view: BootstrapView) => void;
  /** Every finished query (metrics). */
  readonly onQuery?: (worker: Worker, outcome: 'ok' | 'error') => void;
}

interface Entry {
  view: BootstrapView;
  inflight: number[];
  rotate: number;
  /** Bumped by every new query, so a late answer of an older one is dropped. */
  epoch: number;
  querying: boolean;
  /** A re-query was asked for while one was in flight. */
  again: boolean;
  retryMs: number;
  timer?: NodeJS.Timeout;
  abort?: AbortController;
}

export class BootstrapDirectory {
  /** Tracked workers that are not `ready` (the selection exclusion set). */
  readonly notReady = new Set<Worker>();
  private readonly entries = new Map<Worker, Entry>();
  private readonly agent = new Agent({ keepAliveTimeout: 4_000, keepAliveMaxTimeout: 4_000 });
  private readonly defaultPort: number;
  private readonly timeoutMs: number;
  private readonly retryMinMs: number;
  private readonly retryMaxMs: number;
  private closed = false;

  constructor(private readonly opts: BootstrapDirectoryOptions = {}) {
    this.defaultPort = opts.defaultPort ?? DEFAULT_BOOTSTRAP_PORT;
    this.timeoutMs = opts.timeoutMs ?? 2_000;
    this.retryMinMs = opts.retryMinMs ?? 250;
    this.retryMaxMs = Math.max(this.retryMinMs, opts.retryMaxMs ?? 1_000);
  }

  /** `http://host:port` of the worker's bootstrap server. */
  addrOf(worker: Worker): string {
    return `http://${new URL(worker.url).hostname}:${worker.bootstrapPort ?? this.defaultPort}`;
  }

  /** Starts tracking a prefill worker (idempotent): not selectable until its bootstrap answers. */
  track(worker: Worker): void {
    if (this.closed || this.entries.has(worker)) return;
    const entry: Entry = {
      view: { state: 'pending', addr: this.addrOf(worker), dpSize: 0, engineIds: [] },
      inflight: [],
      rotate: 0,
      epoch: 0,
      querying: false,
      again: false,
      retryMs: this.retryMinMs,
    };
    this.entries.set(worker, entry);
    this.notReady.add(worker);
    this.query(worker, entry);
  }

  untrack(worker: Worker): void {
    const entry = this.entries.get(worker);
    if (!entry) return;
    this.entries.delete(worker);
    this.notReady.delete(worker);
    if (entry.timer) clearTimeout(entry.timer);
    entry.abort?.abort();
  }

  /** Out of selection until a fresh query answers (the instance may have restarted). */
  invalidate(worker: Worker): void {
    const entry = this.entries.get(worker);
    if (!entry) return;
    if (entry.view.state === 'ready') this.setView(worker, entry, { ...entry.view, state: 'pending' });
    this.requery(worker, entry);
  }

  /** Re-query in the background; the worker stays selectable with its current engine ids meanwhile. */
  recheck(worker: Worker): void {
    const entry = this.entries.get(worker);
    if (entry) this.requery(worker, entry);
  }

  view(worker: Worker): BootstrapView | undefined {
    return this.entries.get(worker)?.view;
  }

  isReady(worker: Worker): boolean {
    return this.entries.get(worker)?.view.state === 'ready';
  }

  /** A DP rank for one prefill leg (least in flight, rotating ties); undefined unless ready. */
  acquireRank(worker: Worker): RankLease | undefined {
    const entry = this.entries.get(worker);
    if (!entry || entry.view.state !== 'ready') return undefined;
    const { engineIds, addr } = entry.view;
    const n = engineIds.length;
    const inflight = entry.inflight;
    let best = entry.rotate % n;
    if (worker.dpRank !== undefined) {
      // A Worker that stands for one rank (workers/data-parallel.ts): that rank's engine, or none.
      if (worker.dpRank >= n) return undefined;
      best = worker.dpRank;
    } else {
      for (let i = 1; i < n; i++) {
        const r = (entry.rotate + i) % n;
        if (inflight[r]! < inflight[best]!) best = r;
      }
      entry.rotate = (best + 1) % n;
    }
    inflight[best]!++;
    let released = false;
    return {
      rank: best,
      engineId: engineIds[best]!,
      addr,
      release: () => {
        if (released) return;
        released = true;
        // A re-query replaces the array: a lease of the old one has nothing left to release.
        if (entry.inflight === inflight && inflight[best]! > 0) inflight[best]!--;
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const worker of [...this.entries.keys()]) this.untrack(worker);
    await this.agent.destroy();
  }

  private requery(worker: Worker, entry: Entry): void {
    if (entry.querying) {
      entry.again = true;
      return;
    }
    if (entry.timer) clearTimeout(entry.timer);
    entry.timer = undefined;
    entry.retryMs = this.retryMinMs;
    this.query(worker, entry);
  }

  private query(worker: Worker, entry: Entry): void {
    if (this.closed) return;
    const epoch = ++entry.epoch;
    entry.querying = true;
    entry.again = false;
    const abort = new AbortController();
    entry.abort = abort;
    const timer = setTimeout(() => abort.abort(), this.timeoutMs);
    timer.unref();
    void this.fetchQuery(entry.view.addr, abort.signal)
      .then(
        (engineIds): [string[] | undefined, string | undefined] => [engineIds, undefined],
        (err: unknown): [string[] | undefined, string | undefined] => [
          undefined,
          abort.signal.aborted ? 'timeout' : (err as Error).message,
        ],
      )
      .then(([engineIds, error]) => {
        clearTimeout(timer);
        if (this.entries.get(worker) !== entry || entry.epoch !== epoch) return; // untracked or superseded
        entry.querying = false;
        entry.abort = undefined;
        this.opts.onQuery?.(worker, engineIds ? 'ok' : 'error');
        if (engineIds) {
          entry.retryMs = this.retryMinMs;
          entry.inflight = engineIds.map(() => 0);
          entry.rotate = 0;
          this.setView(worker, entry, {
            state: 'ready',
            addr: entry.view.addr,
            dpSize: engineIds.length,
            engineIds,
          });
        } else {
          this.setView(worker, entry, {
            state: 'unreachable',
            addr: entry.view.addr,
            dpSize: 0,
            engineIds: [],
            lastError: error,
          });
        }
        if (entry.again) return this.query(worker, entry);
        if (!engineIds) this.scheduleRetry(worker, entry);
      });
  }

  private scheduleRetry(worker: Worker, entry: Entry): void {
    if (this.closed) return;
    const delay = entry.retryMs;
    entry.retryMs = Math.min(this.retryMaxMs, entry.retryMs * 2);
    entry.timer = setTimeout(() => {
      entry.timer = undefined;
      if (this.entries.get(worker) === entry) this.query(worker, entry);
    }, delay);
    entry.timer.unref();
  }

  private setView(worker: Worker, entry: Entry, view: BootstrapView): void {
    const changed =
      view.state !== entry.view.state || view.engineIds.join('\n') !== entry.view.engineIds.join('\n');
    entry.view = Object.freeze(view);
    if (view.state === 'ready') this.notReady.delete(worker);
    else this.notReady.add(worker);
    if (changed) this.opts.onChange?.(worker, entry.view);
  }

  /** GET <addr>/query -> engine ids by DP rank. Throws on anything but a well-formed, non-empty map. */
  private async fetchQuery(addr: string, signal: AbortSignal): Promise<string[]> {
    const res = await request(`${addr}/query`, { method: 'GET', dispatcher: this.agent, signal });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`);
    return parseQueryAnswer(JSON.parse(text) as unknown);
  }
}

/**
 * Engine ids by DP rank from a bootstrap `/query` answer `{"<rank>": {"engine_id": "..."}}`. Ranks
 * must be 0..n-1; an empty map (no rank registered yet) is an error.
 */
export function parseQueryAnswer(data: unknown): string[] {
  if (typeof data !== 'object' || data === null || Array.isArray(data)) throw new Error('not a JSON object');
  const entries = Object.entries(data as Record<string, unknown>);
  if (entries.length === 0) throw new Error('no data-parallel rank registered yet');
  const ids: string[] = new Array<string>(entries.length);
  for (const [key, value] of entries) {
    const rank = /^[0-9]{1,4}$/.test(key) ? Number(key) : -1;
    if (rank < 0 || rank >= entries.length) throw new Error(`unexpected dp rank "${key}"`);
    const id = (value as { engine_id?: unknown } | null)?.engine_id;
    if (typeof id !== 'string' || id === '') throw new Error(`rank ${key} has no engine_id`);
    ids[rank] = id;
  }
  return ids;
}
