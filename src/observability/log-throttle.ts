/**
 * At most one log line per key (a worker, a sender) per interval, so a source that fails on every
 * request cannot flood the log: take() says whether a line may go out now, and how many were held
 * back since the key's last one (for the line to report). Pure: the caller passes the time. Holds at
 * most `maxKeys` keys; the one that logged least recently is forgotten first.
 */
export class LogThrottle {
  /** Per key: when its last line went out, and the lines held back since. In order of that time. */
  private readonly keys = new Map<string, { at: number; suppressed: number }>();

  constructor(
    private readonly intervalMs: number,
    private readonly maxKeys = 1024,
  ) {}

  /** The number of lines held back since the key's last one when a line may go out now; else undefined. */
  take(key: string, now: number): number | undefined {
    const state = this.keys.get(key);
    if (state !== undefined && now - state.at < this.intervalMs) {
      state.suppressed++;
      return undefined;
    }
    this.keys.delete(key);
    this.keys.set(key, { at: now, suppressed: 0 });
    if (this.keys.size > this.maxKeys) {
      const oldest = this.keys.keys().next().value;
      if (oldest !== undefined) this.keys.delete(oldest);
    }
    return state?.suppressed ?? 0;
  }
}
