/**
 * The router's lifecycle as ONE ordered list of steps (router.ts builds it). Each step is one
 * long-lived component's part in three phases:
 *
 *   start   steps in list order. If one throws, the steps already started are closed (reverse
 *           order) and the error is rethrown: a failed start leaks no socket or timer.
 *   drain   1. the drain flag turns on (readiness reports not-ready from here on);
 *           2. `stopIntake()` of every started step, in list order, once (gRPC readiness off,
 *              discovery closed: the registrations it made stop expiring);
 *           3. wait `graceMs` (load balancers and Envoy health checks notice; streams opened meanwhile
 *              are still served);
 *           4. `settle(timeoutMs)` of every started step: resolves true when in-flight work ended.
 *           drain() may be called again (e.g. drain(0), then drain(30_000)): steps 3 and 4 repeat.
 *   close   phases 1 and 2 of drain (unless a drain ran them), then `close({ drained })` of every
 *           started step in REVERSE list order (each once; an error is reported and the next step
 *           still closes). Idempotent:
 *           every call returns the same promise. `drained` tells a step a drain ran first (the gRPC
 *           server then lets open calls deliver their last replies for --close-grace-ms).
 *
 * Putting a component in this list is the whole of its lifecycle wiring: order in the list is start
 * order, and reverse order is close order, so "what closes first" is never implicit.
 */

export interface LifecycleStep {
  /** For logs and errors. */
  readonly name: string;
  start?(): Promise<void> | void;
  /** Drain phase 2: stop taking new work. Called at most once. */
  stopIntake?(): Promise<void> | void;
  /** Drain phase 4: true when the step's in-flight work has ended within `timeoutMs`. */
  settle?(timeoutMs: number): Promise<boolean>;
  /** Releases everything the step holds. Called at most once, only after a successful start. */
  close?(state: { readonly drained: boolean }): Promise<void> | void;
}

/** The one drain flag: set by the Lifecycle, read by readiness. */
export class DrainFlag {
  private on = false;

  get draining(): boolean {
    return this.on;
  }

  set(): void {
    this.on = true;
  }
}

export interface LifecycleOptions {
  /** Default drain timeout (--drain-timeout-ms). */
  readonly drainTimeoutMs: number;
  /** Default drain grace (--drain-grace-ms). */
  readonly drainGraceMs: number;
  readonly flag?: DrainFlag;
  /** An error while closing a step (logged by the caller; closing continues). */
  readonly onCloseError?: (step: string, err: unknown) => void;
  /** Waits `ms` (tests inject one that records the grace). Default: an unref'd timer. */
  readonly sleep?: (ms: number) => Promise<void>;
}

const realSleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms).unref());

export class Lifecycle {
  readonly flag: DrainFlag;
  private readonly started: LifecycleStep[] = [];
  private startCalled = false;
  private intakeStopped: Promise<void> | undefined;
  private drained = false;
  private closing: Promise<void> | undefined;

  constructor(
    readonly steps: readonly LifecycleStep[],
    private readonly opts: LifecycleOptions,
  ) {
    this.flag = opts.flag ?? new DrainFlag();
  }

  get draining(): boolean {
    return this.flag.draining;
  }

  /** Starts every step in order; on failure closes the started ones (reverse) and rethrows. */
  async start(): Promise<void> {
    if (this.startCalled) throw new Error('lifecycle already started');
    this.startCalled = true;
    for (const step of this.steps) {
      if (this.closing) throw new Error(`closed before ${step.name} started`);
      try {
        await step.start?.();
      } catch (err) {
        await this.close();
        throw err;
      }
      this.started.push(step);
      if (this.closing) {
        // close() ran while this step was starting: it must not outlive the router.
        await this.closeStarted();
        throw new Error(`closed while ${step.name} was starting`);
      }
    }
  }

  /** See the module comment. True when every step settled within `timeoutMs`. */
  async drain(timeoutMs = this.opts.drainTimeoutMs, graceMs = this.opts.drainGraceMs): Promise<boolean> {
    this.drained = true;
    await this.stopIntake();
    if (graceMs > 0) await (this.opts.sleep ?? realSleep)(graceMs);
    const settled = await Promise.all(
      this.started.map((step) => (step.settle ? step.settle(timeoutMs) : true)),
    );
    return settled.every(Boolean);
  }

  /** Stops the intake (if no drain did), then closes the started steps in reverse order. Idempotent. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      try {
        await this.stopIntake();
      } catch (err) {
        this.opts.onCloseError?.('stop intake', err);
      }
      await this.closeStarted();
    })();
    return this.closing;
  }

  private stopIntake(): Promise<void> {
    this.flag.set();
    this.intakeStopped ??= (async () => {
      for (const step of [...this.started]) await step.stopIntake?.();
    })();
    return this.intakeStopped;
  }

  private async closeStarted(): Promise<void> {
    const state = { drained: this.drained };
    for (let step = this.started.pop(); step !== undefined; step = this.started.pop()) {
      try {
        await step.close?.(state);
      } catch (err) {
        this.opts.onCloseError?.(step.name, err);
      }
    }
  }
}
