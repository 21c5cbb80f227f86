/**
 * Tells a restarted worker process from its scraped `process_start_time_seconds` (metrics-parse.ts),
 * per worker URL (one process: every role and data-parallel rank registered there).
 *
 * Why: a process that dies and comes back at the same URL without a new registration (a static
 * `--worker`; a ZMQ worker whose heartbeats resumed within the TTL; a container restarted in place)
 * keeps its registration generation, and health checks notice it only when they catch it down (three
 * failed 10 s checks by default: a restart under ~30 s is missed). The router then keeps the old
 * process's state: prefixes its tree believes cached, runtime LoRA adapters it believes loaded, load
 * and timing figures. Its start time tells: a page whose start time is LATER than any seen at the URL
 * is from another process (`observe` answers true).
 *
 * Only later counts: a URL that fronts several processes (a Service of several pods) alternates
 * between their start times, which would otherwise read as a restart at every other scrape; with the
 * latest kept, it reads as one at most. An earlier or equal value, or none (the page lacks the gauge),
 * changes nothing. The first value seen at a URL is its baseline, not a restart.
 *
 * Pure: no timers, metrics or logging. Bounded by the fleet: `retain` drops URLs no longer scraped.
 */
export class ProcessStarts {
  /** URL -> the latest start time seen there, epoch seconds. */
  private readonly latest = new Map<string, number>();

  /** Records a page's start time; true when it is a later process than any seen at `url` before. */
  observe(url: string, startSeconds: number | undefined): boolean {
    if (startSeconds === undefined || !Number.isFinite(startSeconds)) return false;
    const before = this.latest.get(url);
    if (before !== undefined && startSeconds <= before) return false;
    this.latest.set(url, startSeconds);
    return before !== undefined;
  }

  /** Forgets every URL not in `urls` (a worker that left: a new process there joins anew anyway). */
  retain(urls: { has(url: string): boolean }): void {
    for (const url of this.latest.keys()) if (!urls.has(url)) this.latest.delete(url);
  }

  get size(): number {
    return this.latest.size;
  }
}
