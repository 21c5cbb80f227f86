/**
 * Prefix home: where a prompt that no worker holds yet should be seeded, the same on every router
 * replica.
 *
 * Why: several replicas share no state. When a new prefix arrives (a new system prompt, a new
 * tenant's context), each replica used to pick "the best" worker from its own view: its own prefix
 * tree (which saw only its share of the traffic), its own in-flight counts and KV events that lag by a
 * few milliseconds. Two replicas routing the same new prefix then seeded it on two workers, and kept
 * doing so for every request of that prefix: each copy costs a recomputed prefill and cache room that
 * another context needed. Measured before this rule: two replicas kept 0.54x (shared-prefix) and 0.44x
 * (eviction-pressure) of one replica's hit rate on the approximate tree, 0.77x / 0.73x on KV events.
 *
 * Rule (rendezvous, i.e. highest-random-weight hashing, over a replica-independent key):
 * - key = the prompt's first `keyChars` characters (default 256, ~64 tokens): requests that start
 *   with the same text share a home; different prefixes get independent homes, so they spread over
 *   the fleet as a consistent hash would.
 * - it applies when the worker the cost model picked does not hold even the key's worth of the
 *   prompt (its cached tokens < keyChars / charsPerToken): nobody holds the prefix yet, or its holders
 *   were filtered out (overload, imbalance band) or are too busy to be worth their cache. A holder the
 *   cost model picks keeps the request; so does a prompt whose common opening (a shared system prompt
 *   longer than the key) is cached on the picked worker, which would otherwise hash every request of a
 *   fleet-wide preamble to one worker. Prompts shorter than the key never apply (they save almost no
 *   prefill and keep following the shortest queue).
 * - eligible = the candidates the cost model did not filter out whose score is within `margin` x the
 *   picked worker's prefill time for this prompt of its score. The home is the eligible candidate with
 *   the highest weight fmix32(hash(key) ^ hash(worker URL)). URLs, not worker ids, so every replica
 *   computes the same weights; a worker leaving moves only its own keys.
 * - Spills agree too: when a busy prefix's only holder is filtered on every replica, each one sends
 *   the overflow to the prefix's next worker in the same weight order, so the fleet grows one second
 *   copy rather than one per replica (measured: without this, two replicas each spilled a hot group to
 *   its own least-loaded worker, and every spill was a fresh miss that the other replica never reused).
 *   Once two or more candidates hold the opening (MAX_HOLDERS = 1), a spill follows the cost model
 *   alone: further copies cost the fleet little, and a preamble that every request shares (one system
 *   prompt for all users, whose key is the same for every request) would otherwise pour every spill
 *   onto the same next worker, up to the imbalance band (measured: busiest worker 1.46-1.54x the mean
 *   on chat-one-system-prompt and multi-turn instead of 1.04-1.17x).
 * - margin (default 3): how much predicted time the agreement may cost. Not agreeing costs at least
 *   one prefill of the prompt (every other replica seeds or spills the prefix on the home, so the
 *   fleet computes it twice and holds two copies) and, on a small cache, the contexts that the second
 *   copy evicts. Short prompts get a proportionally small margin and keep following the shortest
 *   queue; margin 0 turns the rule off. Replicas whose views differ by less than the margin agree.
 * - alone (`marginAlone`, default 0.5): agreement is worth something only when someone else routes
 *   to the same workers. While the workers' own counts show no load this router did not send (the
 *   mean foreign share over the candidates, load-board.ts, is 0), the margin is `marginAlone`; it
 *   rises linearly to `margin` as that share reaches FOREIGN_SHARE_FULL (a second replica sending as
 *   much reads ~0.5). Measured alone with margin 3 (`runRoutingBench`, 3 runs per variant,
 *   interleaved): on long-prompt (4 documents on 8 workers) two documents whose homes collide queued
 *   the second one's 2.9 s prefill behind the first one's while six workers idled, in 2 of 3 runs
 *   (output tokens/s 106 vs 153 mean); eviction-pressure hit rate 45.0% vs 50.6% (approximate tree),
 *   46.8% vs 49.3% (KV events); shared-prefix unchanged; two replicas unchanged (they see each other's
 *   load and keep margin 3). 0.5 rather than 1: an equally long cold prefill queued at the home costs
 *   1x the prompt's prefill, so at 1 only the decode term kept a lone router from queueing behind it.
 *   Not detectable: replicas cold-starting on an idle fleet read share 0 until the first scrapes show
 *   each other's load, so their first burst seeds with the alone margin (with the approximate tree a
 *   prefix seeded twice stays split; docs/deploy-envoy.md). cache_aware's cost mode only: kv_aware
 *   keeps the whole margin (kv-aware.ts).
 * - exact (`marginExact`, default 1): the margin is capped at this when every candidate's cache is
 *   known from its KV events (prefix-source.ts `PrefixView.exact`). A prefix one replica seeds shows
 *   in the others' index within milliseconds of its prefill starting (5-8 ms mean event lag here), so
 *   the home only has to group prompts seeded at the same moment; a margin of 3 prefills also made
 *   every replica queue a new context behind a busy home while other workers idled. Measured
 *   (bench/routing-ab.ts, two replicas with KV events, margin 1 vs 3, 3 interleaved runs per
 *   variant and seed, 2026-12-03): eviction-pressure output tokens/s +18%, +11%, -2% (seeds 1-3;
 *   1,507 vs 1,392 mean), hit rate 55.4% vs 54.1%; shared-prefix +6% (2 runs, hit 86.6% vs 86.2%);
 *   multi-turn -2.5% (5 runs, hit 86.4% vs 86.5%), chat +1%, a lone router under external-load
 *   -1.7% (within their spread). The approximate tree keeps the full margin: there a replica learns
 *   where another seeded a prefix only through the home (margin 1 there: 38.8% vs 44.9% hit).
 *
 * Pure: no timers, metrics or logging.
 */
import { fmix32 } from '../util/fmix32.js';
import { hash32 } from '../util/hash32.js';
import { flatText, type RoutingText } from '../util/piece-text.js';

export interface PrefixHomeOptions {
  /** Multiple of the best candidate's prefill time a home may cost in extra score; 0 = off. */
  readonly margin: number;
  /** The margin while no load from elsewhere is seen on the candidates (never above `margin`). */
  readonly marginAlone: number;
  /** The most the margin may be when every candidate's cache is known from its KV events. */
  readonly marginExact: number;
  /** Characters of the prompt's start that make its key. */
  readonly keyChars: number;
}

export const DEFAULT_PREFIX_HOME_OPTIONS: Readonly<PrefixHomeOptions> = Object.freeze({
  margin: 3,
  marginAlone: 0.5,
  marginExact: 1,
  keyChars: 256,
});

/** Mean foreign share (load-board.ts) of the candidates at which the full margin applies. */
export const FOREIGN_SHARE_FULL = 0.2;

/**
 * The margin for candidates whose mean foreign share is `foreignShare`: `marginAlone` at 0, rising
 * linearly to `margin` at FOREIGN_SHARE_FULL and above; at most `marginExact` when `exact` (every
 * candidate's cache known from its KV events); 0 when the rule is off (margin 0).
 */
export function homeMargin(
  options: Readonly<PrefixHomeOptions>,
  foreignShare: number,
  exact = false,
): number {
  const margin = exact ? Math.min(options.margin, options.marginExact) : options.margin;
  const alone = Math.min(options.marginAlone, margin);
  const f = Number.isFinite(foreignShare) ? Math.min(1, Math.max(0, foreignShare / FOREIGN_SHARE_FULL)) : 1;
  return alone + (margin - alone) * f;
}

/** One candidate as the rule sees it (index-aligned with the pool's candidates). */
export interface HomeCandidate {
  /** Stable across replicas: the worker's URL. */
  readonly label: string;
  /** Passed the cost model's filters (or every candidate failed them). */
  readonly eligible: boolean;
  readonly scoreMs: number;
}

/** The rendezvous key's hash: the prompt's first `keyChars` characters. */
export function homeKeyHash(text: RoutingText, keyChars: number): number {
  return hash32(text.length > keyChars ? text.slice(0, keyChars) : flatText(text));
}

/** A candidate's rendezvous weight for a key hash (the highest weight is the key's home). */
export function rendezvousWeight(keyHash: number, label: string): number {
  return fmix32((keyHash ^ hash32(label)) >>> 0);
}

/**
 * Whether the rule applies: the prompt is at least as long as its key (a shorter one is not worth a
 * home: it saves almost no prefill, and the shortest queue serves it best), the picked worker does
 * not hold as much of it as its key, and at most MAX_HOLDERS candidates do.
 * A batched completions request of `prompts` prompts (SelectionInput.prompts: its text is their join,
 * its cached tokens their sum) is held per prompt: its prompts must be a key long on average, and the
 * picked worker holds it when it holds a key's worth of each on average. Summed, a short opening the
 * prompts share (`Q: `) would otherwise read as a held key once there are enough prompts.
 */
export function homeApplies(
  promptChars: number,
  pickedCachedTokens: number,
  holders: number,
  charsPerToken: number,
  options: Readonly<PrefixHomeOptions>,
  prompts = 1,
): boolean {
  const keyChars = options.keyChars * Math.max(1, prompts);
  return (
    options.margin > 0 &&
    promptChars >= keyChars &&
    holders <= MAX_HOLDERS &&
    pickedCachedTokens * charsPerToken < keyChars
  );
}

/** Candidates holding the key beyond which a spill follows the cost model alone (see the header). */
export const MAX_HOLDERS = 1;

/**
 * How many candidates hold the key's worth of the prompt (of each of a batch's `prompts` on average:
 * see homeApplies).
 */
export function keyHolders(
  candidates: Iterable<{ readonly cachedTokens: number }>,
  charsPerToken: number,
  options: Readonly<PrefixHomeOptions>,
  prompts = 1,
): number {
  const keyChars = options.keyChars * Math.max(1, prompts);
  let n = 0;
  for (const c of candidates) if (c.cachedTokens * charsPerToken >= keyChars) n += 1;
  return n;
}

/**
 * Index of the home among `candidates`: the highest rendezvous weight among the eligible ones whose
 * score is at most `bestScoreMs + marginMs` (ties on weight: the lower index). Undefined when none
 * qualifies (the caller keeps its own choice).
 */
export function prefixHome(
  keyHash: number,
  candidates: readonly HomeCandidate[],
  bestScoreMs: number,
  marginMs: number,
): number | undefined {
  let home: number | undefined;
  let homeWeight = -1;
  const limit = bestScoreMs + Math.max(0, marginMs);
  for (let i = 0; i < candidates.length; i++) {
    const c = candidates[i] as HomeCandidate;
    if (!c.eligible || !(c.scoreMs <= limit)) continue;
    const w = rendezvousWeight(keyHash, c.label);
    if (w > homeWeight) {
      home = i;
      homeWeight = w;
    }
  }
  return home;
}
