import type { BlockStoredEvent } from '../../../src/kv-events/kv-event-decoder.js';
import { parseKvEventSources, workerKey } from '../../../src/kv-events/kv-event-sources.js';
import { KvEventSubscriptions } from '../../../src/kv-events/kv-event-subscriptions.js';
import type { Decision, Policy, SelectionInput } from '../../../src/routing/policy.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import { Worker } from '../../../src/workers/worker.js';
import { seededRandom } from '../../../src/util/seeded-random.js';

/** Workers w0..w(n-1) at distinct URLs, generation 1, optional initial loads. */
export function makeWorkers(n: number, loads: readonly number[] = []): Worker[] {
  return Array.from({ length: n }, (_, i) => {
    const w = makeWorker(i);
    w.load = loads[i] ?? 0;
    return w;
  });
}

export function makeWorker(i: number, generation = 1): Worker {
  const port = 8000 + i;
  return new Worker({
    role: 'regular',
    url: `http://10.0.0.1:${port}`,
    endpoint: `10.0.0.1:${port}`,
    generation,
  });
}

export function input(workers: readonly Worker[], over: Partial<SelectionInput> = {}): SelectionInput {
  return { workers, model: 'm', text: '', headers: {}, ...over };
}

/**
 * Does what a pool does in one synchronous step: select, take the guard, routed. Returns the decision
 * and the guard (release it to model completion).
 */
export function route(
  policy: Policy,
  sel: SelectionInput,
  nowMs = 0,
): { decision: Decision; guard: LoadGuard } {
  const decision = policy.select(sel);
  const guard = new LoadGuard(decision.worker, sel.sequences);
  policy.routed?.(decision, sel, nowMs);
  return { decision, guard };
}

/** A deterministic rng cycling through the given values. */
export function sequenceRng(values: readonly number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] as number;
}

export const seededRng = seededRandom;

export function counts(ids: Iterable<string>): Map<string, number> {
  const out = new Map<string, number>();
  for (const id of ids) out.set(id, (out.get(id) ?? 0) + 1);
  return out;
}

/**
 * KV-event subscriptions for `publishing` workers whose publishers are never started (an endpoint
 * nobody binds: ZMQ just retries), so a test applies decoded events to `index` directly, as a
 * subscriber would. Close it when done.
 */
export function unstartedSubscriptions(
  workers: readonly Worker[],
  publishing: readonly Worker[] = workers,
): KvEventSubscriptions {
  const rules = parseKvEventSources({
    sources: publishing.map((w) => `${w.url}=tcp://127.0.0.1:9`),
    replays: [],
    defaultPort: 0,
    defaultReplayPort: 0,
    dpSize: 1,
  });
  const subs = new KvEventSubscriptions({ rules, syncIntervalMs: 0 });
  subs.sync(workers);
  return subs;
}

/**
 * Worker `i`'s engine stores the first `blocks` full blocks of `ids` (engine hashes 1000 * (i + 1) + b),
 * block 0 salted with `salt` as the decoder renders vLLM's per-block extra keys; applied to the index
 * as its subscriber would.
 */
export function storeBlocks(
  subs: KvEventSubscriptions,
  workers: readonly Worker[],
  i: number,
  ids: readonly number[],
  blocks: number,
  blockSize: number,
  salt?: string,
  /** Receives the own keys of the stored blocks (what the subscriber's `stored` hook reports). */
  stored?: number[],
): void {
  const event: BlockStoredEvent = {
    type: 'stored',
    hashes: Array.from({ length: blocks }, (_, b) => 1000 * (i + 1) + b),
    parent: undefined,
    tokens: ids.slice(0, blocks * blockSize),
    blockSize,
    medium: 'GPU',
    loraName: undefined,
    extraKeys:
      salt === undefined
        ? undefined
        : Array.from({ length: blocks }, (_, b) => (b === 0 ? `["${salt}"]` : '')),
  };
  subs.index.apply(`${workerKey((workers[i] as Worker).url)}#0`, [event], stored);
}
