/**
 * A persistent, role-specific pool: endpoint -> the live Worker of its current registration
 * generation (design sections 1-4).
 *
 * reconcile() brings membership in line with the registry snapshot, synchronously:
 *   same url + same generation -> keep the Worker (load, processed, health survive)
 *   same url + new generation  -> policy.removeWorker(old), fresh Worker, policy.addWorker(new)
 *   url gone                   -> policy.removeWorker(old), dropped from the pool
 *   new url                    -> fresh Worker, policy.addWorker(new)
 * A request still holding the old Worker keeps its reference; its release only touches that object.
 *
 * Served models (`candidatesFor`): a fleet may mix workers serving different models behind one router.
 * When the pool is given each worker's served model (the `model_name` label of its scraped /metrics,
 * vLLM's first `--served-model-name`), a request names a model, and some candidates are known to
 * serve exactly that name, only those are candidates (healthy ones; none when all of them are
 * unhealthy: a 503 rather than another model's 404); otherwise (no worker known to serve the name:
 * a LoRA adapter, a second served name, a worker not scraped yet, a single-model fleet whose
 * workers all match) every candidate is, as before. So it only ever narrows on positive knowledge,
 * and a fleet serving one model gets the same array back (the policies' per-array memos hold).
 *
 * INVARIANT (Node's equivalent of the design's pool lock): callers run reconcile -> select ->
 * guard acquisition -> policy.routed in ONE synchronous step, with no `await` in between, so no
 * other request can observe or install a different snapshot in the middle (see routing/selector.ts).
 */
import type { Role } from './role.js';
import { Worker } from './worker.js';
import type { Policy } from '../routing/policy.js';

/** What the pool needs from a registry entry. */
export interface MemberEntry {
  readonly url: string;
  readonly endpoint: string;
  readonly zmqAddress?: string;
  readonly generation: number;
  readonly metadata?: Readonly<Record<string, unknown>>;
  readonly bootstrapPort?: number;
}

export interface MemberSource {
  /** Live entries of one role. The pool skips work when the same array instance comes back. */
  snapshot(role: Role): readonly MemberEntry[];
}

export interface PoolHooks {
  onAdded?(worker: Worker): void;
  onRemoved?(worker: Worker, reason: 'departed' | 'replaced'): void;
  /** The model the worker serves, when known (see the header: `candidatesFor`). */
  servedModel?(worker: Worker): string | undefined;
}

export class WorkerPool {
  private readonly byUrl = new Map<string, Worker>();
  private ordered: readonly Worker[] = [];
  private lastSnapshot: readonly MemberEntry[] | undefined;
  /** The last candidates array handed out; reused while membership and health are unchanged. */
  private selectable: readonly Worker[] = [];

  constructor(
    readonly role: Role,
    readonly policy: Policy,
    private readonly source: MemberSource,
    private readonly hooks: PoolHooks = {},
  ) {}

  /** All members, in the snapshot's (stable, url) order. */
  get workers(): readonly Worker[] {
    return this.ordered;
  }

  get size(): number {
    return this.ordered.length;
  }

  /**
   * Members that may be selected (healthy, breaker closed), in member order. The same array comes
   * back until membership or some worker's health changes (policies memoize per-array indexes on it,
   * routing/cache-aware.ts): one allocation-free pass checks that the last array still holds exactly
   * the healthy members; only a change builds a new one. All healthy: the member array itself.
   */
  candidates(): readonly Worker[] {
    if (stillSelectable(this.ordered, this.selectable)) return this.selectable;
    let healthy = 0;
    for (const w of this.ordered) if (w.healthy) healthy++;
    this.selectable = healthy === this.ordered.length ? this.ordered : this.ordered.filter((w) => w.healthy);
    return this.selectable;
  }

  /** `candidates()` narrowed to the workers known to serve `model`, when any is (see the header). */
  candidatesFor(model: string): readonly Worker[] {
    const all = this.candidates();
    const served = this.hooks.servedModel;
    if (served === undefined || model === '') return all;
    // Knowledge comes from every member, healthy or not: when the workers serving a model are all
    // unhealthy, its requests get no worker (a 503), not another model's (a 404 there).
    let matching = 0;
    for (const w of this.ordered) if (served(w) === model) matching++;
    if (matching === 0 || matching === this.ordered.length) return all;
    return all.filter((w) => served(w) === model);
  }

  reconcile(): void {
    const snapshot = this.source.snapshot(this.role);
    if (snapshot === this.lastSnapshot) return;
    this.lastSnapshot = snapshot;

    const next: Worker[] = [];
    for (const entry of snapshot) {
      let worker = this.byUrl.get(entry.url);
      if (worker && worker.generation !== entry.generation) {
        this.remove(worker, 'replaced');
        worker = undefined;
      }
      if (!worker) {
        worker = new Worker({
          role: this.role,
          url: entry.url,
          endpoint: entry.endpoint,
          zmqAddress: entry.zmqAddress,
          generation: entry.generation,
          metadata: entry.metadata,
          bootstrapPort: entry.bootstrapPort,
        });
        this.byUrl.set(entry.url, worker);
        this.policy.addWorker?.(worker);
        this.hooks.onAdded?.(worker);
      }
      next.push(worker);
    }
    // Snapshot urls are unique: if the map holds more workers than the snapshot, some departed.
    if (this.byUrl.size > next.length) {
      const seen = new Set(snapshot.map((e) => e.url));
      for (const [url, worker] of this.byUrl) {
        if (!seen.has(url)) this.remove(worker, 'departed');
      }
    }
    this.ordered = next;
  }

  private remove(worker: Worker, reason: 'departed' | 'replaced'): void {
    this.byUrl.delete(worker.url);
    this.policy.removeWorker?.(worker);
    this.hooks.onRemoved?.(worker, reason);
  }
}

/** Whether `selectable` is exactly the healthy members of `members`, in order. O(members), no allocation. */
function stillSelectable(members: readonly Worker[], selectable: readonly Worker[]): boolean {
  let j = 0;
  for (const w of members) {
    if (!w.healthy) continue;
    if (selectable[j] !== w) return false;
    j++;
  }
  return j === selectable.length;
}
