/**
 * Putting a worker into vLLM's sleep mode, and waking it, without losing a request (admin API:
 * `POST /workers/sleep`, `POST /workers/wake_up`, `POST /workers/cordon`, `POST /workers/uncordon`).
 *
 * Why through the router: vLLM's `POST /sleep` frees the weights and the KV cache under whatever is
 * running (vllm-project/vllm#45520: in-flight requests abort and the engine can die), and a request
 * routed to it after the sleep crashes it on most releases (#15483). The router's scrape sees the
 * sleep within one interval; a request routed in that interval still lands on the sleeping engine.
 * So sleep is done in this order, per worker URL (every role registered at it: one process):
 *   1. cordon: no new request from this router (worker-health.ts);
 *   2. drain: wait until this router's requests there have ended (their load guards: `worker.load`,
 *      and the P/D requests whose decode leg was promised to it while their prefill leg runs)
 *      and, when the worker's metrics are scraped, until a page read after that shows nothing
 *      waiting or running (requests of other router replicas, which must be cordoned too, and of
 *      direct clients);
 *   3. `POST <url>/sleep?level=N`; on success the worker is recorded asleep at once (not at the next
 *      scrape) and stays cordoned.
 * A drain that does not finish within `timeoutMs` sleeps nothing: the cordon is lifted (unless the
 * worker was cordoned before) and the call fails with `worker_busy`. A refused or failed `/sleep`
 * lifts it too (`worker_error`). Wake: `POST <url>/wake_up` (vLLM answers once the engine is awake),
 * then awake and uncordoned at once. A level-2 sleep discarded the weights, and a plain /wake_up
 * maps their memory back empty: the engine answers every request with garbage, and its /health,
 * /is_sleeping and sleep gauge all say awake. So a worker this router put to level 2 is woken in
 * vLLM's documented order (docs/features/sleep_mode.md): `POST /wake_up?tags=weights`, `POST
 * /collective_rpc {"method": "reload_weights"}` (the weights again from the model's files), `POST
 * /wake_up?tags=kv_cache`; only then is it back in selection. A step that fails leaves it asleep and
 * cordoned (`worker_error` naming the step); a wake asked again starts over. This is known per
 * worker key while the worker is recorded asleep, so a sleeper whose registration is replaced in
 * place (carried over asleep: composition/wiring.ts buildPools) is woken the same way.
 *
 * A worker that re-registers at the URL during the drain (a restarted process: a new Worker) is
 * cordoned and drained too. One operation per URL at a time (a second one gets `worker_busy`). While a
 * sleep holds a URL, an uncordon of it is `worker_busy` (it would let requests in under the sleep), and
 * a cordon of it is kept when the sleep fails. close() aborts drains and calls
 * in flight (they fail) and closes the connection pool. Cordon state lives on the Worker objects'
 * health: a worker that restarts (a new registration generation) comes back uncordoned and awake.
 */
import { Agent, request } from 'undici';
import { joinUrl } from '../util/http-page.js';
import type { Worker } from '../workers/worker.js';
import { AdminInputError } from './admin-server.js';

export interface SleepHealth {
  cordon(worker: Worker, on: boolean, now: number): void;
  recordSleep(worker: Worker, asleep: boolean, now: number): void;
  view(worker: Worker, now: number): { readonly cordoned: boolean; readonly asleep: boolean };
}

export interface WorkerSleepDeps {
  /** Current pool members registered at `url` (normalised). */
  readonly workersAt: (url: string) => Worker[];
  readonly health: SleepHealth;
  /**
   * The worker's latest scraped page: when it was taken and its waiting + running count; undefined
   * when the worker is not scraped (scraping off, or no page with those figures yet).
   */
  readonly scraped?: (url: string) => { readonly takenAtMs: number; readonly busy: number } | undefined;
  readonly clock: () => number;
  /**
   * Requests that will reach the worker without holding its load yet (a P/D decode worker chosen
   * before its request's prefill leg ends: pd/pd-dispatcher.ts pendingDecodes). Default none.
   */
  readonly pending?: (worker: Worker) => number;
  /** Drain check interval, ms. Default 20. */
  readonly pollMs?: number;
  /** Timeout of the worker's /sleep and /wake_up answers (falling asleep takes seconds), ms. */
  readonly callTimeoutMs?: number;
}

export interface SleepResult {
  readonly url: string;
  readonly level: 1 | 2;
  /** Milliseconds from the cordon to the end of the drain. */
  readonly drainedMs: number;
  /** The ids of the workers (roles) at the URL. */
  readonly workers: readonly string[];
}

export const DEFAULT_SLEEP_TIMEOUT_MS = 30_000;
const DEFAULT_CALL_TIMEOUT_MS = 120_000;
/** vLLM's `collective_rpc` that loads the weights from the model's files into their memory. */
const RELOAD_WEIGHTS = JSON.stringify({ method: 'reload_weights' });

export class WorkerSleep {
  private readonly busy = new Set<string>();
  /** Per URL a sleep holds: each Worker held, and whether it stays cordoned when the sleep fails. */
  private readonly holds = new Map<string, Map<Worker, boolean>>();
  /**
   * Keys of the workers a level-2 sleep through this router left without weights. By key, not Worker:
   * a sleeping worker replaced in place (a new registration lifetime) is the same sleeping process,
   * carried over asleep (composition/wiring.ts buildPools); one no longer recorded asleep (a restarted
   * process, awake with its weights) is woken plainly.
   */
  private readonly discarded = new Set<string>();
  private readonly abort = new AbortController();
  private readonly agent = new Agent({ keepAliveTimeout: 4_000 });
  private closed = false;

  constructor(private readonly deps: WorkerSleepDeps) {}

  /** Cordons (or uncordons) every worker at `url`; returns their ids. */
  cordon(url: string, on: boolean): string[] {
    const workers = this.at(url);
    const held = this.holds.get(url);
    if (held !== undefined) {
      if (!on) {
        throw new AdminInputError(
          `${url} is being put to sleep: it stays cordoned until the sleep ends`,
          'worker_busy',
        );
      }
      for (const w of held.keys()) held.set(w, true); // asked for: kept if the sleep fails
    }
    const now = this.deps.clock();
    for (const w of workers) this.deps.health.cordon(w, on, now);
    return workers.map((w) => w.id);
  }

  async sleep(url: string, level: 1 | 2, timeoutMs: number = DEFAULT_SLEEP_TIMEOUT_MS): Promise<SleepResult> {
    this.at(url); // not_found before anything is held
    return this.exclusive(url, async () => {
      const start = this.deps.clock();
      // Every Worker held for this sleep, and whether it was cordoned before. A worker re-registered
      // at the URL during the drain (a new generation: a new Worker) is held too.
      const held = new Map<Worker, boolean>();
      this.holds.set(url, held);
      const hold = (): Worker[] => {
        const now = this.deps.clock();
        for (const w of this.deps.workersAt(url)) {
          if (held.has(w)) continue;
          held.set(w, this.deps.health.view(w, now).cordoned);
          this.deps.health.cordon(w, true, now);
        }
        return [...held.keys()];
      };
      const release = (): void => {
        const now = this.deps.clock();
        for (const [w, was] of held) if (!was) this.deps.health.cordon(w, false, now);
      };
      try {
        hold();
        let drainedMs: number;
        try {
          drainedMs = (await this.drain(url, hold, start, timeoutMs)) - start;
        } catch (err) {
          release();
          throw err;
        }
        const answer = await this.call(url, `/sleep?level=${level}`);
        if (answer !== undefined) {
          release();
          throw new AdminInputError(`${url} refused to sleep: ${answer}`, 'worker_error');
        }
        const now = this.deps.clock();
        const workers = hold();
        for (const w of workers) {
          this.deps.health.recordSleep(w, true, now);
          if (level === 2) this.discarded.add(w.key);
          else this.discarded.delete(w.key);
        }
        return { url, level, drainedMs: Math.round(drainedMs), workers: workers.map((w) => w.id) };
      } finally {
        this.holds.delete(url);
      }
    });
  }

  async wakeUp(url: string): Promise<{ url: string; workers: readonly string[] }> {
    const workers = this.at(url);
    return this.exclusive(url, async () => {
      const at = this.deps.clock();
      const weightless = workers.some(
        (w) => this.discarded.has(w.key) && this.deps.health.view(w, at).asleep,
      );
      const steps: Array<[string, string?]> = weightless
        ? [['/wake_up?tags=weights'], ['/collective_rpc', RELOAD_WEIGHTS], ['/wake_up?tags=kv_cache']]
        : [['/wake_up']];
      for (const [path, body] of steps) {
        const answer = await this.call(url, path, body);
        if (answer === undefined) continue;
        const step = body === undefined ? path : `${path} ${body}`;
        throw new AdminInputError(`${url} did not wake up: ${step}: ${answer}`, 'worker_error');
      }
      const now = this.deps.clock();
      for (const w of workers) {
        this.discarded.delete(w.key);
        this.deps.health.recordSleep(w, false, now);
        this.deps.health.cordon(w, false, now);
      }
      return { url, workers: workers.map((w) => w.id) };
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.abort.abort();
    await this.agent.close();
  }

  private at(url: string): Worker[] {
    const workers = this.deps.workersAt(url);
    if (workers.length === 0) throw new AdminInputError(`no worker is registered at ${url}`, 'not_found');
    return workers;
  }

  private async exclusive<T>(url: string, run: () => Promise<T>): Promise<T> {
    if (this.closed) throw new AdminInputError('the router is closing', 'worker_busy');
    if (this.busy.has(url)) {
      throw new AdminInputError(`a sleep or wake of ${url} is already in progress`, 'worker_busy');
    }
    this.busy.add(url);
    try {
      return await run();
    } finally {
      this.busy.delete(url);
    }
  }

  /**
   * Resolves with the clock time the drain ended; throws worker_busy at the deadline. `hold()` holds
   * any new Worker at the URL and returns every one held.
   */
  private async drain(url: string, hold: () => Worker[], start: number, timeoutMs: number): Promise<number> {
    const deadline = start + timeoutMs;
    let localDrainedAt: number | undefined;
    for (;;) {
      const now = this.deps.clock();
      const local = hold().reduce((n, w) => n + w.load + (this.deps.pending?.(w) ?? 0), 0);
      if (local > 0) localDrainedAt = undefined;
      else {
        localDrainedAt ??= now;
        const page = this.deps.scraped?.(url);
        // A page read after our own requests ended, showing nobody else's either.
        if (page === undefined || (page.takenAtMs >= localDrainedAt && page.busy === 0)) return now;
      }
      if (now >= deadline) {
        const page = this.deps.scraped?.(url);
        throw new AdminInputError(
          `${url} did not drain within ${timeoutMs} ms (${local} requests of this router` +
            `${page ? `, ${page.busy} waiting or running on its last page` : ''}); nothing was put to sleep`,
          'worker_busy',
        );
      }
      await this.pause(Math.min(this.deps.pollMs ?? 20, Math.max(1, deadline - now)));
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const signal = this.abort.signal;
      if (signal.aborted) return reject(new AdminInputError('the router is closing', 'worker_busy'));
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(new AdminInputError('the router is closing', 'worker_busy'));
      };
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      signal.addEventListener('abort', onAbort, { once: true });
    });
  }

  /** POSTs `path` (with a JSON `body`) to the worker; undefined on a 2xx, else what went wrong. */
  private async call(url: string, path: string, body?: string): Promise<string | undefined> {
    const timeout = this.deps.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    try {
      const res = await request(joinUrl(url, path), {
        method: 'POST',
        ...(body !== undefined ? { body, headers: { 'content-type': 'application/json' } } : {}),
        dispatcher: this.agent,
        headersTimeout: timeout,
        bodyTimeout: timeout,
        signal: this.abort.signal,
      });
      const text = (await res.body.text()).slice(0, 300);
      return res.statusCode >= 200 && res.statusCode < 300 ? undefined : `status ${res.statusCode} ${text}`;
    } catch (err) {
      return (err as { code?: string }).code ?? (err as Error).message;
    }
  }
}
