/**
 * Starts `n` simulators on ephemeral ports (tests, demo, benchmarks) and closes them together.
 * `opts` is shared by all, or a function of the index for per-simulator roles/ids. If any start fails,
 * the ones already started are closed before the error is rethrown. Default ids: `sim-<index>`.
 */
import { startSimulator, type Simulator, type SimulatorOptions } from './simulator.js';

export interface SimulatorCluster {
  readonly sims: readonly Simulator[];
  /** Closes every simulator; idempotent. */
  close(): Promise<void>;
}

export async function startCluster(
  n: number,
  opts: SimulatorOptions | ((index: number) => SimulatorOptions) = {},
): Promise<SimulatorCluster> {
  if (!Number.isInteger(n) || n < 0) throw new RangeError('cluster size must be an integer >= 0');
  const optionsOf = (i: number): SimulatorOptions => {
    const o = typeof opts === 'function' ? opts(i) : opts;
    return { id: `sim-${i}`, ...o };
  };
  const settled = await Promise.allSettled(Array.from({ length: n }, (_, i) => startSimulator(optionsOf(i))));
  const sims = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= Promise.all(sims.map((s) => s.close())).then(() => undefined);
    return closing;
  };
  const failure = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  if (failure) {
    await close();
    throw failure.reason;
  }
  return { sims, close };
}
