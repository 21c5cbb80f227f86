/**
 * RegistryJanitor: periodically removes expired registrations and reports them.
 *
 * Every `intervalMs` (default 1000 ms: a fifth of the default 5 s TTL, so a dead worker leaves the
 * registry's memory within ~1 s of expiring) it calls `registry.cleanup()` and, when something was
 * removed, `onExpired(entries)`. Routing does not depend on this pass: `snapshot()` already excludes
 * expired entries; the janitor bounds memory and drives removal notifications (metrics, logs, pools).
 *
 * The timer is `.unref()`ed. An exception thrown by `onExpired`, or by a registry listener while
 * `cleanup()` notifies it, must not kill the process from a timer callback, so it is passed to `onError` (wire it to the logger in the composition root; without it
 * the exception is dropped). `close()` is idempotent.
 */
import type { RegistryEntry, ServiceRegistry } from './service-registry.js';

export interface RegistryJanitorOptions {
  registry: ServiceRegistry;
  /** Default 1000 ms. */
  intervalMs?: number;
  onExpired?: (entries: RegistryEntry[]) => void;
  onError?: (err: unknown) => void;
}

export const DEFAULT_JANITOR_INTERVAL_MS = 1000;

export class RegistryJanitor {
  private readonly opts: RegistryJanitorOptions;
  private timer: NodeJS.Timeout | undefined;

  constructor(opts: RegistryJanitorOptions) {
    const intervalMs = opts.intervalMs ?? DEFAULT_JANITOR_INTERVAL_MS;
    if (!(intervalMs > 0)) throw new RangeError(`intervalMs must be > 0, got ${intervalMs}`);
    this.opts = opts;
    this.timer = setInterval(() => this.runOnce(), intervalMs);
    this.timer.unref();
  }

  /** One cleanup pass (also used by tests). Returns the removed entries. */
  runOnce(): RegistryEntry[] {
    let expired: RegistryEntry[];
    try {
      expired = this.opts.registry.cleanup();
    } catch (err) {
      // A registry listener (pools, subscriptions) threw while the entries went: not out of the timer.
      this.opts.onError?.(err);
      return [];
    }
    if (expired.length > 0) {
      try {
        this.opts.onExpired?.(expired);
      } catch (err) {
        this.opts.onError?.(err);
      }
    }
    return expired;
  }

  /** Idempotent: stops the timer. */
  close(): void {
    if (this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }
}
