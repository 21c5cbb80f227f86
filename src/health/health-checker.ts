/**
 * Active health checker: `GET <worker.url>/health` for every current pool member, in rounds.
 *
 * Schedule: the first round starts right after start(); each next round starts `intervalMs` after
 * the previous one ENDED (config `health-check-interval-ms`, 10000; 0 = checker off), so rounds never
 * overlap and a fleet of hung workers cannot pile checks up. Within a round, at most `concurrency`
 * (default 16) checks run at once, and workers sharing a URL (a prefill and a decode role of one
 * process) share one request.
 *
 * A check passes on a 2xx status with the body read to the end; anything else fails: another status,
 * a connect error, a reset, or no complete answer within `timeoutMs` (`health-check-timeout-ms`,
 * 5000; the whole request, body included), unless the timeout timer itself fired over 250 ms late
 * (the router's own event loop was blocked: util/loop-stall.ts), which is inconclusive and recorded
 * nowhere (`onCheckFailed` hears `router_stalled`). Results go to `health.recordCheck` (worker-health.ts owns
 * the thresholds), tagged with the Worker object the round started with, so a result that lands
 * after the worker was replaced by a new generation only touches the old object.
 *
 * Connections: one undici keep-alive Agent. Idle sockets close after 4 s, below the 5 s idle timeout of
 * Node and uvicorn servers, so a reused socket is not one the server is closing at the same moment.
 *
 * close() is idempotent: no new round starts, in-flight checks are aborted (their results are
 * dropped: the router stopping says nothing about the worker), the round is awaited, the Agent's
 * sockets are destroyed. The round timer is unref'd and never keeps the process alive.
 */
import { Agent, request } from 'undici';
import type { Worker } from '../workers/worker.js';
import { RouterBaseError } from '../errors.js';
import { LOOP_STALL_MS, timeoutWithLateness } from '../util/loop-stall.js';

export interface HealthCheckTarget {
  recordCheck(worker: Worker, ok: boolean, now: number): void;
  /** Called at the start of each round (time-driven breaker transitions). */
  refresh?(now: number): void;
}

export interface HealthCheckerOptions {
  /** Current pool members, read at the start of every round. */
  readonly workers: () => Iterable<Worker>;
  readonly health: HealthCheckTarget;
  /** Pause between rounds (ms); 0 disables the checker (start() does nothing). */
  readonly intervalMs: number;
  /** Whole-request timeout of one check (ms). */
  readonly timeoutMs: number;
  /** Checks in flight at once. Default 16. */
  readonly concurrency?: number;
  /** Default '/health'. */
  readonly path?: string;
  /** Time passed to the health state (same clock as the router's). Default performance.now. */
  readonly clock?: () => number;
  /** A check failed (for debug logs). `reason`: `status 503`, `timeout`, or an undici/system code. */
  readonly onCheckFailed?: (worker: Worker, reason: string) => void;
  /** A round failed outside a check (e.g. the `workers` callback threw); the next round still runs. */
  readonly onError?: (err: unknown) => void;
}

/** Idle keep-alive sockets close after this long (below common 5 s server idle timeouts). */
const KEEP_ALIVE_MS = 4_000;

/** The abort reason of a check that ran past --health-check-timeout-ms. */
export class HealthCheckTimeoutError extends RouterBaseError<'health_check_timeout'> {
  constructor(
    timeoutMs: number,
    /** How much later than armed the timer fired (a blocked event loop: util/loop-stall.ts). */
    readonly lateMs = 0,
  ) {
    super('health_check_timeout', `health check timed out after ${timeoutMs} ms`);
  }
}

export class HealthChecker {
  private readonly agent: Agent;
  private readonly inflight = new Set<AbortController>();
  private readonly concurrency: number;
  private readonly path: string;
  private readonly clock: () => number;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private started = false;
  private closed = false;
  private closing: Promise<void> | undefined;

  constructor(private readonly opts: HealthCheckerOptions) {
    if (!Number.isFinite(opts.intervalMs) || opts.intervalMs < 0)
      throw new RangeError('intervalMs must be >= 0');
    if (!Number.isFinite(opts.timeoutMs) || opts.timeoutMs <= 0)
      throw new RangeError('timeoutMs must be > 0');
    this.concurrency = opts.concurrency ?? 16;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError('concurrency must be an integer >= 1');
    }
    this.path = opts.path ?? '/health';
    this.clock = opts.clock ?? (() => performance.now());
    this.agent = new Agent({
      keepAliveTimeout: KEEP_ALIVE_MS,
      keepAliveMaxTimeout: KEEP_ALIVE_MS,
      connect: { timeout: opts.timeoutMs },
    });
  }

  /** Starts the rounds (no-op when intervalMs is 0, already started, or closed). */
  start(): void {
    if (this.started || this.closed || this.opts.intervalMs === 0) return;
    this.started = true;
    this.schedule(0);
  }

  /** Checks in flight right now (for tests and metrics). */
  get checksInFlight(): number {
    return this.inflight.size;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.closed = true;
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      for (const ac of this.inflight) ac.abort();
      await this.round;
      await this.agent.destroy();
    })();
    return this.closing;
  }

  private schedule(delayMs: number): void {
    if (this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.round = this.runRound()
        .catch((err: unknown) => this.opts.onError?.(err))
        .finally(() => {
          this.round = undefined;
          this.schedule(this.opts.intervalMs);
        });
    }, delayMs);
    this.timer.unref();
  }

  private async runRound(): Promise<void> {
    this.opts.health.refresh?.(this.clock());
    const byUrl = new Map<string, Worker[]>();
    for (const w of this.opts.workers()) {
      const group = byUrl.get(w.url);
      if (group) group.push(w);
      else byUrl.set(w.url, [w]);
    }
    const groups = [...byUrl.values()];
    let next = 0;
    const runner = async (): Promise<void> => {
      while (!this.closed && next < groups.length) {
        const group = groups[next++]!;
        const result = await this.check(group[0]!.url);
        if (this.closed) return;
        const now = this.clock();
        for (const w of group) {
          if (result.ok === undefined) {
            this.opts.onCheckFailed?.(w, 'router_stalled');
            continue;
          }
          if (!result.ok) this.opts.onCheckFailed?.(w, result.reason);
          this.opts.health.recordCheck(w, result.ok, now);
        }
      }
    };
    const runners: Promise<void>[] = [];
    for (let i = 0; i < Math.min(this.concurrency, groups.length); i++) runners.push(runner());
    await Promise.all(runners);
  }

  /** `ok: undefined`: inconclusive (the router's own loop stalled past the timeout; nothing recorded). */
  private async check(
    baseUrl: string,
  ): Promise<{ ok: true } | { ok: false; reason: string } | { ok: undefined }> {
    const ac = new AbortController();
    this.inflight.add(ac);
    const timer = timeoutWithLateness(this.opts.timeoutMs, (late) =>
      ac.abort(new HealthCheckTimeoutError(this.opts.timeoutMs, late)),
    );
    try {
      const res = await request(healthUrl(baseUrl, this.path), {
        method: 'GET',
        dispatcher: this.agent,
        signal: ac.signal,
      });
      // Read to the end (bounded: dump() discards at most 128 KiB, then drops the socket).
      await res.body.dump({ limit: 128 * 1024, signal: ac.signal });
      if (res.statusCode >= 200 && res.statusCode < 300) return { ok: true };
      return { ok: false, reason: `status ${res.statusCode}` };
    } catch (err) {
      const reason: unknown = ac.signal.reason;
      if (reason instanceof HealthCheckTimeoutError) {
        return reason.lateMs > LOOP_STALL_MS ? { ok: undefined } : { ok: false, reason: 'timeout' };
      }
      const code = (err as { code?: unknown }).code;
      return { ok: false, reason: typeof code === 'string' ? code : (err as Error).message };
    } finally {
      clearTimeout(timer);
      this.inflight.delete(ac);
    }
  }
}

function healthUrl(base: string, path: string): string {
  return base.replace(/\/+$/, '') + (path.startsWith('/') ? path : `/${path}`);
}
