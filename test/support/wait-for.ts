/**
 * Polls a condition instead of sleeping: resolves as soon as `predicate()` is truthy, rejects after
 * `timeoutMs` (default 15000: a condition met at once costs nothing more, and CI runs on a loaded
 * 2-core machine where a child process or Envoy can take seconds) with the last thrown error or a
 * timeout error. Poll interval defaults to
 * 5 ms. The number of polls is bounded by timeoutMs / intervalMs. The timer is cleared on every exit.
 */
export interface WaitForOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Included in the timeout error. */
  message?: string;
}

export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  opts: WaitForOptions = {},
): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 15_000;
  const intervalMs = opts.intervalMs ?? 5;
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  for (;;) {
    try {
      if (await predicate()) return;
      lastError = undefined;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const what = opts.message ?? 'condition';
      throw new Error(`waitFor: ${what} not met within ${timeoutMs} ms`, { cause: lastError });
    }
    await new Promise<void>((resolve) => setTimeout(resolve, intervalMs));
  }
}
