/**
 * The warn line per failed prefill leg (PdObserver.prefillFailed): which prefill worker, how it failed,
 * and the ids that find the request in Envoy's access log (`requestId`, its x-request-id) and in the
 * prefill worker's own log (`prefillRequestId`, the P/D request id its leg carried). At most one line
 * per worker per `intervalMs`, reporting the failures held back since (`suppressed`), so a dead
 * prefill worker that fails every request cannot flood the log; the failures are all counted in the
 * metrics (`vllm_router_pd_errors_total`, `vllm_router_pd_prefill_duration_seconds`).
 */
import type { Logger } from 'pino';
import { LogThrottle } from '../observability/log-throttle.js';
import type { PdObserver } from './pd-dispatcher.js';

export const PREFILL_FAILURE_LOG_INTERVAL_MS = 60_000;

export function prefillFailureLog(
  logger: Logger,
  clock: () => number,
  intervalMs: number = PREFILL_FAILURE_LOG_INTERVAL_MS,
): NonNullable<PdObserver['prefillFailed']> {
  const throttle = new LogThrottle(intervalMs);
  return (worker, error, ids) => {
    const suppressed = throttle.take(worker.key, clock());
    if (suppressed === undefined) return;
    logger.warn(
      {
        worker: worker.url,
        ...(worker.dpRank !== undefined ? { dpRank: worker.dpRank } : {}),
        error: error.kind,
        ...(error.status !== undefined ? { status: error.status } : {}),
        err: error.message,
        requestId: ids.requestId,
        prefillRequestId: ids.prefillRequestId,
        suppressed,
      },
      'prefill leg failed',
    );
  };
}
