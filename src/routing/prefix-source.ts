/**
 * Where the cost model learns how much of a prompt each candidate worker already holds in its KV cache.
 *
 * A PrefixSource answers, per request, "how many of this prompt's tokens are cached on each candidate"
 * (index-aligned with `workers`; `undefined` for a worker it knows nothing about) and, optionally, how
 * many tokens the prompt has. The cost model (cost-model.ts) takes an ORDERED list of sources and, per
 * candidate, uses the first source that knows that worker: an exact source (vLLM KV events: exact
 * block hashes of real tokens) goes first when present, the approximate radix tree last as fallback.
 * The prompt's token count comes from the first source that gives one, else from the character count
 * divided by `charsPerToken`.
 *
 * RadixPrefixSource is the approximate implementation over cache_aware's per-model radix tree
 * (radix-tree.ts): a candidate's cached tokens = the characters of the prompt it holds as a prefix,
 * divided by `charsPerToken` (a number, default 4, the usual English BPE average and the simulator's
 * rule; or per model, as cache_aware passes it: learned from the workers' usage, load/chars-per-token.ts),
 * rounded down; a candidate the tree has never seen holds 0. It knows nothing (undefined) for an empty routing
 * text (a request the router could not parse). A batched completions request (SelectionInput.prompts)
 * holds the sum over its prompts, each matched on its own, as vLLM caches each.
 *
 * Sources are read inside the synchronous selection step: they must not await and must not mutate
 * shared state; the policy's routed() does the bookkeeping and passes each choice on to the sources'
 * own routed().
 */
import type { Worker } from '../workers/worker.js';
import type { SelectionInput } from './policy.js';
import type { RadixTree } from './radix-tree.js';

export interface PrefixSource {
  /** Short label for decision logs and headers (e.g. `radix`, `kv_events`). */
  readonly name?: string;
  /** Its answers are the workers' own truth (KV events), not a picture of what the router sent. */
  readonly exact?: boolean;
  /**
   * Cached prompt tokens per candidate, index-aligned with `workers`; `undefined` at an index = no
   * knowledge of that worker; `undefined` overall = no knowledge of this request at all.
   */
  cachedTokens(
    input: SelectionInput,
    workers: readonly Worker[],
  ): readonly (number | undefined)[] | undefined;
  /**
   * True when this source's answer for `worker` may undercount (its KV-event index is known to miss
   * blocks the worker holds: kv-block-index.ts `incomplete`): the later sources are asked too and the
   * larger answer counts (resolvePrefix).
   */
  lowerBound?(worker: Worker): boolean;
  /** The prompt's token count when this source knows it (e.g. it tokenized the prompt). */
  promptTokens?(input: SelectionInput): number | undefined;
  /** Tokens the worker's cache holds in all, when this source knows (how full it is: cost-model.ts). */
  heldTokens?(worker: Worker): number | undefined;
  /** The policy routed `input` to `worker` (bookkeeping, e.g. blocks now pending there). */
  routed?(input: SelectionInput, worker: Worker, nowMs: number): void;
}

/** Default characters per token for the approximate source and the prompt-size fallback. */
export const DEFAULT_CHARS_PER_TOKEN = 4;

/** Prompt tokens from characters: ceil(chars / charsPerToken), 0 for an empty text. */
export function tokensFromChars(chars: number, charsPerToken: number): number {
  return chars <= 0 ? 0 : Math.ceil(chars / charsPerToken);
}

export class RadixPrefixSource implements PrefixSource {
  readonly name = 'radix';
  /** Characters per token for a model (a fixed number, or learned: load/chars-per-token.ts). */
  private readonly ratioOf: (model: string) => number;

  constructor(
    /** The model's tree, undefined while the model has none. */
    private readonly treeOf: (model: string) => RadixTree | undefined,
    charsPerToken: number | ((model: string) => number) = DEFAULT_CHARS_PER_TOKEN,
  ) {
    if (typeof charsPerToken === 'function') this.ratioOf = charsPerToken;
    else {
      if (!Number.isFinite(charsPerToken) || charsPerToken <= 0) {
        throw new RangeError(`charsPerToken must be > 0, got ${charsPerToken}`);
      }
      this.ratioOf = () => charsPerToken;
    }
  }

  cachedTokens(input: SelectionInput, workers: readonly Worker[]): number[] | undefined {
    if (input.text.length === 0) return undefined;
    const out = new Array<number>(workers.length).fill(0);
    const tree = this.treeOf(input.model);
    if (tree === undefined) return out;
    const chars = new Map<string, number>();
    if (input.prompts === undefined) tree.matchEachTenant(input.text, (tenant, n) => chars.set(tenant, n));
    else {
      // A batch: each prompt's own prefix (the deepest a tenant is visited at), summed over them.
      const one = new Map<string, number>();
      for (const prompt of input.prompts) {
        one.clear();
        tree.matchEachTenant(prompt, (tenant, n) => one.set(tenant, n));
        for (const [tenant, n] of one) chars.set(tenant, (chars.get(tenant) ?? 0) + n);
      }
    }
    if (chars.size === 0) return out;
    const ratio = this.ratioOf(input.model);
    for (let i = 0; i < workers.length; i++) {
      const n = chars.get((workers[i] as Worker).id);
      if (n !== undefined) out[i] = Math.floor(n / ratio);
    }
    return out;
  }

  promptTokens(input: SelectionInput): number | undefined {
    return input.text.length === 0
      ? undefined
      : tokensFromChars(input.text.length, this.ratioOf(input.model));
  }
}

export interface PrefixView {
  /** Prompt tokens (first source that knows, else chars / charsPerToken). */
  readonly promptTokens: number;
  /** Cached tokens per candidate (0 where no source knows the worker), clamped to [0, promptTokens]. */
  readonly cached: readonly number[];
  /** Per candidate: the name of the source that answered, undefined where none did. */
  readonly sourceOf: readonly (string | undefined)[];
  /** Every candidate was answered by an exact source (PrefixSource.exact). */
  readonly exact: boolean;
}

/**
 * Merges an ordered list of sources into one view: per candidate, the first source that knows it;
 * where that answer is only a lower bound (PrefixSource.lowerBound), the largest answer of it and the
 * sources after it (a worker whose exact index misses an old chain: the tree still knows what this
 * router sent it), and the view is not exact.
 */
export function resolvePrefix(
  sources: readonly PrefixSource[],
  input: SelectionInput,
  workers: readonly Worker[],
  charsPerToken: number = DEFAULT_CHARS_PER_TOKEN,
): PrefixView {
  let promptTokens: number | undefined;
  for (const s of sources) {
    promptTokens = s.promptTokens?.(input);
    if (promptTokens !== undefined && Number.isFinite(promptTokens) && promptTokens >= 0) break;
    promptTokens = undefined;
  }
  promptTokens ??= tokensFromChars(input.text.length, charsPerToken);
  const cached = new Array<number>(workers.length).fill(0);
  const sourceOf = new Array<string | undefined>(workers.length).fill(undefined);
  /** Answered by a lower bound only: later sources may still raise it. */
  let floors: boolean[] | undefined;
  let open = workers.length;
  let exact = workers.length > 0;
  for (let k = 0; k < sources.length && open > 0; k++) {
    const source = sources[k] as PrefixSource;
    const answer = source.cachedTokens(input, workers);
    if (answer === undefined) continue;
    for (let i = 0; i < workers.length; i++) {
      const floor = floors?.[i] === true;
      if (sourceOf[i] !== undefined && !floor) continue;
      const v = answer[i];
      if (v === undefined || !Number.isFinite(v)) continue;
      const tokens = Math.min(promptTokens, Math.max(0, v));
      if (floor) {
        if (tokens > (cached[i] as number)) {
          cached[i] = tokens;
          sourceOf[i] = source.name ?? `source${k}`;
        }
      } else {
        cached[i] = tokens;
        sourceOf[i] = source.name ?? `source${k}`;
      }
      if (source.exact !== true) exact = false;
      if (source.lowerBound?.(workers[i] as Worker) === true) {
        (floors ??= new Array<boolean>(workers.length).fill(false))[i] = true;
        exact = false;
        continue;
      }
      if (floor) (floors as boolean[])[i] = false;
      open -= 1;
    }
  }
  return { promptTokens, cached, sourceOf, exact: exact && open === 0 };
}
