/**
 * The exact prefix index: which KV blocks each worker holds, by the router's own block keys
 * (block-keys.ts), fed by decoded vLLM KV events.
 *
 * Per worker (keyed by the caller's worker key, e.g. its URL; a new registration generation calls
 * clearWorker first, so it starts empty):
 * - `held`: own key -> {tiers, engine}: `tiers` a bit set of the media (GPU, CPU, ...) holding the
 *   block, `engine` the engine's hash for it. Map insertion order is the LRU order (a store moves the
 *   key to the end).
 * - `engineToOwn`: engine hash -> own key, so BlockRemoved (which carries only engine hashes) resolves,
 *   and so a BlockStored's `parent_block_hash` gives the own key its chain continues from.
 *
 * Events:
 * - BlockStored: parent unresolvable (we joined mid-stream, or it was already evicted) -> the event is
 *   dropped (`unknown_parent`): its own keys cannot be computed. Otherwise own keys are chained from the
 *   parent's own key (or the adapter's seed) over `token_ids`, and each block gains the event's medium.
 * - Offloaded (vLLM's offloading connector copied blocks it announced to its CPU / storage tier,
 *   without their tokens: kv-event-decoder.ts): each resolvable block gains the medium, so it stays
 *   held, at that tier's credit, once the GPU evicts it. Unknown hashes are ignored (`unknownBlocks`).
 * - BlockRemoved: the medium is cleared from each resolvable block; a block left on no medium is
 *   forgotten. Unknown hashes are ignored (`unknown_block`, normal after a clear or an LRU drop).
 * - AllBlocksCleared: the worker's entries are dropped.
 *
 * Unknown chains (`incomplete`): a BlockStored whose parent cannot be resolved proves the worker holds
 * blocks this index does not know (stored before the router saw its stream: a replay that reached back
 * only the publisher's last `buffer_steps` batches, a gap or reconnect without replay, a router that
 * joined a running fleet, or this index's own per-worker bound). vLLM announces a block once, when it
 * stores it, so while the worker keeps that chain cached (a shared system prompt: for good) every
 * prompt extending it is invisible here, and the worker reads as holding none of it. Such a worker is
 * `incomplete` while any engine hash of those chains (the dropped event's parent and its own blocks)
 * is still held by it as far as the events tell: a BlockRemoved of the hash (evicted), a later known
 * BlockStored of it, a clear (AllBlocksCleared, a reset) resolves it; a prompt that extends an older
 * unknown ancestor drops again and names it. Callers then treat the worker's answers as a lower bound
 * (kv-prefix-source.ts, routing/prefix-source.ts). At most `maxBlocksPerWorker` hashes per worker
 * (oldest forgotten first).
 *
 * Bounded memory: at most `maxBlocksPerWorker` entries per worker; storing beyond it forgets that
 * worker's least recently stored blocks (counted as `evicted`). Worker count is bounded by the
 * caller (only configured / registered workers have publishers). Memory per entry measured in
 * docs/benchmarks.md.
 *
 * Lookup (`cachedTokens`): for each candidate, the longest run of consecutive prompt blocks from the
 * first one that it holds (a prefix: vLLM only reuses a cached prefix), each block weighted by the best
 * tier credit among the media holding it (default GPU 1, anything else 0.5: a CPU / storage hit saves
 * the prefill compute but pays a transfer). Returns credited tokens per candidate.
 *
 * Block sizes: each worker's block size is learned from its BlockStored events; callers compute
 * request keys per distinct block size (`blockSizes()`). LoRA: keys are seeded per adapter name;
 * `isAdapter(name)` tells whether an event ever named it, so a request's `model` selects the seed.
 *
 * Pure data structure: no timers, metrics or logging; apply() returns what happened.
 */
import { chainKeys, keySeed } from './block-keys.js';
import type { EngineHash, KvEvent } from './kv-event-decoder.js';

export interface KvIndexOptions {
  /** Entries kept per worker. Default 262,144 (4M tokens at block size 16). */
  maxBlocksPerWorker: number;
  /** Credit per medium (upper-case); media not listed get `defaultTierCredit`. Default {GPU: 1}. */
  tierCredit: Readonly<Record<string, number>>;
  /** Default 0.5. */
  defaultTierCredit: number;
}

export const DEFAULT_KV_INDEX_OPTIONS: Readonly<KvIndexOptions> = Object.freeze({
  maxBlocksPerWorker: 262_144,
  tierCredit: Object.freeze({ GPU: 1 }),
  defaultTierCredit: 0.5,
});

/** What applying a batch did, for metrics. */
export interface ApplyResult {
  applied: number;
  /** Events dropped, by reason. */
  dropped: Partial<Record<'unknown_parent' | 'block_size_mismatch' | 'too_many_tiers', number>>;
  /** BlockRemoved (and offloaded) hashes that matched nothing. */
  unknownBlocks: number;
  /** Entries forgotten by the per-worker bound. */
  evicted: number;
}

interface Entry {
  tiers: number;
  engine: EngineHash;
}

interface WorkerBlocks {
  readonly held: Map<number, Entry>;
  readonly engineToOwn: Map<EngineHash, number>;
  blockSize: number;
}

const MAX_TIERS = 31;

export class KvBlockIndex {
  readonly options: Readonly<KvIndexOptions>;
  private readonly workers = new Map<string, WorkerBlocks>();
  private readonly tierBits = new Map<string, number>();
  /** Credit per tier bit. */
  private readonly credits: number[] = [];
  private readonly adapters = new Set<string>();
  private readonly blockSizeCounts = new Map<number, number>();
  /** Per worker: engine hashes of chains it holds that this index cannot resolve (see the header). */
  private readonly unknown = new Map<string, Set<EngineHash>>();

  constructor(options: Partial<KvIndexOptions> = {}) {
    const o = { ...DEFAULT_KV_INDEX_OPTIONS, ...options };
    if (!Number.isInteger(o.maxBlocksPerWorker) || o.maxBlocksPerWorker < 1) {
      throw new RangeError('kv index: maxBlocksPerWorker must be a positive integer');
    }
    for (const [tier, credit] of Object.entries(o.tierCredit)) {
      if (!(credit >= 0 && credit <= 1))
        throw new RangeError(`kv index: tier credit for ${tier} must be in [0, 1]`);
    }
    if (!(o.defaultTierCredit >= 0 && o.defaultTierCredit <= 1)) {
      throw new RangeError('kv index: defaultTierCredit must be in [0, 1]');
    }
    this.options = Object.freeze(o);
    this.tierBit('GPU');
  }

  /**
   * Applies one batch's events for `worker` in order. `stored`, when given, receives the own key of
   * every block a BlockStored event stored (pending blocks are confirmed from it: kv-prefix-source.ts).
   */
  apply(worker: string, events: readonly KvEvent[], stored?: number[]): ApplyResult {
    const result: ApplyResult = { applied: 0, dropped: {}, unknownBlocks: 0, evicted: 0 };
    for (const event of events) {
      if (event.type === 'cleared') {
        this.clearWorker(worker);
        result.applied++;
        continue;
      }
      const w = this.workers.get(worker);
      if (event.type === 'removed') {
        result.applied++;
        this.resolve(worker, event.hashes);
        if (w === undefined) {
          result.unknownBlocks += event.hashes.length;
          continue;
        }
        const bit = this.tierBits.get(event.medium);
        for (const h of event.hashes) {
          const own = w.engineToOwn.get(h);
          const entry = own === undefined ? undefined : w.held.get(own);
          if (own === undefined || entry === undefined || bit === undefined || (entry.tiers & bit) === 0) {
            result.unknownBlocks++;
            continue;
          }
          entry.tiers &= ~bit;
          if (entry.tiers === 0) {
            w.held.delete(own);
            w.engineToOwn.delete(h);
          }
        }
        continue;
      }
      if (event.type === 'offloaded') {
        result.applied++;
        const bit = this.tierBit(event.medium);
        if (bit === undefined) {
          bump(result.dropped, 'too_many_tiers');
          continue;
        }
        for (const h of event.hashes) {
          const own = w?.engineToOwn.get(h);
          const entry = own === undefined ? undefined : w?.held.get(own);
          if (entry === undefined) result.unknownBlocks++;
          else entry.tiers |= bit;
        }
        continue;
      }
      // BlockStored
      const bit = this.tierBit(event.medium);
      if (bit === undefined) {
        bump(result.dropped, 'too_many_tiers');
        continue;
      }
      let parentKey = keySeed(event.loraName);
      const target = w ?? this.workerFor(worker, event.blockSize);
      if (target.blockSize !== event.blockSize && target.held.size === 0) {
        this.countBlockSize(target.blockSize, -1);
        target.blockSize = event.blockSize;
        this.countBlockSize(target.blockSize, 1);
      }
      if (target.blockSize !== event.blockSize) {
        bump(result.dropped, 'block_size_mismatch');
        continue;
      }
      if (event.parent !== undefined) {
        const p = target.engineToOwn.get(event.parent);
        if (p === undefined) {
          bump(result.dropped, 'unknown_parent');
          this.noteUnknown(worker, event.parent, event.hashes);
          if (target.held.size === 0 && w === undefined) this.forgetBlocks(worker);
          continue;
        }
        parentKey = p;
      }
      if (event.loraName !== undefined && this.adapters.size < 4096) this.adapters.add(event.loraName);
      const keys = chainKeys(event.tokens, event.blockSize, parentKey, event.hashes.length, event.extraKeys);
      for (let i = 0; i < keys.length; i++) {
        const own = keys[i] as number;
        const engine = event.hashes[i] as EngineHash;
        const entry = target.held.get(own);
        if (entry !== undefined) {
          target.held.delete(own);
          if (entry.engine !== engine) {
            target.engineToOwn.delete(entry.engine);
            entry.engine = engine;
          }
          entry.tiers |= bit;
          target.held.set(own, entry);
        } else {
          target.held.set(own, { tiers: bit, engine });
        }
        target.engineToOwn.set(engine, own);
      }
      if (stored !== undefined) for (const own of keys) stored.push(own);
      if (this.unknown.has(worker)) this.resolve(worker, event.hashes);
      result.applied++;
      const over = target.held.size - this.options.maxBlocksPerWorker;
      if (over > 0) {
        const it = target.held.entries();
        for (let i = 0; i < over; i++) {
          const [own, entry] = it.next().value as [number, Entry];
          target.held.delete(own);
          if (target.engineToOwn.get(entry.engine) === own) target.engineToOwn.delete(entry.engine);
        }
        result.evicted += over;
      }
    }
    return result;
  }

  /** Forgets everything about `worker` (AllBlocksCleared, a gap without replay, a new generation). */
  clearWorker(worker: string): void {
    this.unknown.delete(worker);
    const w = this.workers.get(worker);
    if (w === undefined) return;
    w.held.clear();
    w.engineToOwn.clear();
  }

  /** Forgets `worker` entirely (it left the fleet). */
  dropWorker(worker: string): void {
    this.unknown.delete(worker);
    this.forgetBlocks(worker);
  }

  /** True when `worker` has published at least one stored block since it was last dropped. */
  hasWorker(worker: string): boolean {
    return this.workers.has(worker);
  }

  /**
   * True while `worker` holds a chain of blocks this index cannot resolve (see the header): its
   * cached-token answers may undercount.
   */
  incomplete(worker: string): boolean {
    return this.unknown.has(worker);
  }

  /** Block sizes in use by indexed workers. */
  blockSizes(): number[] {
    return [...this.blockSizeCounts.keys()];
  }

  blockSizeOf(worker: string): number | undefined {
    return this.workers.get(worker)?.blockSize;
  }

  /** True when some event named `name` as its LoRA adapter (so a request for it uses its seed). */
  isAdapter(name: string): boolean {
    return this.adapters.has(name);
  }

  /** Entries per worker (for metrics). */
  sizes(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [worker, w] of this.workers) out.set(worker, w.held.size);
    return out;
  }

  size(worker: string): number {
    return this.workers.get(worker)?.held.size ?? 0;
  }

  /**
   * Credited cached tokens per candidate for a prompt whose block keys (at block size `blockSize`)
   * are `keys`; undefined for a candidate that has no index (it publishes no events, or not at this
   * block size), so the caller can fall back for it.
   */
  cachedTokens(
    keys: readonly number[],
    blockSize: number,
    workers: readonly string[],
  ): (number | undefined)[] {
    const out = new Array<number | undefined>(workers.length);
    for (let i = 0; i < workers.length; i++) {
      const w = this.workers.get(workers[i] as string);
      if (w === undefined || w.blockSize !== blockSize) {
        out[i] = undefined;
        continue;
      }
      let credit = 0;
      for (const key of keys) {
        const entry = w.held.get(key);
        if (entry === undefined) break;
        credit += this.creditOf(entry.tiers);
      }
      out[i] = credit * blockSize;
    }
    return out;
  }

  private creditOf(tiers: number): number {
    if (tiers === 1) return this.credits[0] as number;
    let best = 0;
    for (let bit = 0; tiers !== 0; bit++, tiers >>>= 1) {
      if ((tiers & 1) !== 0 && (this.credits[bit] as number) > best) best = this.credits[bit] as number;
    }
    return best;
  }

  /** Forgets the worker's blocks and block size (not its unknown chains). */
  private forgetBlocks(worker: string): void {
    const w = this.workers.get(worker);
    if (w === undefined) return;
    this.workers.delete(worker);
    this.countBlockSize(w.blockSize, -1);
  }

  /** A dropped BlockStored showed `worker` holding `parent` and storing `hashes` under it. */
  private noteUnknown(worker: string, parent: EngineHash, hashes: readonly EngineHash[]): void {
    let set = this.unknown.get(worker);
    if (set === undefined) {
      set = new Set();
      this.unknown.set(worker, set);
    }
    for (const h of [parent, ...hashes]) {
      set.delete(h);
      set.add(h);
    }
    const max = this.options.maxBlocksPerWorker;
    if (set.size > max) {
      const it = set.values();
      for (let over = set.size - max; over > 0; over--) set.delete(it.next().value as EngineHash);
    }
  }

  /** These hashes left `worker` (removed) or are now known (stored with a known parent). */
  private resolve(worker: string, hashes: readonly EngineHash[]): void {
    const set = this.unknown.get(worker);
    if (set === undefined) return;
    for (const h of hashes) set.delete(h);
    if (set.size === 0) this.unknown.delete(worker);
  }

  private workerFor(worker: string, blockSize: number): WorkerBlocks {
    const w: WorkerBlocks = { held: new Map(), engineToOwn: new Map(), blockSize };
    this.workers.set(worker, w);
    this.countBlockSize(blockSize, 1);
    return w;
  }

  private countBlockSize(blockSize: number, delta: number): void {
    const n = (this.blockSizeCounts.get(blockSize) ?? 0) + delta;
    if (n > 0) this.blockSizeCounts.set(blockSize, n);
    else this.blockSizeCounts.delete(blockSize);
  }

  /** The bit of a medium, assigned on first sight (at most 31 media; undefined beyond). */
  private tierBit(medium: string): number | undefined {
    let bit = this.tierBits.get(medium);
    if (bit === undefined) {
      if (this.tierBits.size >= MAX_TIERS) return undefined;
      const index = this.tierBits.size;
      bit = 1 << index;
      this.tierBits.set(medium, bit);
      this.credits[index] = this.options.tierCredit[medium] ?? this.options.defaultTierCredit;
    }
    return bit;
  }
}

function bump<K extends string>(counts: Partial<Record<K, number>>, key: K): void {
  counts[key] = (counts[key] ?? 0) + 1;
}
