/**
 * Records events and lets a test wait for the first one matching a predicate (already seen or still to
 * come): tests synchronise on what the code reports, never on sleeps.
 */
export class EventLog<T> {
  readonly events: T[] = [];
  private waiters: Array<{ from: number; match: (e: T) => boolean; resolve: (e: T) => void }> = [];

  readonly push = (event: T): void => {
    this.events.push(event);
    for (const w of [...this.waiters]) {
      if (w.match(event)) {
        this.waiters.splice(this.waiters.indexOf(w), 1);
        w.resolve(event);
      }
    }
  };

  /** Position to pass as `from` so that only later events count. */
  mark(): number {
    return this.events.length;
  }

  /** The first event at index >= `from` matching `match`; rejects after `timeoutMs` (default 30 s). */
  next(
    match: (e: T) => boolean,
    opts: { from?: number; timeoutMs?: number; what?: string } = {},
  ): Promise<T> {
    const from = opts.from ?? 0;
    const seen = this.events.slice(from).find(match);
    if (seen !== undefined) return Promise.resolve(seen);
    return new Promise<T>((resolve, reject) => {
      const waiter = {
        from,
        match,
        resolve: (e: T) => {
          clearTimeout(timer);
          resolve(e);
        },
      };
      const timeoutMs = opts.timeoutMs ?? 30_000;
      const timer = setTimeout(() => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1);
        reject(
          new Error(
            `no ${opts.what ?? 'matching event'} within ${timeoutMs} ms; events: ${JSON.stringify(this.events.slice(from))}`,
          ),
        );
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }
}
