/**
 * RadixTree against a naive character-level model (seeded random operations).
 *
 * Model: per tenant, the set of prefixes (as strings) it holds, each with the tick of the last
 * insert that passed through it. A node of the tree is a run of prefixes that all tenants hold
 * or lack together, so:
 *   tenantChars(t)  = |held(t)|
 *   totalChars      = |union of held(t)|
 *   prefixMatch     = longest LCP with a held prefix of an accepted tenant, tenants = those reaching it
 *   matchEachTenant = per tenant, its longest held prefix of the query
 * evictTenantUpTo(t, tick) = drop every prefix of t with tick <= tick (exact at char level).
 * evictTenantToSize: checked by properties, then the model is re-synced from the tree.
 */
import { describe, expect, it } from 'vitest';
import { RadixTree } from '../../../src/routing/radix-tree.js';
import { PieceText, type RoutingText } from '../../../src/util/piece-text.js';
import { seededRandom } from '../../../src/util/seeded-random.js';

type Model = Map<string, Map<string, number>>; // tenant -> prefix -> tick

function asPieces(text: string, rnd: () => number): RoutingText {
  if (text.length < 2 || rnd() < 0.5) return text;
  const pieces: string[] = [];
  let at = 0;
  while (at < text.length) {
    const n = Math.floor(rnd() * 4); // 0..3, empty pieces allowed
    pieces.push(text.slice(at, at + n));
    at += n;
  }
  if (rnd() < 0.3) pieces.push('');
  return new PieceText(pieces);
}

function heldLength(held: Map<string, number>, q: string): number {
  let n = 0;
  for (let k = 1; k <= q.length; k++) if (held.has(q.slice(0, k))) n = k;
  return n;
}

function check(tree: RadixTree, model: Model, rnd: () => number, alphabet: string): void {
  const union = new Set<string>();
  for (const [t, held] of model) {
    expect(tree.tenantCharCount(t)).toBe(held.size);
    for (const p of held.keys()) union.add(p);
  }
  expect(tree.totalChars()).toBe(union.size);
  const re = tree.recount();
  expect(re.totalChars).toBe(union.size);
  for (const [t, held] of model) expect(re.tenantChars.get(t) ?? 0).toBe(held.size);
  expect([...tree.tenants()].sort()).toEqual([...model.keys()].sort());

  for (let q = 0; q < 6; q++) {
    const query = randomText(rnd, alphabet, 12);
    const tenants = [...model.keys()];
    const accepted = new Set(tenants.filter(() => rnd() < 0.6));
    for (const accept of [undefined, (t: string) => accepted.has(t)]) {
      let best = 0;
      for (const [t, held] of model) {
        if (accept && !accept(t)) continue;
        best = Math.max(best, heldLength(held, query));
      }
      const holders = [...model]
        .filter(([t, held]) => (!accept || accept(t)) && best > 0 && heldLength(held, query) >= best)
        .map(([t]) => t)
        .sort();
      const m = tree.prefixMatch(asPieces(query, rnd), accept);
      expect(m.matchedChars, `query ${JSON.stringify(query)}`).toBe(best);
      expect([...m.tenants].sort()).toEqual(holders);
      if (best > 0) {
        // most recent: the highest tick on the matched prefix
        const p = query.slice(0, best);
        let mru: string | undefined;
        let tick = -1;
        for (const t of holders) {
          const k = model.get(t)!.get(p)!;
          if (k > tick) {
            tick = k;
            mru = t;
          }
        }
        expect(m.tenant).toBe(mru);
      } else expect(m.tenant).toBeUndefined();
    }
    const each = new Map<string, number>();
    tree.matchEachTenant(asPieces(query, rnd), (t, n) => each.set(t, n));
    for (const [t, held] of model) {
      const n = heldLength(held, query);
      expect(each.get(t) ?? 0, `tenant ${t} query ${JSON.stringify(query)}`).toBe(n);
    }
  }
}

let MAXLEN = 12;
function randomText(rnd: () => number, alphabet: string, max: number): string {
  const n = Math.floor(rnd() * (Math.max(max, MAXLEN) + 1));
  let s = '';
  for (let i = 0; i < n; i++) s += alphabet[Math.floor(rnd() * alphabet.length)];
  return s;
}

function run(seed: number, alphabet: string, steps: number): void {
  const rnd = seededRandom(seed);
  const tree = new RadixTree();
  const model: Model = new Map();
  let tick = 0;
  const tenantNames = ['a', 'b', 'c', 'd'];
  for (let step = 0; step < steps; step++) {
    const r = rnd();
    const t = tenantNames[Math.floor(rnd() * tenantNames.length)] as string;
    if (r < 0.55) {
      const text = randomText(rnd, alphabet, 12);
      tick += 1;
      let held = model.get(t);
      if (held === undefined) model.set(t, (held = new Map()));
      const before = heldLength(held, text);
      const beforeTick = before > 0 ? (held.get(text.slice(0, before)) as number) : 0;
      for (let k = 1; k <= text.length; k++) held.set(text.slice(0, k), tick);
      const got = tree.insert(asPieces(text, rnd), t, step);
      expect(got.heldChars).toBe(before);
      if (before > 0) expect(got.heldTick).toBe(beforeTick);
    } else if (r < 0.62) {
      tree.removeTenant(t);
      model.delete(t);
    } else if (r < 0.67) {
      tree.addTenant(t);
      if (!model.has(t)) model.set(t, new Map());
    } else if (r < 0.8) {
      const held = model.get(t);
      const upTo = Math.floor(rnd() * (tick + 1));
      const dropped = tree.evictTenantUpTo(t, upTo);
      let expected = 0;
      if (held) {
        for (const [p, k] of held) {
          if (k <= upTo) {
            held.delete(p);
            expected++;
          }
        }
      }
      expect(dropped).toBe(expected);
    } else {
      const held = model.get(t);
      const max = Math.floor(rnd() * 20 * (MAXLEN / 12));
      const before = tree.tenantCharCount(t);
      const evicted = tree.evictTenantToSize(t, max);
      expect(before - evicted).toBe(tree.tenantCharCount(t));
      if (held) {
        // re-sync: a prefix is still held iff the tree still shows the tenant reaching it
        const kept = new Map<string, number>();
        const removed: number[] = [];
        for (const [p, k] of held) {
          let n = 0;
          tree.matchEachTenant(p, (tt, c) => {
            if (tt === t) n = c;
          });
          if (n === p.length) kept.set(p, k);
          else removed.push(k);
        }
        model.set(t, kept);
        if (before > max) expect(kept.size).toBeLessThanOrEqual(max);
        else expect(evicted).toBe(0);
        // LRU: nothing kept is older than something evicted
        const minKept = Math.min(...kept.values());
        for (const k of removed) expect(k).toBeLessThanOrEqual(minKept);
      }
    }
    check(tree, model, rnd, alphabet);
  }
}

describe('RadixTree vs naive model', () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`seed ${seed}, alphabet ab`, () => run(seed, 'ab', 300));
    it(`seed ${seed}, alphabet abc + surrogates`, () => run(seed * 101, 'ab\uD83D\uDE00', 300));
    it(`seed ${seed}, long texts, skewed alphabet`, () => {
      MAXLEN = 70;
      try {
        run(seed * 7919, 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaab', 200);
      } finally {
        MAXLEN = 12;
      }
    });
  }
});
