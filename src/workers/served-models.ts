/**
 * What each worker serves: its base model names and LoRA adapters, and which workers can take a
 * request for a given model (worker-pool.ts `candidatesFor`).
 *
 * Sources, per worker URL:
 * - its `GET /v1/models` list (discovery/models-poller.ts), as vLLM writes it: one entry per
 *   `--served-model-name` (`parent` null) and one per LoRA adapter it has registered (`--lora-modules`
 *   or loaded at run time with `/v1/load_lora_adapter`), whose `parent` is the base model it runs on;
 * - else the `model_name` label of its scraped `/metrics` (vLLM labels its metrics with the FIRST
 *   served name only): one base name, no adapters.
 *
 * Who can serve model M (`servingRule`), from what the members are known to serve:
 * - some member lists M as a base name: those members;
 * - else some member lists M as an adapter: those members, and the members serving its parent base
 *   model (a resolver plugin loads it there on demand, and a vLLM resolver registers adapters as they
 *   are first used, so the workers that list one are merely those that served it first; another base
 *   model's worker cannot run it at all). As in the Gateway API inference extension, the workers of a
 *   base model are taken as interchangeable: an adapter loaded at run time on some of them only
 *   (`/v1/load_lora_adapter` sent to a worker directly, without a resolver) gets a 404 from the
 *   others; sent through the gateway, the router loads it on every worker (routing/lora-fanout.ts);
 * - else nothing is known of M (every member may: the request keeps the whole pool).
 * A member that lists nothing (not polled yet, no /v1/models, no label) is excluded once others are
 * known to serve M: it positively serves something else only when it lists something, but the rule
 * never routes a request to a worker that merely might serve it while one that does is known.
 *
 * Pure: no timers, metrics or logging. `version` changes whenever some worker's knowledge does, so
 * callers can memoize decisions derived from it.
 */

export interface ServedModels {
  /** Base model names (vLLM's `--served-model-name` values; the first is its metrics label). */
  readonly base: readonly string[];
  /** LoRA adapter name -> the base model it runs on. */
  readonly adapters: ReadonlyMap<string, string>;
  /** The list's entries as the worker wrote them (a `/v1/models` list only; none from a label). */
  readonly cards?: readonly ModelCard[];
  /** Listed id -> its `max_model_len` (vLLM's `--max-model-len`: prompt + output tokens at most). */
  readonly maxModelLen?: ReadonlyMap<string, number>;
}

/**
 * The longest request (prompt + output tokens) `model` takes on a worker serving `served`: its own
 * card's `max_model_len`, else (an adapter the worker does not list) its first base model's.
 */
export function maxModelLenOf(served: ServedModels | undefined, model: string): number | undefined {
  const lens = served?.maxModelLen;
  if (lens === undefined) return undefined;
  return lens.get(model) ?? lens.get(served!.base[0] ?? '');
}

/** One entry of an OpenAI model list (`id`, `object`, `owned_by`, `root`, `parent`, `max_model_len`, ...). */
export type ModelCard = Readonly<Record<string, unknown>>;

/** The most entries read from one list (a worker with thousands of adapters is cut, not refused). */
export const MAX_LISTED_MODELS = 4096;

const NO_ADAPTERS: ReadonlyMap<string, string> = new Map();

/**
 * Parses an OpenAI-style model list (`{"object":"list","data":[{"id":..,"parent":..},..]}`). An entry
 * with a string `parent` is an adapter; one without is a base model. Undefined when the text is not
 * such a list, or an empty one (the caller counts it as invalid and keeps what it knew).
 */
export function parseModelList(text: string): ServedModels | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof doc !== 'object' || doc === null) return undefined;
  const data = (doc as { data?: unknown }).data;
  if (!Array.isArray(data) || data.length === 0) return undefined; // an empty list says nothing
  const base: string[] = [];
  const adapters = new Map<string, string>();
  const cards: ModelCard[] = [];
  const lens = new Map<string, number>();
  for (const entry of data.slice(0, MAX_LISTED_MODELS)) {
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) continue;
    const {
      id,
      parent,
      max_model_len: len,
    } = entry as { id?: unknown; parent?: unknown; max_model_len?: unknown };
    if (typeof id !== 'string' || id === '') continue;
    cards.push(entry as ModelCard);
    if (typeof len === 'number' && Number.isInteger(len) && len > 0) lens.set(id, len);
    if (typeof parent === 'string' && parent !== '' && parent !== id) adapters.set(id, parent);
    else if (!base.includes(id)) base.push(id);
  }
  return {
    base,
    adapters: adapters.size > 0 ? adapters : NO_ADAPTERS,
    cards,
    ...(lens.size > 0 ? { maxModelLen: lens } : {}),
  };
}

interface Entry {
  listed?: ServedModels;
  label?: string;
  /** What `of` returns: `listed`, else one built from `label` (kept, so reads allocate nothing). */
  view?: ServedModels;
}

/**
 * Per worker URL: what it serves (see the header). Once told the current members (`retain`), it
 * ignores what is recorded for any other URL: a read that was in flight when its worker left must
 * not bring it back.
 */
export class ModelCatalog {
  private readonly byUrl = new Map<string, Entry>();
  private members: ReadonlySet<string> | undefined;
  private changes = 0;

  /** Changes whenever what some worker serves does. */
  get version(): number {
    return this.changes;
  }

  /**
   * The worker's `/v1/models` list (undefined: it has none; the label, if any, is used again). A list
   * that serves the same as before still replaces the cards the fleet's list shows (an adapter reloaded
   * in place, vLLM's `load_inplace`, has a new `root`), without a version change.
   */
  recordListed(url: string, served: ServedModels | undefined): void {
    if (this.members !== undefined && !this.members.has(url)) return;
    const e = this.entry(url);
    if (served !== undefined && e.listed !== undefined && same(e.listed, served)) {
      e.listed = served;
      e.view = served;
      return;
    }
    if (served === undefined && e.listed === undefined) return;
    if (served === undefined) delete e.listed;
    else e.listed = served;
    this.refresh(e);
  }

  /** The `model_name` label of the worker's scraped metrics. */
  recordLabel(url: string, label: string | undefined): void {
    if (this.members !== undefined && !this.members.has(url)) return;
    const e = this.entry(url);
    if (e.label === label) return;
    if (label === undefined || label === '') delete e.label;
    else e.label = label;
    this.refresh(e);
  }

  of(url: string): ServedModels | undefined {
    return this.byUrl.get(url)?.view;
  }

  /**
   * Every model the workers at `urls` list, one card per id (the first listed wins), in the order met:
   * the fleet's own model list. Undefined when none of them has a list (only labels, or nothing).
   */
  cardsOf(urls: Iterable<string>): ModelCard[] | undefined {
    const byId = new Map<string, ModelCard>();
    let listed = false;
    for (const url of urls) {
      const cards = this.byUrl.get(url)?.listed?.cards;
      if (cards === undefined) continue;
      listed = true;
      for (const card of cards) if (!byId.has(card.id as string)) byId.set(card.id as string, card);
    }
    return listed ? [...byId.values()] : undefined;
  }

  /** The current members: forgets the others (departed) and ignores records for them from now on. */
  retain(urls: ReadonlySet<string>): void {
    this.members = urls;
    for (const url of this.byUrl.keys()) {
      if (urls.has(url)) continue;
      this.byUrl.delete(url);
      this.changes += 1;
    }
  }

  /** Forgets what `url` serves (a new process there may serve something else). */
  forget(url: string): void {
    if (this.byUrl.delete(url)) this.changes += 1;
  }

  private entry(url: string): Entry {
    let e = this.byUrl.get(url);
    if (e === undefined) {
      e = {};
      this.byUrl.set(url, e);
    }
    return e;
  }

  private refresh(e: Entry): void {
    const view = e.listed ?? (e.label !== undefined ? { base: [e.label], adapters: NO_ADAPTERS } : undefined);
    if (view === undefined) delete e.view;
    else e.view = view;
    this.changes += 1;
  }
}

/**
 * Which of `members` can serve `model` (see the header), or undefined when nothing is known of it.
 * `of` gives a member's served models.
 */
export function servingRule<W>(
  model: string,
  members: readonly W[],
  of: (member: W) => ServedModels | undefined,
): ((member: W) => boolean) | undefined {
  if (model === '') return undefined;
  let asBase = false;
  let parents: Set<string> | undefined;
  for (const m of members) {
    const s = of(m);
    if (s === undefined) continue;
    if (s.base.includes(model)) {
      asBase = true;
      break;
    }
    const parent = s.adapters.get(model);
    if (parent !== undefined) (parents ??= new Set()).add(parent);
  }
  if (asBase) return (m) => of(m)?.base.includes(model) === true;
  if (parents === undefined) return undefined;
  const family = parents;
  return (m) => {
    const s = of(m);
    return s !== undefined && (s.adapters.has(model) || s.base.some((b) => family.has(b)));
  };
}

function same(a: ServedModels | undefined, b: ServedModels): boolean {
  if (a === undefined || a.base.length !== b.base.length || a.adapters.size !== b.adapters.size) return false;
  for (let i = 0; i < a.base.length; i++) if (a.base[i] !== b.base[i]) return false;
  for (const [k, v] of b.adapters) if (a.adapters.get(k) !== v) return false;
  if ((a.maxModelLen?.size ?? 0) !== (b.maxModelLen?.size ?? 0)) return false;
  for (const [k, v] of b.maxModelLen ?? []) if (a.maxModelLen?.get(k) !== v) return false;
  return true;
}
