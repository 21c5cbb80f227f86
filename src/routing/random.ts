/**
 * random: a uniformly random candidate, `floor(rng() * n)`.
 *
 * The rng (`() => number` in [0, 1), default Math.random) is injectable so tests are deterministic.
 * An rng returning 1 (out of contract) is clamped to the last candidate.
 */
import type { Decision, Policy, SelectionInput } from './policy.js';

export type Rng = () => number;

/** A random index in [0, n) from `rng`, clamped into range. */
export function randomIndex(rng: Rng, n: number): number {
  const i = Math.floor(rng() * n);
  return i < 0 ? 0 : i >= n ? n - 1 : i;
}

export class RandomPolicy implements Policy {
  readonly name = 'random' as const;

  constructor(private readonly rng: Rng = Math.random) {}

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const worker = workers[randomIndex(this.rng, workers.length)];
    if (worker === undefined) throw new RangeError('random: no candidate workers');
    return { worker, branch: 'random' };
  }
}
