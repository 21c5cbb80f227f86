/**
 * A consistent-hash ring with virtual nodes.
 *
 * Each member (an id, placed by a stable label) owns `virtualNodes` points: hash32(`${label}#${k}`)
 * for k in [0, virtualNodes). A key hashes to a point on the ring and belongs to the member owning
 * the first point clockwise (>= the key's hash, wrapping). With 160 points per member (the reference
 * router's figure) each member's share of the ring is within a few percent of 1/n, and adding or
 * removing a member only moves the keys of the arcs it gains or loses.
 *
 * `find` takes an `accept` filter: when the owner is not acceptable (unhealthy, not a candidate)
 * the key falls to the NEXT point clockwise whose owner is acceptable, so each unavailable member's
 * keys spread over the others in ring order, never onto one fixed fallback worker.
 *
 * Points are kept sorted by (hash, id) in flat arrays, rebuilt on every membership change
 * (O(P log P), P = members * virtualNodes; membership changes are rare next to lookups, which are a
 * binary search). Pure: no timers, metrics or logging.
 */
import { hash32 } from '../util/hash32.js';

export { hash32 };

export interface RingHit {
  readonly id: string;
  /** True when the key's owner was not acceptable and a later point's owner was taken. */
  readonly fellThrough: boolean;
}

export class HashRing {
  private readonly labels = new Map<string, string>();
  private hashes = new Uint32Array(0);
  private owners: string[] = [];
  /** Membership changed since the points were last built (rebuilt lazily, once, on the next lookup). */
  private dirty = false;

  constructor(readonly virtualNodes = 160) {
    if (!Number.isInteger(virtualNodes) || virtualNodes < 1) {
      throw new RangeError(`HashRing: virtualNodes must be a positive integer, got ${virtualNodes}`);
    }
  }

  /** Adds or re-places a member. */
  set(id: string, label: string): void {
    if (this.labels.get(id) === label) return;
    this.labels.set(id, label);
    this.dirty = true;
  }

  delete(id: string): void {
    if (this.labels.delete(id)) this.dirty = true;
  }

  has(id: string): boolean {
    return this.labels.has(id);
  }

  get size(): number {
    return this.labels.size;
  }

  /** Owner of `hash`, or of the next point whose owner is accepted; undefined if none is. */
  find(hash: number, accept?: (id: string) => boolean): RingHit | undefined {
    if (this.dirty) this.rebuild();
    const points = this.hashes.length;
    const start = this.firstPointAtOrAfter(hash);
    for (let step = 0; step < points; step++) {
      const id = this.owners[(start + step) % points] as string;
      if (accept === undefined || accept(id)) return { id, fellThrough: step > 0 };
    }
    return undefined;
  }

  /** Distinct owners in ring order from `hash` (the fallback order of a key; for tests/diagnostics). */
  ownersFrom(hash: number): string[] {
    if (this.dirty) this.rebuild();
    const seen = new Set<string>();
    const points = this.hashes.length;
    const start = this.firstPointAtOrAfter(hash);
    for (let step = 0; step < points && seen.size < this.labels.size; step++) {
      seen.add(this.owners[(start + step) % points] as string);
    }
    return [...seen];
  }

  /** Index of the first point with hash >= `hash` (binary search; `points` wraps to 0 via mod). */
  private firstPointAtOrAfter(hash: number): number {
    let lo = 0;
    let hi = this.hashes.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((this.hashes[mid] as number) < hash) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private rebuild(): void {
    const entries: Array<{ hash: number; id: string }> = [];
    for (const [id, label] of this.labels) {
      for (let k = 0; k < this.virtualNodes; k++) entries.push({ hash: hash32(`${label}#${k}`), id });
    }
    entries.sort((a, b) => a.hash - b.hash || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    this.hashes = Uint32Array.from(entries, (e) => e.hash);
    this.owners = entries.map((e) => e.id);
    this.dirty = false;
  }
}
