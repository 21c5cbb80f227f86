/**
 * round_robin: the candidate at `cursor mod n`.
 *
 * select() only reads the cursor; routed() advances it, so a selection that is abandoned (e.g. the
 * guard could not be taken) does not skip a worker, and select() stays pure. When the candidate list
 * changes size (a worker turns unhealthy), `mod n` keeps the cursor in range; the rotation simply
 * continues over the new list.
 */
import type { Decision, Policy, SelectionInput } from './policy.js';

export class RoundRobinPolicy implements Policy {
  readonly name = 'round_robin' as const;
  private cursor = 0;

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const worker = workers[this.cursor % workers.length];
    if (worker === undefined) throw new RangeError('round_robin: no candidate workers');
    return { worker, branch: 'round_robin' };
  }

  routed(): void {
    this.cursor = (this.cursor + 1) % Number.MAX_SAFE_INTEGER;
  }
}
