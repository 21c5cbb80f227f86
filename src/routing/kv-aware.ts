/**
 * kv_aware (the reference router's name): route on the workers' exact KV-cache contents, learned
 * from vLLM's KV-cache events (kv-events/), falling back to cache_aware's approximate prefix tree.
 *
 * select(input):
 * - prefix view = resolvePrefix([exact source, radix tree]) (prefix-source.ts): per candidate, its
 *   exact cached tokens when it publishes events and the request could be tokenized, else the
 *   tree's estimate;
 * - when NO candidate has an exact answer, the decision is cache_aware's own (same thresholds, same
 *   branches, the same load and timing signals and KV capacities as the pool's cache_aware would read:
 *   `fallbackDeps`), so kv_aware without events behaves exactly like cache_aware;
 * - otherwise matchRate = best cached tokens / prompt tokens. Above `cacheThreshold`: among the
 *   candidates holding the most cached tokens, the least loaded (tie-break.ts); it yields to the least
 *   loaded candidate when it is overloaded by cache_aware's per-request rule (load > mean x
 *   balanceRelThreshold AND load > mean + balanceAbsThreshold): branch `exact_hit` / `imbalance`;
 * - else (nobody holds enough of it) the least loaded, branch `exact_miss`; except that a prompt at
 *   least `prefixHomeKeyChars` long goes to its rendezvous home (prefix-home.ts) when the home has at
 *   most `prefixHomeMargin` requests more than the least loaded: branch `exact_home`. The reference
 *   router takes the least loaded; with several router replicas, each one's least loaded is a
 *   different worker (each counts its own requests), so two replicas seeded every new or evicted
 *   context twice. Measured on eviction-pressure (3 runs each, load 4-5): two replicas kept 0.81x of
 *   one replica's hit rate with the least loaded, 0.92x with the home; one replica 55.3% -> 56.8%.
 *   `prefixHomeMargin 0` restores the reference rule. The margin is scaled by the share of recent
 *   prompts that reused an opening (prefix-reuse.ts), so unique prompts keep the least loaded. Unlike
 *   cache_aware's, it stays whole for a lone router (`prefixHomeMarginAlone` does not apply here):
 *   kv_aware marks no pending blocks, so until a prompt's events arrive the home is also what keeps a
 *   single router's own concurrent requests for one prefix together. Measured with the alone margin
 *   (0.5 requests) on long-prompt, one router: hit rate 74.8% -> 24.9%, 0.98x round robin (16
 *   requests on 4 documents arrive at once; each went to the least loaded and recomputed its document).
 * routed(): feeds the tree exactly as cache_aware does (the fallback stays warm for requests and
 * workers without events) and reports a request that fell back (`onFallback(reason)`), outside the
 * pure selection step. It does NOT leave the prompt's blocks pending in the exact source (as
 * cache_aware does): with the reference rule's owner escape (64 requests above the mean), a prompt
 * seen as held at once pulls every request sharing its opening to that one worker. Measured on
 * multi-turn (one system prompt for every user): max/mean processed 8.00 with pending blocks (every
 * request on one worker), 1.00-1.17 without (the first requests, sent before any event, spread).
 */
import { selectionLoad, type Worker } from '../workers/worker.js';
import { CacheAwarePolicy, type CacheAwareDeps, type CacheAwareOptions } from './cache-aware.js';
import type { CacheReportCounts } from './cache-report.js';
import type { CacheFeedback, Decision, Policy, SelectionInput } from './policy.js';
import { RadixPrefixSource, resolvePrefix, type PrefixSource } from './prefix-source.js';
import { homeKeyHash, prefixHome, type HomeCandidate } from './prefix-home.js';
import { leastLoaded } from './tie-break.js';

/** The exact source, with the reason a request was not answered exactly. */
export interface ExactPrefixSource extends PrefixSource {
  fallback?(input: SelectionInput): string | undefined;
}

export interface KvAwareOptions {
  cacheAware?: Partial<CacheAwareOptions>;
  /** Absent = no events configured: always the fallback. */
  exact?: ExactPrefixSource;
  onFallback?(reason: string): void;
  /**
   * What the cache_aware fallback reads besides the candidates, as the pool's cache_aware does: its
   * role, the scraped load and learned timing (signals), the workers' KV capacity. Absent: in-flight
   * counts and the timing priors. No exact prefix sources: kv_aware marks no pending blocks (header).
   */
  fallbackDeps?: Pick<CacheAwareDeps, 'role' | 'signals' | 'capacityTokens'>;
  /**
   * Share of a worker's recent load this router did not send (load-board.ts); absent = 0 (alone).
   * Only the cache_aware fallback reads it (its prefix home's alone margin; see the header).
   */
  foreignShare?(worker: Worker): number;
  /**
   * Characters per token for `model` (load/chars-per-token.ts: learned from the workers' usage);
   * absent = the configured `charsPerToken`. The fallback tree's estimates read it, as cache_aware's.
   */
  charsPerToken?(model: string): number;
}

export class KvAwarePolicy implements Policy {
  readonly name = 'kv_aware' as const;
  private readonly approximate: CacheAwarePolicy;
  private readonly sources: PrefixSource[];
  private readonly charsPerToken: (model: string) => number;

  constructor(private readonly opts: KvAwareOptions = {}) {
    this.approximate = new CacheAwarePolicy(opts.cacheAware, {
      ...opts.fallbackDeps,
      ...(opts.foreignShare !== undefined ? { foreignShare: opts.foreignShare } : {}),
      ...(opts.charsPerToken !== undefined ? { charsPerToken: opts.charsPerToken } : {}),
    });
    const fixed = this.approximate.options.charsPerToken;
    this.charsPerToken = opts.charsPerToken ?? (() => fixed);
    const radix = new RadixPrefixSource((model) => this.approximate.treeOf(model), this.charsPerToken);
    this.sources = opts.exact === undefined ? [radix] : [opts.exact, radix];
  }

  select(input: SelectionInput): Decision {
    const workers = input.workers;
    if (this.opts.exact === undefined) return this.approximate.select(input);
    const view = resolvePrefix(this.sources, input, workers, this.charsPerToken(input.model));
    const exactName = this.opts.exact.name ?? 'source0';
    if (!view.sourceOf.includes(exactName)) return this.approximate.select(input);
    let best = 0;
    for (const c of view.cached) if (c > best) best = c;
    const matchRate = view.promptTokens > 0 ? best / view.promptTokens : 0;
    const { cacheThreshold, balanceAbsThreshold: abs, balanceRelThreshold: rel } = this.approximate.options;
    if (best === 0 || matchRate <= cacheThreshold) {
      const least = leastLoaded(workers);
      const home = this.missHome(input, least);
      return {
        worker: workers[home ?? least] as Worker,
        branch: home === undefined ? 'exact_miss' : 'exact_home',
        matchRate,
      };
    }
    const holders: number[] = [];
    for (let i = 0; i < workers.length; i++) if (view.cached[i] === best) holders.push(i);
    const owner = workers[leastLoaded(workers, holders)] as Worker;
    let sum = 0;
    for (const w of workers) sum += selectionLoad(w);
    const mean = sum / workers.length;
    const ownerLoad = selectionLoad(owner);
    if (ownerLoad > mean * rel && ownerLoad > mean + abs) {
      return { worker: workers[leastLoaded(workers)] as Worker, branch: 'imbalance', matchRate };
    }
    return { worker: owner, branch: 'exact_hit', matchRate };
  }

  /**
   * A long prompt nobody holds goes to its rendezvous home (prefix-home.ts) when the home has at most
   * `prefixHomeMargin` requests more than the least-loaded candidate: every replica then seeds a new
   * prefix on the same worker instead of on its own least-loaded one. Undefined: the least loaded.
   */
  private missHome(input: SelectionInput, least: number): number | undefined {
    const { prefixHomeMargin: margin, prefixHomeKeyChars: keyChars } = this.approximate.options;
    if (margin <= 0 || input.text.length < keyChars) return undefined;
    const workers = input.workers;
    const candidates: HomeCandidate[] = workers.map((w) => ({
      label: w.key,
      eligible: true,
      scoreMs: selectionLoad(w),
    }));
    // Scaled by how often recent prompts reused an opening (prefix-reuse.ts), as cache_aware's margin.
    const slack = margin * this.approximate.homeReuseRate();
    return prefixHome(
      homeKeyHash(input.text, keyChars),
      candidates,
      selectionLoad(workers[least] as Worker),
      slack,
    );
  }

  routed(decision: Decision, input: SelectionInput, nowMs: number): CacheFeedback | undefined {
    const feedback = this.approximate.routed(decision, input, nowMs);
    const reason = this.opts.exact?.fallback?.(input);
    if (reason !== undefined) this.opts.onFallback?.(reason);
    return feedback;
  }

  /** The fallback tree's checks against the workers' reports (cache-report.ts). */
  get cacheReports(): CacheReportCounts {
    return this.approximate.cacheReports;
  }

  addWorker(worker: Worker): void {
    this.approximate.addWorker(worker);
  }

  removeWorker(worker: Worker): void {
    this.approximate.removeWorker(worker);
  }

  cacheCleared(worker: Worker): void {
    this.approximate.cacheCleared(worker);
  }

  /** The fallback tree's eviction interval (cache_aware's evictionIntervalMs). */
  get maintenanceIntervalMs(): number {
    return this.approximate.maintenanceIntervalMs;
  }

  maintain(nowMs: number): number {
    return this.approximate.maintain(nowMs);
  }

  /** Read-only stats of the fallback tree (metrics). */
  treeChars(): Map<string, number> {
    return this.approximate.treeChars();
  }
}
