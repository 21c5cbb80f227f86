import type { RouteRequest } from '../../../src/extproc/dispatch.js';
import { PdDispatcher, type PdDispatcherOptions } from '../../../src/pd/pd-dispatcher.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import type { WorkerPool } from '../../../src/workers/worker-pool.js';

/** A small non-streamed completion, parsed, as the P/D dispatcher gets it. */
export const COMPLETION_REQ: RouteRequest = {
  method: 'POST',
  path: '/v1/completions',
  headers: {},
  inference: {
    kind: 'completions',
    model: 'm',
    stream: false,
    text: 'hello',
    json: { model: 'm', prompt: 'hello', max_tokens: 4 },
    promptBody: { model: 'm', prompt: 'hello', max_tokens: 4 },
    namesFreeResponse: false,
  },
};

/**
 * A PdDispatcher over `prefillPool` and `decodePool` as the wiring builds one: requests without a prefill
 * leg pass through a PoolDispatcher on the decode pool, one observer and the harness's clock for both.
 */
export function pdDispatcherOver(
  clock: () => number,
  prefillPool: WorkerPool,
  decodePool: WorkerPool,
  opts: Omit<PdDispatcherOptions, 'prefillPool' | 'decodePool' | 'passthrough' | 'observer' | 'clock'>,
): PdDispatcher {
  const observer = {};
  return new PdDispatcher({
    prefillPool,
    decodePool,
    passthrough: new PoolDispatcher({ pool: decodePool, observer, clock, decisionHeader: false }),
    observer,
    clock,
    ...opts,
  });
}
