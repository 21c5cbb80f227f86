/**
 * cache_aware: send a prompt to the worker most likely to hold its prefix in the KV cache, unless
 * that worker is overloaded; spread everything else by load.
 *
 * State: one multi-tenant radix tree per model (radix-tree.ts), tenant = worker id. routed() inserts
 * the routing text under the chosen worker, so the tree approximates each worker's prefix cache; a
 * batched completions request inserts each of its prompts (SelectionInput.prompts), as vLLM caches
 * each, and the cost mode matches each (RadixPrefixSource). The reference modes match the join, as
 * the reference router does. select() is pure: it only reads the tree and the live loads.
 *
 * Match: `prefixMatch(text)` over the nodes held by at least one CANDIDATE (selectable) worker, so an
 * unhealthy or departed worker's cache can neither attract traffic nor hide a candidate's shorter
 * match. matchRate = matched chars / text length (UTF-16 code units; 0 for an empty text).
 *
 * Mode `cost` (default): the cost model of cost-model.ts - the lowest predicted time to first token
 * (queue ahead x learned wait per request + uncached prompt tokens x learned prefill cost), after an
 * overload filter on scraped queue length and KV usage; branch `cache_hit` / `imbalance` / `low_match`
 * by whether the chosen worker holds the longest cached prefix. Prefix knowledge comes from the given
 * PrefixSources (exact ones) and, last, this policy's radix tree (RadixPrefixSource).
 * A prompt nobody holds yet goes to its rendezvous home within a margin (prefix-home.ts), so router
 * replicas that share no state seed a new prefix on the same worker.
 * Mode `per_request` (the overload escape is decided for the chosen owner only):
 * - matchRate > cacheThreshold: among the candidates holding the longest match take the least
 *   loaded (tie-break.ts). If its load > mean * balanceRelThreshold AND load > mean +
 *   balanceAbsThreshold (mean over the candidates, all healthy) it yields to the least-loaded
 *   candidate: branch `imbalance`; else branch `cache_hit`.
 * - otherwise: the least-loaded candidate, branch `low_match`.
 * Mode `global` (the reference router's rule; a fleet-wide gate):
 * - max - min > balanceAbsThreshold AND max > min * balanceRelThreshold (over the candidates only, so
 *   unhealthy workers do not skew it) -> least loaded, branch `imbalance`;
 * - else matchRate > cacheThreshold -> the most-recently-used candidate holding the longest match,
 *   branch `cache_hit`; else least loaded, branch `low_match`.
 *
 * Thresholds (defaults are the reference router's CLI defaults):
 * - cacheThreshold 0.3: below 30% prefix overlap affinity is not worth an imbalance.
 * - balanceAbsThreshold 64 / balanceRelThreshold 1.5: an owner yields only when it is BOTH 64
 *   requests above and 1.5x the mean, so small absolute differences at low load never break affinity
 *   and proportional skew at high load does.
 * - evictionIntervalMs 120000: how often maintain() runs (`maintenanceIntervalMs`, read by the
 *   composition root's maintenance timer).
 * - maxTreeSize 2^26: characters kept per worker, over all its model trees; maintain() evicts each
 *   tenant's least recently used trees' text, then leaves, down to it. Between maintenance runs a
 *   tree may grow past it.
 *
 * Membership: addWorker registers the tenant in every model tree (and in trees created later), so a
 * discovered worker has cache state from its first request; removeWorker removes the tenant from every
 * tree, so a departed or generation-replaced worker (a new Worker id at the same URL) leaves no stale
 * affinity. Trees left empty are dropped by maintain().
 */
import type { Role } from '../workers/role.js';
import { selectionLoad, type Worker } from '../workers/worker.js';
import { TimingEstimates } from '../load/timing-estimates.js';
import {
  costBranch,
  DEFAULT_COST_MODEL_OPTIONS,
  scoreCost,
  type CostModelOptions,
  type WorkerSignals,
} from './cost-model.js';
import type { CacheFeedback, Decision, Policy, SelectionInput } from './policy.js';
import { homeKeyHash } from './prefix-home.js';
import { PrefixReuse } from './prefix-reuse.js';
import { RadixPrefixSource, type PrefixSource } from './prefix-source.js';
import { RadixTree, type PrefixMatch } from './radix-tree.js';
import { newCacheReportCounts, TreeCacheReport, type CacheReportCounts } from './cache-report.js';
import { leastLoaded } from './tie-break.js';

/**
 * The smallest share of a worker's cache taken as this router's (cacheFillOwnShare): a router that sends
 * a worker almost nothing must not read a few prompts there as a full cache from a noisy share.
 */
const MIN_OWN_SHARE = 0.1;

export const CACHE_AWARE_MODES = ['cost', 'per_request', 'global'] as const;
export type CacheAwareMode = (typeof CACHE_AWARE_MODES)[number];

/** What the cost mode reads besides the candidates (the composition root binds real signals). */
export interface CacheAwareDeps {
  /** The pool's role: decode pools score by predicted wait only. Default 'regular'. */
  readonly role?: Role;
  /** Scraped/blended load and learned timing. Default: in-flight counts and the timing priors. */
  readonly signals?: WorkerSignals;
  /** Exact prefix sources, consulted before this policy's radix tree. */
  readonly prefixSources?: readonly PrefixSource[];
  /**
   * The worker's KV-cache capacity in tokens (scraped `vllm:cache_config_info`, SGLang's
   * `sglang:max_total_num_tokens`), when known: its
   * trees together (one per model or adapter it is sent; vLLM has one KV cache per engine) keep at
   * most that much of the worker's prompts (x each model's charsPerToken), least recently used dropped
   * first, as the worker's own prefix cache does. Without it only maxTreeSize bounds them.
   */
  readonly capacityTokens?: (worker: Worker) => number | undefined;
  /**
   * Without `signals`: the share of a worker's load this router did not send (load-board.ts), for the
   * prefix home's margin (kv_aware's fallback gets it this way). Ignored when `signals` is given.
   */
  readonly foreignShare?: (worker: Worker) => number;
  /**
   * Characters per token for `model` (load/chars-per-token.ts: learned from the workers' usage, the
   * configured `charsPerToken` until then). Default: the configured `charsPerToken`.
   */
  readonly charsPerToken?: (model: string) => number;
}

/**
 * The reference modes' thresholds, the tree's bounds and the mode; the cost mode's own options
 * (filters, weights, prefix home) are CostModelOptions (cost-model.ts), documented there.
 */
export interface CacheAwareOptions extends CostModelOptions {
  cacheThreshold: number;
  balanceAbsThreshold: number;
  balanceRelThreshold: number;
  evictionIntervalMs: number;
  maxTreeSize: number;
  mode: CacheAwareMode;
  /** Model trees kept at most (least recently routed dropped first). Default 256. */
  maxModels: number;
  /**
   * Correct the tree from the workers' `usage.prompt_tokens_details.cached_tokens` on the responses
   * the router watches (cache-report.ts). Default true.
   */
  cacheReports: boolean;
  /**
   * Without KV events, read a worker's cache fill as this router's picture of it over this router's
   * share of the worker's recent load (load-board.ts `foreignShare`): traffic from elsewhere (another
   * replica, direct clients) fills the rest of its cache. Default true.
   */
  cacheFillOwnShare: boolean;
}

export const DEFAULT_CACHE_AWARE_OPTIONS: Readonly<CacheAwareOptions> = Object.freeze({
  cacheThreshold: 0.3,
  balanceAbsThreshold: 64,
  balanceRelThreshold: 1.5,
  evictionIntervalMs: 120_000,
  maxTreeSize: 2 ** 26,
  mode: 'cost',
  maxModels: 256,
  cacheReports: true,
  cacheFillOwnShare: true,
  ...DEFAULT_COST_MODEL_OPTIONS,
});

/** Merges over the defaults and validates; throws RangeError on an invalid value. */
export function resolveCacheAwareOptions(
  options: Partial<CacheAwareOptions> = {},
): Readonly<CacheAwareOptions> {
  const o: CacheAwareOptions = { ...DEFAULT_CACHE_AWARE_OPTIONS };
  for (const [key, value] of Object.entries(options) as Array<[keyof CacheAwareOptions, unknown]>) {
    if (value !== undefined) (o as unknown as Record<string, unknown>)[key] = value;
  }
  const check = (ok: boolean, what: string, value: unknown): void => {
    if (!ok) throw new RangeError(`cache_aware: ${what}, got ${String(value)}`);
  };
  const finite = (v: number): boolean => typeof v === 'number' && Number.isFinite(v);
  check(
    finite(o.cacheThreshold) && o.cacheThreshold >= 0 && o.cacheThreshold <= 1,
    'cacheThreshold must be in [0, 1]',
    o.cacheThreshold,
  );
  check(
    finite(o.balanceAbsThreshold) && o.balanceAbsThreshold >= 0,
    'balanceAbsThreshold must be >= 0',
    o.balanceAbsThreshold,
  );
  check(
    finite(o.balanceRelThreshold) && o.balanceRelThreshold >= 0,
    'balanceRelThreshold must be >= 0',
    o.balanceRelThreshold,
  );
  check(
    finite(o.evictionIntervalMs) && o.evictionIntervalMs > 0,
    'evictionIntervalMs must be > 0',
    o.evictionIntervalMs,
  );
  check(finite(o.maxTreeSize) && o.maxTreeSize >= 0, 'maxTreeSize must be >= 0', o.maxTreeSize);
  check(Number.isInteger(o.maxModels) && o.maxModels >= 1, 'maxModels must be an integer >= 1', o.maxModels);
  check(typeof o.cacheReports === 'boolean', 'cacheReports must be a boolean', o.cacheReports);
  check(typeof o.cacheFillOwnShare === 'boolean', 'cacheFillOwnShare must be a boolean', o.cacheFillOwnShare);
  check(CACHE_AWARE_MODES.includes(o.mode), "mode must be 'cost', 'per_request' or 'global'", o.mode);
  check(
    finite(o.overloadWaiting) && o.overloadWaiting >= 0,
    'overloadWaiting must be >= 0',
    o.overloadWaiting,
  );
  check(
    finite(o.overloadKvUsage) && o.overloadKvUsage >= 0,
    'overloadKvUsage must be >= 0',
    o.overloadKvUsage,
  );
  check(finite(o.charsPerToken) && o.charsPerToken > 0, 'charsPerToken must be > 0', o.charsPerToken);
  check(finite(o.costBalanceRel) && o.costBalanceRel >= 1, 'costBalanceRel must be >= 1', o.costBalanceRel);
  check(finite(o.costBalanceAbs) && o.costBalanceAbs >= 0, 'costBalanceAbs must be >= 0', o.costBalanceAbs);
  check(
    Number.isInteger(o.costIdleQueue) && o.costIdleQueue >= 0,
    'costIdleQueue must be an integer >= 0',
    o.costIdleQueue,
  );
  check(
    finite(o.costDecodeWeight) && o.costDecodeWeight >= 0,
    'costDecodeWeight must be >= 0',
    o.costDecodeWeight,
  );
  check(
    finite(o.costRecomputeWeight) && o.costRecomputeWeight >= 0,
    'costRecomputeWeight must be >= 0',
    o.costRecomputeWeight,
  );
  check(
    finite(o.prefixHomeMargin) && o.prefixHomeMargin >= 0,
    'prefixHomeMargin must be >= 0',
    o.prefixHomeMargin,
  );
  check(
    finite(o.prefixHomeMarginAlone) && o.prefixHomeMarginAlone >= 0,
    'prefixHomeMarginAlone must be >= 0',
    o.prefixHomeMarginAlone,
  );
  check(
    finite(o.prefixHomeMarginExact) && o.prefixHomeMarginExact >= 0,
    'prefixHomeMarginExact must be >= 0',
    o.prefixHomeMarginExact,
  );
  check(
    Number.isInteger(o.prefixHomeKeyChars) && o.prefixHomeKeyChars >= 1,
    'prefixHomeKeyChars must be an integer >= 1',
    o.prefixHomeKeyChars,
  );
  check(finite(o.loraLoadMs) && o.loraLoadMs >= 0, 'loraLoadMs must be >= 0', o.loraLoadMs);
  return Object.freeze(o);
}

export class CacheAwarePolicy implements Policy {
  readonly name = 'cache_aware' as const;
  readonly options: Readonly<CacheAwareOptions>;
  private readonly trees = new Map<string, RadixTree>();
  private readonly members = new Set<string>();
  /**
   * Tokens of each worker's picture over all its trees (with a known capacity): as last counted plus
   * what routed() inserted since; off the truth once a report or a dropped tree evicted (above it: counted
   * again when it passes the bound) or the learned characters per token moved, until maintain().
   */
  private readonly pictured = new Map<string, number>();
  private readonly indexCache = new WeakMap<readonly Worker[], Map<string, number>>();
  private readonly role: Role;
  private readonly signals: WorkerSignals;
  private readonly sources: readonly PrefixSource[];
  /** The sources that know how much each worker's cache holds (KV events), for the cache fill. */
  private readonly heldSources: readonly PrefixSource[];
  private readonly capacityTokens: ((worker: Worker) => number | undefined) | undefined;
  private readonly charsPerToken: (model: string) => number;
  /** How often recent prompts reused an opening: scales the prefix home's margin (prefix-reuse.ts). */
  private readonly reuse = new PrefixReuse();
  /** The workers' reports on prompts the tree believed they held (cache-report.ts). */
  readonly cacheReports: CacheReportCounts = newCacheReportCounts();

  constructor(options: Partial<CacheAwareOptions> = {}, deps: CacheAwareDeps = {}) {
    this.options = resolveCacheAwareOptions(options);
    this.role = deps.role ?? 'regular';
    if (deps.signals) this.signals = deps.signals;
    else {
      const priors = new TimingEstimates();
      this.signals = {
        load: (w) => ({ source: 'in_flight', ahead: selectionLoad(w) }),
        timing: (w) => priors.of(w),
        ...(deps.foreignShare !== undefined ? { foreignShare: deps.foreignShare } : {}),
      };
    }
    const fixed = this.options.charsPerToken;
    this.charsPerToken = deps.charsPerToken ?? (() => fixed);
    const radix = new RadixPrefixSource((model) => this.trees.get(model), this.charsPerToken);
    this.sources = [...(deps.prefixSources ?? []), radix];
    this.heldSources = this.sources.filter((s) => s.heldTokens !== undefined);
    this.capacityTokens = deps.capacityTokens;
  }

  /**
   * How full each worker's prefix cache is, over the capacity the worker reports: what its KV events
   * show it holds when a source knows (prefix-source.ts `heldTokens`), else this router's picture of
   * it (its trees, which evict like the worker once at its capacity: all of them, as the worker's one
   * KV cache holds every adapter's and model's prompts, whatever this request names) over this
   * router's share of the worker's load (`cacheFillOwnShare`: the rest of an LRU cache fills with the
   * prompts other replicas and direct clients send, at their share of the traffic); undefined when
   * the weight is 0, a worker without a known capacity reads 0.
   */
  private cacheFill(): ((worker: Worker) => number) | undefined {
    const capacityOf = this.capacityTokens;
    if (this.options.costRecomputeWeight <= 0 || capacityOf === undefined) return undefined;
    const held = this.heldSources;
    if (this.trees.size === 0 && held.length === 0) return undefined;
    // Each tree's characters count at its own model's characters per token.
    const trees: Array<{ tree: RadixTree; tokensPerChar: number }> = [];
    for (const [model, tree] of this.trees)
      trees.push({ tree, tokensPerChar: 1 / this.charsPerToken(model) });
    const foreign = this.options.cacheFillOwnShare ? this.signals.foreignShare : undefined;
    return (worker) => {
      const capacity = capacityOf(worker);
      if (capacity === undefined || capacity <= 0) return 0;
      for (const s of held) {
        const tokens = s.heldTokens?.(worker);
        if (tokens !== undefined) return Math.min(1, tokens / capacity);
      }
      let tokens = 0;
      for (const t of trees) tokens += t.tree.tenantCharCount(worker.id) * t.tokensPerChar;
      const own = foreign === undefined ? 1 : Math.max(MIN_OWN_SHARE, 1 - foreign(worker));
      return Math.min(1, tokens / (capacity * own));
    };
  }

  get maintenanceIntervalMs(): number {
    return this.options.evictionIntervalMs;
  }

  /** Share of recent prompts (at least a home key long) whose opening was seen shortly before, in [0, 1]. */
  homeReuseRate(): number {
    return this.reuse.rate();
  }

  /**
   * worker id -> candidate index, memoized per candidates array: a pool hands out the same array
   * until its membership or health changes, so large fleets do not rebuild the map per request.
   */
  private indexOf(workers: readonly Worker[]): Map<string, number> {
    let ids = this.indexCache.get(workers);
    if (ids === undefined) {
      ids = new Map<string, number>();
      for (let i = 0; i < workers.length; i++) ids.set((workers[i] as Worker).id, i);
      this.indexCache.set(workers, ids);
    }
    return ids;
  }

  select(input: SelectionInput): Decision {
    if (this.options.mode === 'cost') {
      const cost = scoreCost(
        input,
        this.role,
        this.sources,
        this.signals,
        this.options,
        this.reuse.rate(),
        this.cacheFill(),
        this.charsPerToken(input.model),
      );
      return { worker: cost.chosen.worker, branch: costBranch(cost), matchRate: cost.bestMatchRate, cost };
    }
    const workers = input.workers;
    const text = input.text;
    const tree = this.trees.get(input.model);
    let match: PrefixMatch | undefined;
    let index: Map<string, number> | undefined;
    if (tree !== undefined && text.length > 0) {
      const ids = this.indexOf(workers);
      match = tree.prefixMatch(text, (id) => ids.has(id));
      index = ids;
    }
    const matchRate = match === undefined ? 0 : match.matchedChars / text.length;
    const { cacheThreshold, balanceAbsThreshold: abs, balanceRelThreshold: rel } = this.options;

    if (this.options.mode === 'global') {
      let min = Infinity;
      let max = -Infinity;
      for (const w of workers) {
        const load = selectionLoad(w);
        if (load < min) min = load;
        if (load > max) max = load;
      }
      if (max - min > abs && max > min * rel) return this.leastLoaded(workers, 'imbalance', matchRate);
      if (match?.tenant !== undefined && index !== undefined && matchRate > cacheThreshold) {
        return {
          worker: workers[index.get(match.tenant) as number] as Worker,
          branch: 'cache_hit',
          matchRate,
        };
      }
      return this.leastLoaded(workers, 'low_match', matchRate);
    }

    if (match === undefined || index === undefined || matchRate <= cacheThreshold) {
      return this.leastLoaded(workers, 'low_match', matchRate);
    }
    const holders = match.tenants.map((id) => index.get(id) as number);
    const owner = workers[leastLoaded(workers, holders)] as Worker;
    let sum = 0;
    for (const w of workers) sum += selectionLoad(w);
    const mean = sum / workers.length;
    const ownerLoad = selectionLoad(owner);
    if (ownerLoad > mean * rel && ownerLoad > mean + abs)
      return this.leastLoaded(workers, 'imbalance', matchRate);
    return { worker: owner, branch: 'cache_hit', matchRate };
  }

  /**
   * Inserts the prompt under the chosen worker and trims its picture to the worker's capacity. When
   * the tree believed the worker already held part of the prompt, returns the check of that belief
   * against the worker's own report (cache-report.ts).
   */
  routed(decision: Decision, input: SelectionInput, nowMs: number): CacheFeedback | undefined {
    for (const source of this.sources) source.routed?.(input, decision.worker, nowMs);
    if (input.text.length === 0) return undefined;
    const keyChars = this.options.prefixHomeKeyChars;
    if (input.text.length >= keyChars) this.reuse.observe(homeKeyHash(input.text, keyChars));
    const tree = this.treeFor(input.model);
    const tenant = decision.worker.id;
    // A batch's prompts each enter the worker's cache (SelectionInput.prompts); the check of a belief
    // against the worker's report is per prompt and its usage is the batch's, so a batch makes none.
    const capacity = this.capacityTokens?.(decision.worker);
    const before = capacity === undefined ? 0 : tree.tenantCharCount(tenant);
    let held = { heldChars: 0, heldTick: 0 };
    if (input.prompts === undefined) held = tree.insert(input.text, tenant, nowMs);
    else for (const prompt of input.prompts) tree.insert(prompt, tenant, nowMs);
    if (capacity !== undefined) {
      const added = (tree.tenantCharCount(tenant) - before) / this.charsPerToken(input.model);
      this.trimToCapacity(tenant, capacity, added);
    }
    if (!this.options.cacheReports || held.heldChars === 0) return undefined;
    if (this.role === 'decode' && input.prefillHere !== true) return undefined;
    return new TreeCacheReport(
      tree,
      tenant,
      held.heldChars,
      held.heldTick,
      input.text.length,
      this.cacheReports,
    );
  }

  /**
   * The worker's cache evicts its least recently used blocks once full, and it is one cache for all
   * its adapters and models (vLLM: one KV cache per engine, blocks keyed by adapter); so does its
   * picture here, over all its trees (with 1/16 of slack, so eviction runs in batches rather than on
   * every request). The picture's tokens are a running sum (`pictured`), counted over the trees only
   * when that sum passes the bound or is unknown: once per capacity / 16 tokens routed to the worker.
   */
  private trimToCapacity(tenant: string, capacity: number, addedTokens: number): void {
    const known = this.pictured.get(tenant);
    const limit = capacity + capacity / 16;
    if (known !== undefined && known + addedTokens <= limit) {
      this.pictured.set(tenant, known + addedTokens);
      return;
    }
    const tokens = this.shrinkTenant(tenant, limit, capacity, (model) => 1 / this.charsPerToken(model));
    this.pictured.set(tenant, tokens.size);
  }

  /**
   * Counts `tenant`'s picture over all its trees, each tree's characters x `weight(model)`; past
   * `limit`, evicts its least recently used trees' text first, down to `target`. Returns the size
   * left and the characters evicted.
   */
  private shrinkTenant(
    tenant: string,
    limit: number,
    target: number,
    weight: (model: string) => number,
  ): { size: number; evicted: number } {
    const held: Array<{ tree: RadixTree; weight: number }> = [];
    let total = 0;
    for (const [model, tree] of this.trees) {
      const chars = tree.tenantCharCount(tenant);
      if (chars === 0) continue;
      const w = weight(model);
      held.push({ tree, weight: w });
      total += chars * w;
    }
    if (total <= limit) return { size: total, evicted: 0 };
    held.sort(
      (a, b) => (a.tree.tenantLastInsertMs(tenant) as number) - (b.tree.tenantLastInsertMs(tenant) as number),
    );
    let evicted = 0;
    for (const { tree, weight: w } of held) {
      if (total <= target) break;
      const chars = tree.tenantCharCount(tenant);
      const dropped = tree.evictTenantToSize(tenant, Math.max(0, chars - (total - target) / w));
      evicted += dropped;
      total -= dropped * w;
    }
    return { size: Math.max(0, total), evicted };
  }

  addWorker(worker: Worker): void {
    this.members.add(worker.id);
    for (const tree of this.trees.values()) tree.addTenant(worker.id);
  }

  removeWorker(worker: Worker): void {
    this.members.delete(worker.id);
    this.pictured.delete(worker.id);
    for (const tree of this.trees.values()) tree.removeTenant(worker.id);
  }

  cacheCleared(worker: Worker): void {
    if (!this.members.has(worker.id)) return;
    this.pictured.delete(worker.id);
    for (const tree of this.trees.values()) {
      tree.removeTenant(worker.id);
      tree.addTenant(worker.id);
    }
  }

  /**
   * Evicts every tenant down to maxTreeSize characters over all its model trees (a client may name
   * any model: a tree each must not multiply the bound), its least recently inserted trees' text
   * first; drops empty trees. Returns chars evicted.
   */
  maintain(_nowMs: number): number {
    const max = this.options.maxTreeSize;
    let evicted = 0;
    const tenants = new Set<string>(this.members);
    for (const tree of this.trees.values()) for (const tenant of tree.tenants()) tenants.add(tenant);
    for (const tenant of tenants) evicted += this.shrinkTenant(tenant, max, max, () => 1).evicted;
    for (const [model, tree] of this.trees) if (tree.totalChars() === 0) this.trees.delete(model);
    // Counted again on each worker's next request (reports and dropped trees have evicted meanwhile).
    this.pictured.clear();
    return evicted;
  }

  /** Read-only stats: cached characters per worker id, summed over model trees (members at 0 included). */
  treeChars(): Map<string, number> {
    const out = new Map<string, number>();
    for (const id of this.members) out.set(id, 0);
    for (const tree of this.trees.values()) {
      for (const tenant of tree.tenants())
        out.set(tenant, (out.get(tenant) ?? 0) + tree.tenantCharCount(tenant));
    }
    return out;
  }

  /** Read-only stats: tenants registered in `model`'s tree ([] when the model has no tree). */
  treeTenants(model: string): string[] {
    return this.trees.get(model)?.tenants() ?? [];
  }

  /** The model's tree for read-only queries (prefix-source.ts), undefined while it has none. */
  treeOf(model: string): RadixTree | undefined {
    return this.trees.get(model);
  }

  /** Read-only stats: models with a tree. */
  models(): string[] {
    return [...this.trees.keys()];
  }

  /**
   * The model's tree, created on first use. Trees are kept in least-recently-routed order (Map
   * insertion order, refreshed on every use); beyond `maxModels` the least recently used tree is
   * dropped, so clients inventing model names cannot grow memory without bound.
   */
  private treeFor(model: string): RadixTree {
    let tree = this.trees.get(model);
    if (tree === undefined) {
      if (this.trees.size >= this.options.maxModels) {
        const oldest = this.trees.keys().next().value as string;
        this.trees.delete(oldest);
      }
      tree = new RadixTree();
      for (const id of this.members) tree.addTenant(id);
    } else {
      this.trees.delete(model);
    }
    this.trees.set(model, tree);
    return tree;
  }

  private leastLoaded(workers: readonly Worker[], branch: string, matchRate: number): Decision {
    return { worker: workers[leastLoaded(workers)] as Worker, branch, matchRate };
  }
}
