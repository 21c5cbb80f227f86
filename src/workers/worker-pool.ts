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
 * Data-parallel servers (data-parallel.ts): an entry whose server has N > 1 ranks the pool schedules
 * becomes N Workers, one per rank (key `<url>@<rank>`), all of the entry's generation, in rank order;
 * a change of N is a change of membership (the ranks that left are removed, new ones added).
 *
 * Served models (`candidatesFor`): a fleet may mix workers serving different models, and LoRA adapters
 * on them, behind one router. When the pool is told what each worker serves (served-models.ts: its
 * `/v1/models` list, else its metrics' `model_name` label) and some workers are known to serve the
 * request's model (as a base name, or as an adapter, with its base model's siblings), only those
 * (healthy ones; none when all of them are unhealthy: a 503 rather than another model's 404) are
 * candidates; when nothing is known of the name, or every member serves it, every candidate is, as
 * before. The narrowed array is memoized per model until membership, health or what the workers serve
 * changes, so the policies' per-array memos hold, and a fleet serving one model gets the candidates
 * array itself back.
 *
 * Context length (`candidatesFor`'s `size`): vLLM refuses (400) a request whose prompt and output
 * tokens exceed its `--max-model-len`, which its `/v1/models` cards report as `max_model_len`. In a
 * fleet whose workers of one model were started with different lengths, a request estimated longer
 * than some of them (prompt characters / the model's characters per token, plus its `max_tokens`)
 * goes only to those that take it. When none does, every candidate stays (the worker's own 400 then
 * says by how much: the estimate is no tokenizer). A fleet whose every worker takes it pays one
 * comparison with the memoized shortest length.
 *
 * Paused engines (`candidatesFor`): a worker vLLM's generation is paused on (`POST /pause` forwarded
 * by routing/fleet-control.ts, or its `/is_paused` read by health/pause-poller.ts) holds its requests
 * until `POST /resume`; while some candidates are
 * paused and some are not, only the others are candidates (a rolling weight update moves traffic off
 * the engine being updated); when all are paused, all stay (the requests wait there, as sent directly).
 *
 * INVARIANT (Node's equivalent of the design's pool lock): callers run reconcile -> select ->
 * guard acquisition -> policy.routed in ONE synchronous step, with no `await` in between, so no
 * other request can observe or install a different snapshot in the middle (see routing/selector.ts).
 */
import type { Role } from './role.js';
import { rankedKey, Worker } from './worker.js';
import type { Policy } from '../routing/policy.js';
import { maxModelLenOf, servingRule, type ServedModels } from './served-models.js';
import { scheduledRanks } from './data-parallel.js';

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
  /** What each worker serves, when known (see the header: `candidatesFor`). */
  readonly models?: ModelKnowledge;
  /** Estimated tokens of `chars` characters of `model`'s prompt text (context-length fit). */
  readonly tokensOf?: (model: string, chars: number) => number;
  /** A request was kept off workers too short for it (`fitted`), or found none long enough. */
  onContextFit?(role: Role, fitted: boolean): void;
  /** Ranks of a server whose metadata names none (`--intra-node-data-parallel-size`). Default 1. */
  readonly dataParallelSize?: number;
}

/** What a request needs of a worker's context length (see the header). */
export interface ContextNeed {
  /** Characters of its routing text. */
  readonly chars: number;
  /** Its `max_tokens` (or `max_completion_tokens`, `max_output_tokens`); 0 when unset. */
  readonly outputTokens: number;
}

/** What the pool reads of the workers' served models (served-models.ts `ModelCatalog`, bound to URLs). */
export interface ModelKnowledge {
  /** Changes whenever what some worker serves does. */
  readonly version: number;
  of(worker: Worker): ServedModels | undefined;
}

/** candidatesFor's answer for one model, valid for one member list, candidates array and knowledge version. */
interface ModelMemo {
  readonly members: readonly Worker[];
  readonly all: readonly Worker[];
  readonly version: number;
  readonly workers: readonly Worker[];
  /** The shortest `max_model_len` the workers report for the model (undefined: none reports one). */
  readonly shortest: number | undefined;
  /** What the members' lists say of the model (see `served`). */
  readonly served: ModelServed;
}

/** What a pool's members are known to serve of one model (WorkerPool `served`). */
export type ModelServed = 'served' | 'unserved' | 'unknown';

/** The most models whose narrowed candidates are remembered at once (request models are client input). */
const MODEL_MEMO_SIZE = 64;

export class WorkerPool {
  /** Worker.key -> Worker. */
  private readonly byKey = new Map<string, Worker>();
  private ordered: readonly Worker[] = [];
  private lastSnapshot: readonly MemberEntry[] | undefined;
  /** The last candidates array handed out; reused while membership and health are unchanged. */
  private selectable: readonly Worker[] = [];
  /** preferUnpaused's last answer: the candidates it narrowed and the workers left. */
  private unpausedMemo: { from: readonly Worker[]; to: readonly Worker[] } | undefined;
  /** candidatesFor's last answer per model, valid for one member list, candidates array and knowledge version. */
  private readonly byModel = new Map<string, ModelMemo>();

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

  /** Whether `worker` is the pool's live Worker at its key (as of the last reconcile). */
  holds(worker: Worker): boolean {
    return this.byKey.get(worker.key) === worker;
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

  /**
   * `candidates()` narrowed to the workers known to serve `model`, when any is, and to those whose
   * context length takes the request (`need`), when some do (see the header). `report`: tell the
   * onContextFit hook (once per request: the selection's call, not the checks around it).
   */
  candidatesFor(model: string, need?: ContextNeed, report = false): readonly Worker[] {
    return this.preferUnpaused(this.serving(model, need, report));
  }

  /**
   * `workers` without those vLLM's generation is paused on (`Worker.paused`), when some are paused
   * and some are not: a paused
   * engine holds its requests until `POST /resume`, so during a rolling weight update they go to the
   * others. All or none paused: `workers` itself. The same array comes back while the answer holds.
   */
  private preferUnpaused(workers: readonly Worker[]): readonly Worker[] {
    let paused = 0;
    for (const w of workers) if (w.paused) paused++;
    if (paused === 0 || paused === workers.length) return workers;
    const last = this.unpausedMemo;
    if (last !== undefined && last.from === workers && stillUnpaused(workers, last.to)) return last.to;
    const to = workers.filter((w) => !w.paused);
    this.unpausedMemo = { from: workers, to };
    return to;
  }

  /**
   * What the members' `/v1/models` lists say of `model`: `served` (some member serves it, as a base
   * name or an adapter: candidatesFor narrows to those), `unserved` (every member has a list, none
   * serves it), else `unknown` (no member, a member not read yet, or one known by its metrics label
   * alone, which names only its first served name: it may serve it).
   */
  served(model: string): ModelServed {
    const models = this.hooks.models;
    if (models === undefined || model === '') return 'unknown';
    return this.memoOf(model, models).served;
  }

  /** `candidates()` narrowed to the model's workers and the request's context need (see candidatesFor). */
  private serving(model: string, need: ContextNeed | undefined, report: boolean): readonly Worker[] {
    const all = this.candidates();
    const models = this.hooks.models;
    if (models === undefined || model === '') return all;
    const memo = this.memoOf(model, models);
    const tokensOf = this.hooks.tokensOf;
    if (need === undefined || memo.shortest === undefined || tokensOf === undefined) return memo.workers;
    const tokens = tokensOf(model, need.chars) + need.outputTokens;
    if (tokens <= memo.shortest) return memo.workers;
    const fitting = memo.workers.filter((w) => !((maxModelLenOf(models.of(w), model) ?? Infinity) < tokens));
    if (report) this.hooks.onContextFit?.(this.role, fitting.length > 0);
    return fitting.length > 0 ? fitting : memo.workers;
  }

  /** The model's memoized narrowing (see `serving`), brought up to date. */
  private memoOf(model: string, models: ModelKnowledge): ModelMemo {
    const all = this.candidates();
    const version = models.version;
    let memo = this.byModel.get(model);
    // The rule reads every member (a down one too): a member leaving while down changes no candidate.
    if (memo === undefined || memo.members !== this.ordered || memo.all !== all || memo.version !== version) {
      // Knowledge comes from every member, healthy or not: when the workers serving a model are all
      // unhealthy, its requests get no worker (a 503), not another model's (a 404 there).
      const serves = servingRule(model, this.ordered, (w) => models.of(w));
      let workers = all;
      if (serves !== undefined && !this.ordered.every(serves)) workers = all.filter(serves);
      let shortest: number | undefined;
      for (const w of workers) {
        const len = maxModelLenOf(models.of(w), model);
        if (len !== undefined && !(len >= (shortest ?? Infinity))) shortest = len;
      }
      const served: ModelServed =
        serves !== undefined
          ? 'served'
          : this.ordered.length > 0 && this.ordered.every((w) => models.of(w)?.cards !== undefined)
            ? 'unserved'
            : 'unknown';
      if (this.byModel.size >= MODEL_MEMO_SIZE && !this.byModel.has(model)) this.byModel.clear();
      memo = { members: this.ordered, all, version, workers, shortest, served };
      this.byModel.set(model, memo);
    }
    return memo;
  }

  reconcile(): void {
    const snapshot = this.source.snapshot(this.role);
    if (snapshot === this.lastSnapshot) return;
    this.lastSnapshot = snapshot;

    const next: Worker[] = [];
    const defaultRanks = this.hooks.dataParallelSize ?? 1;
    for (const entry of snapshot) {
      const ranks = scheduledRanks(entry.metadata, defaultRanks);
      if (ranks === undefined) next.push(this.member(entry, undefined));
      else for (let rank = 0; rank < ranks; rank++) next.push(this.member(entry, rank));
    }
    // Snapshot keys are unique: if the map holds more workers than the snapshot, some departed.
    if (this.byKey.size > next.length) {
      const seen = new Set(next.map((w) => w.key));
      for (const [key, worker] of this.byKey) {
        if (!seen.has(key)) this.remove(worker, 'departed');
      }
    }
    this.ordered = next;
  }

  /** The live Worker of `entry` (one rank of it), created when new or of another generation. */
  private member(entry: MemberEntry, dpRank: number | undefined): Worker {
    const key = rankedKey(entry.url, dpRank);
    let worker = this.byKey.get(key);
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
        ...(dpRank === undefined ? {} : { dpRank }),
      });
      this.byKey.set(key, worker);
      this.policy.addWorker?.(worker);
      this.hooks.onAdded?.(worker);
    }
    return worker;
  }

  private remove(worker: Worker, reason: 'departed' | 'replaced'): void {
    this.byKey.delete(worker.key);
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

/** Whether `unpaused` is exactly the members of `workers` that are not paused, in order. No allocation. */
function stillUnpaused(workers: readonly Worker[], unpaused: readonly Worker[]): boolean {
  let j = 0;
  for (const w of workers) {
    if (w.paused) continue;
    if (unpaused[j] !== w) return false;
    j++;
  }
  return j === unpaused.length;
}
