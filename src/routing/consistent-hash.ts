/**
 * consistent_hash: session stickiness by hashing a request key onto a ring of workers.
 *
 * Key (first present, non-empty): header `x-session-id`, header `x-claude-code-session-id` (Claude Code
 * names its coding session on every request), header `x-user-id`, body `user`, body `session_id`,
 * body `prompt_cache_key` (OpenAI's key for requests that share a prefix, which agents such as Codex
 * set per conversation) (strings, or finite numbers as their decimal text). The key's hash (hash-ring.ts)
 * picks the owner of the next of the ring's points, 160 virtual nodes per worker. Workers are placed
 * by URL, so a worker re-registered at the same URL (a new generation, a new Worker id) takes over
 * the same arcs. The ring is rebuilt on addWorker/removeWorker (pool reconciliation).
 *
 * Branches:
 * - `hash`: the key's owner is among the candidates;
 * - `hash_fallback`: the owner is not a candidate (unhealthy, breaker open, gone) -> the NEXT point on
 *   the ring whose worker is a candidate (so one worker's keys spread over the others in ring order,
 *   not onto "the first healthy worker"); also when no ring member is a candidate -> least loaded;
 * - `no_key`: the request has no key -> least loaded (tie-break.ts).
 */
import type { Worker } from '../workers/worker.js';
import { HashRing, hash32 } from './hash-ring.js';
import type { Decision, Policy, SelectionInput } from './policy.js';
import { leastLoaded } from './tie-break.js';

export const VIRTUAL_NODES_PER_WORKER = 160;

/** The request's stickiness key, or undefined. */
export function sessionKey(input: Pick<SelectionInput, 'headers' | 'body'>): string | undefined {
  return (
    keyOf(input.headers['x-session-id']) ??
    keyOf(input.headers['x-claude-code-session-id']) ??
    keyOf(input.headers['x-user-id']) ??
    keyOf(input.body?.['user']) ??
    keyOf(input.body?.['session_id']) ??
    keyOf(input.body?.['prompt_cache_key'])
  );
}

function keyOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value.length > 0 ? value : undefined;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}

export class ConsistentHashPolicy implements Policy {
  readonly name = 'consistent_hash' as const;
  private readonly ring = new HashRing(VIRTUAL_NODES_PER_WORKER);

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    const key = sessionKey(input);
    if (key === undefined) return { worker: workers[leastLoaded(workers)] as Worker, branch: 'no_key' };
    const index = new Map<string, number>();
    for (let i = 0; i < workers.length; i++) index.set((workers[i] as Worker).id, i);
    const hit = this.ring.find(hash32(key), (id) => index.has(id));
    if (hit === undefined)
      return { worker: workers[leastLoaded(workers)] as Worker, branch: 'hash_fallback' };
    return {
      worker: workers[index.get(hit.id) as number] as Worker,
      branch: hit.fellThrough ? 'hash_fallback' : 'hash',
    };
  }

  addWorker(worker: Worker): void {
    this.ring.set(worker.id, worker.key);
  }

  removeWorker(worker: Worker): void {
    this.ring.delete(worker.id);
  }

  /** Worker ids in the fallback order of `key` (owner first); for tests and diagnostics. */
  ringOrder(key: string): string[] {
    return this.ring.ownersFrom(hash32(key));
  }
}
