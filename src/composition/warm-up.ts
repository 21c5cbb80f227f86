/**
 * Warm-up: a router (a new replica, or one that restarted) is not ready until it has rebuilt its
 * picture of the fleet from the workers themselves. Each component that learns from the workers
 * contributes one condition (discovery listed, every worker's load scraped once, KV-event streams
 * replayed); the router reports ready (gRPC health SERVING for Envoy's health checks, `/readyz`)
 * only once every condition holds, so Envoy never sends a stream to a replica that would route from
 * a blank picture while its peers route from a full one.
 *
 * Conditions are polled every `pollMs` (default 50) until all hold, then never again: warm-up happens
 * once per process. `timeoutMs` bounds it: a worker that never answers must not keep a replica out
 * forever, so past the timeout the router becomes ready anyway and `timedOut` names the conditions
 * that were still pending (logged by the caller). No condition = ready at start.
 *
 * The poll timer is unref'd and cleared on completion and on close().
 */

export interface WarmUpCondition {
  /** For /readyz and logs, e.g. `worker metrics scraped`. */
  readonly name: string;
  ready(): boolean;
}

export interface WarmUpOptions {
  timeoutMs: number;
  pollMs?: number;
  /** Called once, when every condition holds or the timeout passed. */
  onDone?: (result: { timedOut: readonly string[] }) => void;
  /** Monotonic milliseconds (tests inject a fake). */
  clock?: () => number;
}

export class WarmUp {
  private readonly conditions: WarmUpCondition[] = [];
  private timer: NodeJS.Timeout | undefined;
  private started = false;
  private finished = false;
  private startedAt = 0;

  constructor(private readonly opts: WarmUpOptions) {}

  /** Adds a condition; only before start(). */
  add(condition: WarmUpCondition): void {
    if (this.started) throw new Error('warm-up already started');
    this.conditions.push(condition);
  }

  get done(): boolean {
    return this.finished;
  }

  /** Names of the conditions that do not hold yet ([] once done). */
  pending(): string[] {
    if (this.finished) return [];
    return this.conditions.filter((c) => !safeReady(c)).map((c) => c.name);
  }

  start(): void {
    if (this.started) return;
    this.started = true;
    this.startedAt = this.now();
    if (this.check()) return;
    this.timer = setInterval(() => this.check(), this.opts.pollMs ?? 50);
    this.timer.unref();
  }

  /** Evaluates the conditions now; true when warm-up is over. Exposed for tests with a fake clock. */
  check(): boolean {
    if (this.finished) return true;
    if (!this.started) return false;
    const pending = this.pending();
    const timedOut = this.now() - this.startedAt >= this.opts.timeoutMs;
    if (pending.length > 0 && !timedOut) return false;
    this.finished = true;
    this.close();
    this.opts.onDone?.({ timedOut: pending });
    return true;
  }

  close(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  private now(): number {
    return (this.opts.clock ?? (() => performance.now()))();
  }
}

/** A condition that throws is not ready (and never crashes the poll). */
function safeReady(c: WarmUpCondition): boolean {
  try {
    return c.ready();
  } catch {
    return false;
  }
}
