/**
 * A timeout timer that fired much later than armed says the process's own event loop was blocked (a long
 * synchronous task, CPU starvation), not that the peer was slow: the answer may have been on the socket
 * in time. Probes of workers (`/metrics` scrapes, `/health` checks) treat such a timeout as inconclusive
 * rather than as a failure, so a stalled router never marks a healthy fleet down.
 */
export const LOOP_STALL_MS = 250;

/** Arms `onTimeout(lateMs)` after `ms`; `lateMs` is how much later than `ms` the timer actually fired. */
export function timeoutWithLateness(ms: number, onTimeout: (lateMs: number) => void): NodeJS.Timeout {
  const armed = performance.now();
  const timer = setTimeout(() => onTimeout(performance.now() - armed - ms), ms);
  timer.unref();
  return timer;
}
