/**
 * least_load: the candidate with the fewest in-flight requests, ties by (processed, index)
 * (see tie-break.ts), so equal-load traffic spreads instead of piling onto the first worker.
 */
import type { Worker } from '../workers/worker.js';
import type { Decision, Policy, SelectionInput } from './policy.js';
import { leastLoaded } from './tie-break.js';

export class LeastLoadPolicy implements Policy {
  readonly name = 'least_load' as const;

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    return { worker: workers[leastLoaded(workers)] as Worker, branch: 'least_load' };
  }
}
