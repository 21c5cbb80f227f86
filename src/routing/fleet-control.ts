/**
 * vLLM's engine control endpoints for the whole fleet: an RL trainer's weight-update cycle sent
 * through Envoy (`POST /pause`, update the weights, `POST /reset_prefix_cache`, `POST /resume`; or
 * `/sleep` and `/wake_up` around a colocated training step) is answered by the router, which sends
 * the same call to every worker and keeps its own picture of the fleet in step.
 *
 * Why: passed on like any request, such a call reached ONE worker. The others kept generating
 * during the update, kept the prefix cache computed with the old weights (their rollouts then start
 * from KV the new policy would not produce: off-policy samples nobody sees), and the router kept
 * routing on prefixes no worker held any more.
 *
 * Paths (vLLM serves them with `VLLM_SERVER_DEV_MODE=1`; a fleet that does not answers 404, passed on
 * to the client with a hint):
 *   POST /pause, /resume          vLLM's pause of generation (`mode=abort|wait|keep`, `clear_cache`)
 *   POST /reset_prefix_cache      (`reset_running_requests`, `reset_external`), /reset_mm_cache,
 *                                 /reset_encoder_cache
 *   POST /sleep, /wake_up         (`level`, `tags`)
 *   GET  /is_paused, /is_sleeping answered `true` only when every worker says so, with each worker's
 *                                 answer
 * The query string and the body go to every worker as the client sent them, with its
 * `authorization` (or `--worker-api-key`), concurrently, once per URL (the roles of a P/D instance
 * and a data-parallel server's ranks are one process): every member, whatever its health (`/wake_up`
 * must reach the workers sleep took out of selection, and a worker left unpaused or holding the old
 * weights' cache must show as a failure). `worker_url=URL` (repeatable; removed before the call)
 * narrows the call to those members: a rolling update pauses one engine at a time.
 *
 * Answer: 200 when every worker answered 2xx (`status` as vLLM's own answer says it, and `workers`:
 * each URL, its roles, status and message); a 4xx (the workers' own when they all gave the same one)
 * when every worker refused the call with a 4xx; 502 otherwise, naming the workers that failed; 503
 * with no member; 404 for a `worker_url` that is not a member.
 * A worker the router's own checks already hold down (`down`: its /health or /metrics fail) is
 * called too (it may just have come back), but when the call does not reach it (or it answers 5xx)
 * it is listed `down: true` instead of failing the answer: a dead process generates nothing, and a
 * static worker (--worker) stays a member while dead, where Kubernetes discovery drops the pod, so a
 * trainer's every pause failed with 502 until someone restarted it. 503 when every worker called is
 * down.
 *
 * What the router does with each worker's 2xx (so the next request is routed on the fleet as it now
 * is, not at the next scrape):
 *   - pause: the worker is paused (`Worker.paused`) from the moment the call is sent (a request
 *     routed while it is on its way would find the engine paused; a worker that does not take it
 *     gets its state back): its pool prefers the others while any is not paused
 *     (WorkerPool.candidatesFor). Unless `mode=keep` or `clear_cache` false (read as pydantic reads
 *     a bool: `false`, `0`, `no`, `off`, ... in any case), vLLM also empties its prefix cache: the
 *     router forgets what it held (`cacheCleared`);
 *   - resume: not paused;
 *   - reset_prefix_cache: the router forgets what it held;
 *   - sleep: asleep (out of selection, its cache forgotten, as a scraped sleep gauge does), from the
 *     moment the call is sent: falling asleep takes vLLM seconds, and a request routed meanwhile
 *     would reach an engine freeing its weights under it (vllm-project/vllm#15483). A worker that
 *     does not take it is awake again as it was, its circuit breaker too (`sleepRefused`; a page of
 *     its metrics says otherwise soon enough);
 *   - wake_up: the worker's `GET /is_sleeping` is read and recorded (a `tags=weights` wake leaves
 *     the KV cache asleep, and the engine with it); when it cannot be read, a wake without `tags`
 *     records the worker awake (its 2xx says so), one with `tags` leaves it to the next scrape;
 *   - is_paused / is_sleeping: each answer is recorded (a pause sent to a worker directly shows).
 * A paused state lives on the Worker: a restarted engine (a new registration generation) is not
 * paused. vLLM's /metrics say nothing of a pause: the pauses this router did not forward (sent to
 * the engine, or through another replica) are read from each worker's `/is_paused`
 * (health/pause-poller.ts), whose answers yield to this router's own newer record (`supersedes`).
 * Its sleep gauge does say it, and each scraped page sets the worker's sleep state
 * (load/metrics-scraper.ts); a page read before a sleep or wake_up call through this router ended
 * (or while it is in flight) yields to that call's record the same way (`supersedes(url, readAt,
 * 'sleep')`): read while the engine was still falling asleep, it would put the worker back in
 * selection.
 */
import { Agent } from 'undici';
import type { LocalAnswer } from '../extproc/dispatch.js';
import type { Worker } from '../workers/worker.js';
import { laxBool } from '../request/lax-bool.js';
import { callWorker, rolesByUrl } from './worker-call.js';

type Operation =
  'pause' | 'resume' | 'reset' | 'reset_other' | 'sleep' | 'wake_up' | 'is_paused' | 'is_sleeping';

const OPERATIONS: ReadonlyMap<string, { readonly method: 'GET' | 'POST'; readonly op: Operation }> = new Map([
  ['/pause', { method: 'POST', op: 'pause' }],
  ['/resume', { method: 'POST', op: 'resume' }],
  ['/reset_prefix_cache', { method: 'POST', op: 'reset' }],
  ['/reset_mm_cache', { method: 'POST', op: 'reset_other' }],
  ['/reset_encoder_cache', { method: 'POST', op: 'reset_other' }],
  ['/sleep', { method: 'POST', op: 'sleep' }],
  ['/wake_up', { method: 'POST', op: 'wake_up' }],
  ['/is_paused', { method: 'GET', op: 'is_paused' }],
  ['/is_sleeping', { method: 'GET', op: 'is_sleeping' }],
]);

/** The query parameter that narrows a call to some members (removed before the call). */
export const WORKER_URL_PARAM = 'worker_url';

/** What the router does with the fleet's answers (the composition root's health and policies). */
export interface FleetState {
  recordPause(worker: Worker, paused: boolean, now: number): void;
  recordSleep(worker: Worker, asleep: boolean, now: number): void;
  /** A sleep recorded when sent that the worker did not take: awake as it was before (its breaker too). */
  sleepRefused(worker: Worker, now: number): void;
  /** The worker's prefix cache is empty: its pool's policy forgets what it held. */
  cacheCleared(worker: Worker): void;
}

export interface FleetControlOptions {
  /** Every pool member (all roles). */
  readonly members: () => readonly Worker[];
  readonly state: FleetState;
  readonly clock: () => number;
  /** `--worker-api-key`: sent instead of the client's authorization when set. */
  readonly apiKey?: string;
  /** Timeout of one worker's answer, ms. */
  readonly timeoutMs: number;
  /** The router's active checks hold the worker down (see the header). Default: never. */
  readonly down?: (worker: Worker) => boolean;
  /** Told each answered operation (metrics, logs): the path and how many workers took it of how many. */
  readonly onAnswered?: (path: string, ok: number, of: number) => void;
}

interface WorkerResult {
  readonly url: string;
  readonly roles: string[];
  /** 0 when the worker could not be reached. */
  readonly status: number;
  readonly message: string;
  readonly ok: boolean;
  /** `/is_paused` / `/is_sleeping`: the worker's answer. */
  readonly value?: boolean;
  /** Not reached (or 5xx) while the router's checks hold it down: listed, not a failure. */
  readonly down?: boolean;
}

/** How long the end of a pause or resume call is remembered for `supersedes`, ms. */
const SETTLED_MEMORY_MS = 60_000;

/** What a worker's own report (`/is_paused`, a scraped sleep gauge) may be superseded on. */
export type ReportedState = 'pause' | 'sleep';

/** The calls that set each reported state. */
const TRACKED: Readonly<Partial<Record<Operation, ReportedState>>> = {
  pause: 'pause',
  resume: 'pause',
  sleep: 'sleep',
  wake_up: 'sleep',
};

export class FleetControl {
  private readonly agent = new Agent({ keepAliveTimeout: 4_000 });
  private closed = false;
  /** Per reported state, per URL: the calls setting it in flight, and when the last one ended (clock). */
  private readonly calls: Record<ReportedState, Map<string, { inFlight: number; endedAt: number }>> = {
    pause: new Map(),
    sleep: new Map(),
  };

  constructor(private readonly opts: FleetControlOptions) {}

  /** The answer to a control request, or undefined for any other request. */
  answer(
    method: string,
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Buffer | undefined,
  ): Promise<LocalAnswer> | undefined {
    const q = path.indexOf('?');
    const p = q === -1 ? path : path.slice(0, q);
    const known = OPERATIONS.get(p);
    if (known === undefined || known.method !== method) return undefined;
    const query = new URLSearchParams(q === -1 ? '' : path.slice(q + 1));
    return this.fanOut(p, known.op, query, headers, body);
  }

  /**
   * Whether this control's record of `url`'s pause (or sleep) is newer than a read of its
   * `/is_paused` (health/pause-poller.ts; its sleep gauge: load/metrics-scraper.ts) sent at `readAt`:
   * a pause or resume (sleep or wake_up) call to it is in flight, or ended after the read was sent
   * (the read may have seen the engine before the call took effect).
   */
  supersedes(url: string, readAt: number, state: ReportedState = 'pause'): boolean {
    const c = this.calls[state].get(url);
    return c !== undefined && (c.inFlight > 0 || c.endedAt >= readAt);
  }

  /** Aborts the calls in flight (their workers count as unreachable) and closes the connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.agent.destroy();
  }

  private async fanOut(
    path: string,
    op: Operation,
    query: URLSearchParams,
    headers: Readonly<Record<string, string>>,
    body: Buffer | undefined,
  ): Promise<LocalAnswer> {
    const details = `fleet_${path.slice(1)}`;
    const wanted = query.getAll(WORKER_URL_PARAM).map(normaliseUrl);
    query.delete(WORKER_URL_PARAM);
    const members = this.opts.members();
    const unknown = wanted.filter((u) => !members.some((w) => normaliseUrl(w.url) === u));
    if (unknown.length > 0) {
      const message = `${WORKER_URL_PARAM} names no worker of the pools: ${unknown.join(', ')}`;
      return { status: 404, body: errorBody(message, 'not_found_error', 404), details };
    }
    const targets = rolesByUrl(members, (w) => wanted.length === 0 || wanted.includes(normaliseUrl(w.url)));
    if (targets.size === 0 || this.closed) {
      const message = `No workers to send ${path} to`;
      return { status: 503, body: errorBody(message, 'service_unavailable', 503), details };
    }
    const rest = query.toString();
    const target = rest === '' ? path : `${path}?${rest}`;
    const method = op === 'is_paused' || op === 'is_sleeping' ? 'GET' : 'POST';
    const authorization = this.opts.apiKey ? `Bearer ${this.opts.apiKey}` : headers.authorization;
    // A pause (a sleep) counts from the moment it is sent: a request routed while the call is on its
    // way would reach the engine paused (falling asleep). A worker that does not take it gets its
    // state back.
    const marked = op === 'pause' || op === 'sleep' ? this.mark(targets, op) : undefined;
    const tracked = TRACKED[op];
    let results: WorkerResult[];
    this.track(tracked, targets, 1);
    try {
      results = await this.callAll(targets, method, target, body, authorization, op);
      if (marked !== undefined) {
        const now = this.opts.clock();
        for (const r of results) {
          if (r.ok) continue;
          for (const w of this.at(r.url)) {
            if (op === 'pause') this.opts.state.recordPause(w, marked.get(w) === true, now);
            else if (marked.get(w) !== true) this.opts.state.sleepRefused(w, now);
          }
        }
      }
      await this.follow(op, query, results, authorization);
    } finally {
      this.track(tracked, targets, -1);
    }
    const failed = results.filter((r) => !r.ok && r.down !== true);
    this.opts.onAnswered?.(path, results.filter((r) => r.ok).length, results.length);
    return fleetAnswer(path, op, results, failed);
  }

  /** The call to every target, concurrently: each worker's status, message and `/is_*` answer. */
  private callAll(
    targets: ReadonlyMap<string, string[]>,
    method: 'GET' | 'POST',
    target: string,
    body: Buffer | undefined,
    authorization: string | undefined,
    op: Operation,
  ): Promise<WorkerResult[]> {
    return Promise.all(
      [...targets].map(async ([url, roles]): Promise<WorkerResult> => {
        const call = {
          url,
          method,
          path: target,
          body,
          authorization,
          timeoutMs: this.opts.timeoutMs,
        } as const;
        const a = await callWorker(this.agent, call);
        const ok = a.status >= 200 && a.status < 300;
        const value = ok ? flagOf(a.text, op) : undefined;
        const down = !ok && (a.status === 0 || a.status >= 500) && this.heldDown(url);
        return {
          url,
          roles,
          status: a.status,
          message: a.message,
          ok,
          ...(value !== undefined ? { value } : {}),
          ...(down ? { down } : {}),
        };
      }),
    );
  }

  /** A call setting `state` on each of `targets` starts (+1) or has ended (-1). */
  private track(
    state: ReportedState | undefined,
    targets: ReadonlyMap<string, string[]>,
    delta: 1 | -1,
  ): void {
    if (state === undefined) return;
    const calls = this.calls[state];
    const now = this.opts.clock();
    for (const [url, c] of calls) {
      if (c.inFlight === 0 && now - c.endedAt > SETTLED_MEMORY_MS) calls.delete(url);
    }
    for (const url of targets.keys()) {
      const c = calls.get(url) ?? { inFlight: 0, endedAt: now };
      c.inFlight += delta;
      c.endedAt = now;
      calls.set(url, c);
    }
  }

  /** Records every worker at `targets` paused (asleep); returns what each was before. */
  private mark(targets: ReadonlyMap<string, string[]>, op: 'pause' | 'sleep'): Map<Worker, boolean> {
    const before = new Map<Worker, boolean>();
    const now = this.opts.clock();
    for (const url of targets.keys()) {
      for (const w of this.at(url)) {
        if (op === 'pause') {
          before.set(w, w.paused);
          this.opts.state.recordPause(w, true, now);
        } else {
          before.set(w, w.asleep);
          this.opts.state.recordSleep(w, true, now);
        }
      }
    }
    return before;
  }

  /** The current members registered at `url`. */
  private at(url: string): Worker[] {
    return this.opts.members().filter((w) => w.url === url);
  }

  /** Every member at `url` is held down by the router's checks. */
  private heldDown(url: string): boolean {
    const { down } = this.opts;
    const workers = this.at(url);
    return down !== undefined && workers.length > 0 && workers.every(down);
  }

  /** Records what each worker that took the call now is (see the header). */
  private async follow(
    op: Operation,
    query: URLSearchParams,
    results: readonly WorkerResult[],
    authorization: string | undefined,
  ): Promise<void> {
    const { state, clock } = this.opts;
    let awake: Array<{ url: string; asleep: boolean | undefined }> = [];
    if (op === 'wake_up') {
      awake = await Promise.all(
        results
          .filter((r) => r.ok)
          .map(async (r) => {
            const call = {
              url: r.url,
              method: 'GET',
              path: '/is_sleeping',
              authorization,
              timeoutMs: this.opts.timeoutMs,
            } as const;
            const a = await callWorker(this.agent, call);
            return { url: r.url, asleep: a.status === 200 ? flagOf(a.text, 'is_sleeping') : undefined };
          }),
      );
    }
    const now = clock();
    for (const { url, asleep } of awake) {
      // Unread (the call failed, or an answer without the flag): a whole wake (no `tags`) woke it.
      const recorded = asleep ?? (query.has('tags') ? undefined : false);
      if (recorded !== undefined) for (const w of this.at(url)) state.recordSleep(w, recorded, now);
    }
    // `clear_cache` as vLLM's FastAPI reads a bool query parameter: pydantic's lax bool (`0`, `no`,
    // `off`, `False` are false), the last value when repeated.
    const clears =
      op === 'pause'
        ? query.get('mode') !== 'keep' && laxBool(query.getAll('clear_cache').at(-1) ?? 'true') !== false
        : op === 'reset';
    for (const r of results) {
      if (!r.ok) continue;
      for (const w of this.at(r.url)) {
        if (op === 'resume') state.recordPause(w, false, now);
        else if (op === 'sleep') state.recordSleep(w, true, now);
        else if (op === 'is_paused' && r.value !== undefined) state.recordPause(w, r.value, now);
        else if (op === 'is_sleeping' && r.value !== undefined) state.recordSleep(w, r.value, now);
        if (clears) state.cacheCleared(w);
      }
    }
  }
}

/**
 * The answer to the client (see the header): 200, the workers' own 4xx, 502, or 503 when every worker
 * is down; each worker listed.
 */
function fleetAnswer(
  path: string,
  op: Operation,
  results: readonly WorkerResult[],
  failed: readonly WorkerResult[],
): LocalAnswer {
  const details = `fleet_${path.slice(1)}`;
  const workers = results.map(({ url, roles, status, message, ok, value, down }) => ({
    url,
    roles,
    status,
    ...(!ok && message !== '' ? { message } : {}),
    ...(value !== undefined ? { [op]: value } : {}),
    ...(down === true ? { down } : {}),
  }));
  const up = results.filter((r) => r.down !== true);
  if (up.length === 0) {
    const message = `${path}: every worker is down (its health checks fail) and none could take it`;
    return { status: 503, body: { ...errorBody(message, 'service_unavailable', 503), workers }, details };
  }
  if (failed.length === 0) return { status: 200, body: { ...summary(op, up), workers }, details };
  const refused = failed.length === up.length && failed.every((r) => r.status >= 400 && r.status < 500);
  if (refused) {
    const same = failed.every((r) => r.status === failed[0]!.status);
    const status = same ? failed[0]!.status : 400;
    const hint = status === 404 ? ` (vLLM serves ${path} with VLLM_SERVER_DEV_MODE=1)` : '';
    return {
      status,
      body: {
        ...errorBody(`${failed[0]!.message || `status ${status}`}${hint}`, 'invalid_request_error', status),
        workers,
      },
      details,
    };
  }
  const message =
    `${path}: ${up.length - failed.length} of ${results.length} workers took it; failed: ` +
    failed.map((r) => `${r.url} (${r.status === 0 ? r.message : `status ${r.status}`})`).join(', ');
  return { status: 502, body: { ...errorBody(message, 'server_error', 502), workers }, details };
}

/** The fleet's answer, in the shape of vLLM's own where it has one. */
function summary(op: Operation, results: readonly WorkerResult[]): Record<string, unknown> {
  switch (op) {
    case 'pause':
      return { status: 'paused' };
    case 'resume':
      return { status: 'resumed' };
    case 'is_paused':
    case 'is_sleeping':
      return { [op]: results.every((r) => r.value === true) };
    default:
      return { status: 'ok' };
  }
}

/** `{"is_paused": true}` / `{"is_sleeping": true}` -> true; anything else -> undefined. */
function flagOf(text: string, op: Operation): boolean | undefined {
  if (op !== 'is_paused' && op !== 'is_sleeping') return undefined;
  try {
    const v = (JSON.parse(text) as Record<string, unknown>)[op];
    return typeof v === 'boolean' ? v : undefined;
  } catch {
    return undefined;
  }
}

function errorBody(message: string, type: string, code: number): { error: Record<string, unknown> } {
  return { error: { message, type, code } };
}

/** `http://h:p/` and `http://h:p` name one worker. */
function normaliseUrl(url: string): string {
  return url.replace(/\/+$/, '');
}
