/**
 * power_of_two ("power of two choices"): draw two DISTINCT random candidates, take the one with the
 * lower live load (ties by the shared tie-break: processed, then index). One candidate -> it.
 *
 * Distinctness: the second index is drawn from the n-1 others (`j = rand(n-1)`, skipping i), so the
 * policy never degenerates into a single random pick. Load is the router's own in-flight count per
 * worker (load guards), which the design keeps persistent across selections.
 */
import type { Worker } from '../workers/worker.js';
import type { Decision, Policy, SelectionInput } from './policy.js';
import { randomIndex, type Rng } from './random.js';
import { leastLoaded } from './tie-break.js';

export class PowerOfTwoPolicy implements Policy {
  readonly name = 'power_of_two' as const;

  constructor(private readonly rng: Rng = Math.random) {}

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const n = workers.length;
    if (n === 0) throw new RangeError('power_of_two: no candidate workers');
    if (n === 1) return { worker: workers[0] as Worker, branch: 'power_of_two' };
    const i = randomIndex(this.rng, n);
    let j = randomIndex(this.rng, n - 1);
    if (j >= i) j += 1;
    const chosen = leastLoaded(workers, [i, j]);
    return { worker: workers[chosen] as Worker, branch: 'power_of_two' };
  }
}
