/**
 * round_robin: the candidate at `cursor mod n`, with one cursor per candidate list.
 *
 * select() only reads the cursor; routed() advances it, so a selection that is abandoned (e.g. the
 * guard could not be taken) does not skip a worker, and select() stays pure.
 *
 * Per candidate list: in a fleet mixing models, each model's candidates are the workers serving it
 * (workers/worker-pool.ts `candidatesFor` hands back one array per model until membership, health or
 * what the workers serve changes), and one shared cursor would pin alternating traffic (a request
 * for model A, one for B, ...: A sees only even cursor values, so with two workers always the first).
 * A list seen for the first time starts where the shared count of routed requests is, not at 0, so
 * lists that appear together (a hundred adapters with a request each, a candidate list rebuilt when
 * a worker's health changes) do not all start on their first worker. A single-model fleet has one
 * list and rotates exactly as one cursor did. The cursors live in a WeakMap keyed by the lists: a
 * list the pool dropped takes its cursor with it.
 */
import type { Worker } from '../workers/worker.js';
import type { Decision, Policy, SelectionInput } from './policy.js';

export class RoundRobinPolicy implements Policy {
  readonly name = 'round_robin' as const;
  private readonly cursors = new WeakMap<readonly Worker[], number>();
  /** Requests routed so far (where a new list's cursor starts). */
  private routedCount = 0;

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const worker = workers[this.cursorOf(workers) % workers.length];
    if (worker === undefined) throw new RangeError('round_robin: no candidate workers');
    return { worker, branch: 'round_robin' };
  }

  routed(_decision: Decision, input: SelectionInput): void {
    this.cursors.set(input.workers, (this.cursorOf(input.workers) + 1) % Number.MAX_SAFE_INTEGER);
    this.routedCount = (this.routedCount + 1) % Number.MAX_SAFE_INTEGER;
  }

  private cursorOf(workers: readonly Worker[]): number {
    return this.cursors.get(workers) ?? this.routedCount;
  }
}
