/**
 * round_robin: the candidate at `cursor mod n`, with one cursor per requested model.
 *
 * select() only reads the cursor; routed() advances it, so a selection that is abandoned (e.g. the
 * guard could not be taken) does not skip a worker, and select() stays pure. When the candidate list
 * changes size (a worker turns unhealthy), `mod n` keeps the cursor in range; the rotation simply
 * continues over the new list.
 *
 * Per model: in a fleet mixing models, each model's candidates are the workers serving it
 * (workers/worker-pool.ts `candidatesFor`), and one shared cursor would pin alternating traffic (a
 * request for model A, one for B, ...: A sees only even cursor values, so with two workers always
 * the first). The model names are client input, so at most MAX_CURSORS are kept; past that they all
 * start over from 0.
 */
import type { Decision, Policy, SelectionInput } from './policy.js';

const MAX_CURSORS = 256;

export class RoundRobinPolicy implements Policy {
  readonly name = 'round_robin' as const;
  private readonly cursors = new Map<string, number>();

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const worker = workers[(this.cursors.get(input.model) ?? 0) % workers.length];
    if (worker === undefined) throw new RangeError('round_robin: no candidate workers');
    return { worker, branch: 'round_robin' };
  }

  routed(_decision: Decision, input: SelectionInput): void {
    const cursor = this.cursors.get(input.model);
    if (cursor === undefined && this.cursors.size >= MAX_CURSORS) this.cursors.clear();
    this.cursors.set(input.model, ((cursor ?? 0) + 1) % Number.MAX_SAFE_INTEGER);
  }
}
