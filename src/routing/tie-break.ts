/**
 * The one "least loaded" rule every policy uses: minimum by (load, processed, index).
 *
 * `load` is the live in-flight count (load guards held) and the decodes on their way to the worker
 * (workers/worker.ts selectionLoad). Among equally loaded workers the one that has completed fewer
 * requests wins, then the lower index in `input.workers`. Without the
 * `processed` key, equal-load traffic would always pick the first worker of the snapshot (the
 * reference router's bug fixed by the design); with it, cold traffic spreads round the pool even when
 * requests complete before the next one arrives (loads all back to 0).
 */
import { selectionLoad, type Worker } from '../workers/worker.js';

/**
 * Index (into `workers`) of the least-loaded worker, over `indices` when given (else all workers).
 * Throws a RangeError when there is no candidate: policies are never called with none.
 */
export function leastLoaded(workers: readonly Worker[], indices?: readonly number[]): number {
  const count = indices === undefined ? workers.length : indices.length;
  let best = -1;
  let bestLoad = 0;
  let bestProcessed = 0;
  for (let k = 0; k < count; k++) {
    const i = indices === undefined ? k : (indices[k] as number);
    const worker = workers[i];
    if (worker === undefined) throw new RangeError(`leastLoaded: no worker at index ${i}`);
    const load = selectionLoad(worker);
    const processed = worker.processed;
    if (
      best === -1 ||
      load < bestLoad ||
      (load === bestLoad && (processed < bestProcessed || (processed === bestProcessed && i < best)))
    ) {
      best = i;
      bestLoad = load;
      bestProcessed = processed;
    }
  }
  if (best === -1) throw new RangeError('leastLoaded: no candidate workers');
  return best;
}
