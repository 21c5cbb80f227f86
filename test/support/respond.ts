/**
 * Drives one response through a Dispatch as the ext_proc session does: headers (asking whether the
 * body is watched), the chunks when it is, the end. Returns whether the body was watched.
 */
import type { Dispatch, Dispatcher } from '../../src/extproc/dispatch.js';
import type { Decision } from '../../src/routing/policy.js';
import type { Worker } from '../../src/workers/worker.js';

/**
 * A dispatcher that sends every request to `worker` with `decision`, reading no response body of
 * its own (`watchResponseBody` false) unless `over` says otherwise: what response learners wrap.
 */
export function innerDispatcher(
  worker: Worker,
  decision: Decision,
  over: Partial<Dispatch> = {},
): Dispatcher {
  return {
    dispatch: () => ({
      worker,
      decision,
      setHeaders: {},
      watchResponseBody: () => false,
      finish: () => undefined,
      ...over,
    }),
  };
}

export function respond(d: Dispatch, status: number, chunks: Buffer[]): boolean {
  const watched = d.watchResponseBody?.(status) ?? true;
  d.onResponseStart?.(status, watched);
  if (watched) chunks.forEach((c, i) => d.transformResponseChunk?.(c, i === chunks.length - 1));
  d.finish({ kind: 'response', status });
  return watched;
}
