import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { flatCopy, flatSlice } from '../../../src/routing/flat-string.js';
import { commonPrefixLength, RadixTree } from '../../../src/routing/radix-tree.js';
import { PieceText } from '../../../src/util/piece-text.js';

type Op = [text: string, tenant: string];

function build(ops: readonly Op[]): RadixTree {
  const tree = new RadixTree();
  ops.forEach(([text, tenant], i) => tree.insert(text, tenant, 1000 + i));
  return tree;
}

/** The tree's incremental counts agree with a recount from its nodes. */
function expectConsistent(tree: RadixTree): void {
  const recount = tree.recount();
  expect(tree.totalChars()).toBe(recount.totalChars);
  for (const tenant of tree.tenants()) {
    expect(tree.tenantCharCount(tenant)).toBe(recount.tenantChars.get(tenant) ?? 0);
  }
  for (const tenant of recount.tenantChars.keys()) expect(tree.tenants()).toContain(tenant);
}

describe('RadixTree prefixMatch', () => {
  it.each([
    { name: 'empty tree', ops: [], query: 'hello', matched: 0, tenants: [], tenant: undefined },
    { name: 'empty query', ops: [['hello', 'a']], query: '', matched: 0, tenants: [], tenant: undefined },
    { name: 'exact', ops: [['hello', 'a']], query: 'hello', matched: 5, tenants: ['a'], tenant: 'a' },
    {
      name: 'query extends',
      ops: [['hello', 'a']],
      query: 'hello world',
      matched: 5,
      tenants: ['a'],
      tenant: 'a',
    },
    {
      name: 'query ends inside an edge',
      ops: [['hello world', 'a']],
      query: 'hello',
      matched: 5,
      tenants: ['a'],
    },
    {
      name: 'mismatch inside an edge',
      ops: [['hello world', 'a']],
      query: 'help',
      matched: 3,
      tenants: ['a'],
    },
    { name: 'no common first char', ops: [['hello', 'a']], query: 'world', matched: 0, tenants: [] },
    {
      name: 'longest match wins over shared prefix',
      ops: [
        ['system: be brief. user: hi', 'a'],
        ['system: be brief. user: bye', 'b'],
      ],
      query: 'system: be brief. user: bye now',
      matched: 27,
      tenants: ['b'],
      tenant: 'b',
    },
    {
      name: 'shared prefix held by both',
      ops: [
        ['system: be brief. user: hi', 'a'],
        ['system: be brief. user: bye', 'b'],
      ],
      query: 'system: be brief. assistant',
      matched: 18,
      tenants: ['a', 'b'],
      tenant: 'b',
    },
    {
      name: 'MRU tenant among holders',
      ops: [
        ['shared prompt text', 'a'],
        ['shared prompt text', 'b'],
        ['shared prompt text', 'a'],
      ],
      query: 'shared prompt text',
      matched: 18,
      tenants: ['a', 'b'],
      tenant: 'a',
    },
    {
      name: 'long edges (bisection path)',
      ops: [['x'.repeat(5000) + 'A' + 'y'.repeat(3000), 'a']],
      query: 'x'.repeat(5000) + 'B',
      matched: 5000,
      tenants: ['a'],
    },
  ] as Array<{
    name: string;
    ops: Op[];
    query: string;
    matched: number;
    tenants: string[];
    tenant?: string;
  }>)('$name', ({ ops, query, matched, tenants, tenant }) => {
    const tree = build(ops);
    const m = tree.prefixMatch(query);
    expect(m.matchedChars).toBe(matched);
    expect([...m.tenants].sort()).toEqual(tenants);
    if (tenant !== undefined) expect(m.tenant).toBe(tenant);
    if (tenants.length === 0) expect(m.tenant).toBeUndefined();
    expectConsistent(tree);
  });

  it('MRU follows the latest insert even within the same millisecond', () => {
    const tree = new RadixTree();
    tree.insert('same prefix, many tenants', 'a', 5);
    tree.insert('same prefix, many tenants', 'b', 5);
    expect(tree.prefixMatch('same prefix, many tenants').tenant).toBe('b');
    tree.insert('same prefix, many tenants', 'a', 5);
    expect(tree.prefixMatch('same prefix, many tenants').tenant).toBe('a');
    expect(tree.tenantLastInsertMs('a')).toBe(5);
  });

  it('restricts the match to accepted tenants', () => {
    const tree = build([
      ['the quick brown fox jumps', 'gone'],
      ['the quick brown', 'ok'],
    ]);
    expect(tree.prefixMatch('the quick brown fox jumps').matchedChars).toBe(25);
    const m = tree.prefixMatch('the quick brown fox jumps', (t) => t === 'ok');
    expect(m).toEqual({ tenant: 'ok', matchedChars: 15, tenants: ['ok'] });
    expect(tree.prefixMatch('the quick', () => false).matchedChars).toBe(0);
  });
});

describe('RadixTree insert and counts', () => {
  it('splits edges and counts each tenant by the edges it holds', () => {
    const tree = new RadixTree();
    tree.insert('hello world', 'a', 1);
    expect(tree.recount().nodes).toBe(1);
    tree.insert('hello there', 'b', 2);
    // "hello " -> { "world", "there" }
    expect(tree.recount().nodes).toBe(3);
    expect(tree.totalChars()).toBe(6 + 5 + 5);
    expect(tree.tenantCharCount('a')).toBe(11);
    expect(tree.tenantCharCount('b')).toBe(11);
    tree.insert('hello', 'c', 3); // ends inside the shared edge: splits it
    expect(tree.recount().nodes).toBe(4);
    expect(tree.tenantCharCount('c')).toBe(5);
    expect(tree.totalChars()).toBe(16);
    tree.insert('hello world', 'a', 4); // re-insert: nothing new
    expect(tree.tenantCharCount('a')).toBe(11);
    expect(tree.totalChars()).toBe(16);
    expectConsistent(tree);
  });

  it('registers tenants without text', () => {
    const tree = new RadixTree();
    tree.addTenant('w1');
    tree.addTenant('w1');
    expect(tree.tenants()).toEqual(['w1']);
    expect(tree.hasTenant('w1')).toBe(true);
    expect(tree.tenantCharCount('w1')).toBe(0);
    expect(tree.totalChars()).toBe(0);
    tree.insert('', 'w2', 1);
    expect(tree.tenants()).toEqual(['w1', 'w2']);
    expect(tree.totalChars()).toBe(0);
  });

  it.each([
    { name: 'emoji', a: 'chat 😀😀 then', b: 'chat 😀😁 other', common: 'chat 😀\uD83D'.length },
    { name: 'CJK', a: '你好，世界。今天', b: '你好，朋友', common: 3 },
    { name: 'split inside a surrogate pair', a: '😀', b: '😁', common: 1 },
    { name: 'lone surrogates', a: 'x\uD800y', b: 'x\uD800z', common: 2 },
  ])('unicode by UTF-16 code unit: $name', ({ a, b, common }) => {
    const tree = build([
      [a, 't1'],
      [b, 't2'],
    ]);
    expect(tree.prefixMatch(a).matchedChars).toBe(a.length);
    expect(tree.prefixMatch(b).matchedChars).toBe(b.length);
    const shared = tree.prefixMatch(a.slice(0, common) + '\u0000');
    expect(shared.matchedChars).toBe(common);
    expect([...shared.tenants].sort()).toEqual(['t1', 't2']);
    expect(tree.totalChars()).toBe(a.length + b.length - common);
    expectConsistent(tree);
  });
});

describe('RadixTree removeTenant', () => {
  it('prunes nodes only the tenant held and keeps shared ones', () => {
    const tree = build([
      ['hello world', 'a'],
      ['hello there', 'b'],
      ['goodbye', 'a'],
    ]);
    tree.removeTenant('a');
    expect(tree.tenants()).toEqual(['b']);
    expect(tree.tenantCharCount('a')).toBe(0);
    expect(tree.totalChars()).toBe(11);
    expect(tree.prefixMatch('goodbye').matchedChars).toBe(0);
    expect(tree.prefixMatch('hello world')).toEqual({ tenant: 'b', matchedChars: 6, tenants: ['b'] });
    expectConsistent(tree);
    tree.removeTenant('a'); // idempotent
    tree.removeTenant('b');
    expect(tree.totalChars()).toBe(0);
    expect(tree.recount()).toEqual({ totalChars: 0, tenantChars: new Map(), nodes: 0 });
  });
});

describe('RadixTree evictTenantToSize', () => {
  it('evicts the least recently used leaves first', () => {
    const tree = new RadixTree();
    tree.insert('old-aaaaaaaaaa', 'a', 1); // 14
    tree.insert('mid-bbbbbbbbbb', 'a', 2); // 14
    tree.insert('new-cccccccccc', 'a', 3); // 14
    tree.insert('mid-bbbbbbbbbb', 'a', 4); // refresh "mid"
    expect(tree.tenantCharCount('a')).toBe(42);
    expect(tree.evictTenantToSize('a', 30)).toBe(14);
    expect(tree.prefixMatch('old-aaaaaaaaaa').matchedChars).toBe(0);
    expect(tree.prefixMatch('mid-bbbbbbbbbb').matchedChars).toBe(14);
    expect(tree.evictTenantToSize('a', 14)).toBe(14);
    expect(tree.prefixMatch('new-cccccccccc').matchedChars).toBe(0);
    expect(tree.prefixMatch('mid-bbbbbbbbbb').matchedChars).toBe(14);
    expectConsistent(tree);
  });

  it('walks up: a parent becomes a leaf once its held children are gone', () => {
    const tree = new RadixTree();
    tree.insert('prefix/one', 'a', 1);
    tree.insert('prefix/two', 'a', 2);
    tree.insert('prefix/two', 'b', 3);
    // a holds "prefix/" (7) + "one" (3) + "two" (3)
    expect(tree.evictTenantToSize('a', 0)).toBe(13);
    expect(tree.tenantCharCount('a')).toBe(0);
    expect(tree.tenants()).toContain('a');
    // b's holdings are untouched
    expect(tree.prefixMatch('prefix/two')).toEqual({ tenant: 'b', matchedChars: 10, tenants: ['b'] });
    expect(tree.totalChars()).toBe(10);
    expectConsistent(tree);
  });

  it('is a no-op at or under the limit and for unknown tenants', () => {
    const tree = build([['abcdef', 'a']]);
    expect(tree.evictTenantToSize('a', 6)).toBe(0);
    expect(tree.evictTenantToSize('zz', 0)).toBe(0);
    expect(tree.totalChars()).toBe(6);
  });
});

describe('commonPrefixLength', () => {
  it.each([
    { text: 'abc', pos: 0, label: 'abd', n: 2 },
    { text: 'xxabc', pos: 2, label: 'abc', n: 3 },
    { text: 'ab', pos: 0, label: 'abc', n: 2 },
    { text: 'a'.repeat(100) + 'b', pos: 0, label: 'a'.repeat(100) + 'c', n: 100 },
    { text: 'q' + 'a'.repeat(77) + 'b', pos: 1, label: 'a'.repeat(200), n: 77 },
    { text: 'z'.repeat(40), pos: 0, label: 'z'.repeat(17) + 'y' + 'z'.repeat(22), n: 17 },
  ])('$label.length-char label at $pos -> $n', ({ text, pos, label, n }) => {
    expect(commonPrefixLength(text, pos, label)).toBe(n);
  });

  it('agrees with a char-by-char scan', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 80 }),
        fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 80 }),
        fc.nat(10),
        (text, label, rawPos) => {
          const pos = Math.min(rawPos, text.length);
          let n = 0;
          while (n < label.length && pos + n < text.length && text[pos + n] === label[n]) n++;
          return commonPrefixLength(text, pos, label) === n;
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('flat-string', () => {
  it.each(['', 'short', 'a longer string of text', '😀'.repeat(20), 'lone \uD800 surrogate in the middle'])(
    'flatCopy(%j) is an equal string',
    (s) => {
      expect(flatCopy(s)).toBe(s);
      expect(flatSlice(s, 1, s.length - 1)).toBe(s.slice(1, s.length - 1));
    },
  );
});

describe('RadixTree properties', () => {
  // A small alphabet forces shared prefixes, splits and surrogate pairs cut at edge boundaries.
  const text = fc.string({ unit: fc.constantFrom('a', 'b', 'c', '😀', '中'), maxLength: 24 });
  const tenant = fc.constantFrom('t0', 't1', 't2');
  const ops = fc.array(fc.tuple(text, tenant), { maxLength: 30 });

  it('a match is never longer than the query, and an inserted text matches in full', () => {
    fc.assert(
      fc.property(ops, text, (inserts, query) => {
        const tree = build(inserts);
        const m = tree.prefixMatch(query);
        expect(m.matchedChars).toBeLessThanOrEqual(query.length);
        expect(query.startsWith(query.slice(0, m.matchedChars))).toBe(true);
        for (const [t, who] of inserts) {
          const full = tree.prefixMatch(t);
          expect(full.matchedChars).toBe(t.length);
          if (t.length > 0) expect(full.tenants).toContain(who);
        }
        expectConsistent(tree);
      }),
      { numRuns: 200 },
    );
  });

  it('removeTenant leaves no trace: the tree equals one built without that tenant', () => {
    fc.assert(
      fc.property(ops, tenant, fc.array(text, { maxLength: 5 }), (inserts, gone, queries) => {
        const tree = build(inserts);
        tree.removeTenant(gone);
        const others = new RadixTree();
        inserts.forEach(([t, who], i) => {
          if (who !== gone) others.insert(t, who, 1000 + i);
        });
        expect(tree.tenants()).not.toContain(gone);
        expect(tree.tenantCharCount(gone)).toBe(0);
        expect(tree.totalChars()).toBe(others.totalChars());
        for (const who of others.tenants())
          expect(tree.tenantCharCount(who)).toBe(others.tenantCharCount(who));
        for (const q of [...queries, ...inserts.map(([t]) => t)]) {
          const a = tree.prefixMatch(q);
          const b = others.prefixMatch(q);
          expect(a.matchedChars).toBe(b.matchedChars);
          expect([...a.tenants].sort()).toEqual([...b.tenants].sort());
          expect(a.tenant).toBe(b.tenant);
        }
        expectConsistent(tree);
      }),
      { numRuns: 200 },
    );
  });

  it('eviction brings a tenant under the limit and keeps counts consistent', () => {
    fc.assert(
      fc.property(ops, tenant, fc.nat(40), (inserts, who, limit) => {
        const tree = build(inserts);
        const before = tree.tenantCharCount(who);
        const evicted = tree.evictTenantToSize(who, limit);
        expect(tree.tenantCharCount(who)).toBeLessThanOrEqual(limit);
        expect(before - evicted).toBe(tree.tenantCharCount(who));
        expectConsistent(tree);
      }),
      { numRuns: 200 },
    );
  });
});

describe('RadixTree with texts in pieces (util/piece-text.ts)', () => {
  const text = fc.string({ unit: fc.constantFrom('a', 'b', 'c', '😀', '中'), maxLength: 40 });
  const tenant = fc.constantFrom('t0', 't1', 't2');
  /** `s` cut at the given offsets (sorted, clamped; empty pieces included). */
  const inPieces = (s: string, cuts: readonly number[]): PieceText => {
    const at = [...cuts.map((c) => Math.min(c, s.length))].sort((a, b) => a - b);
    const pieces: string[] = [];
    let from = 0;
    for (const c of at) {
      pieces.push(s.slice(from, c));
      from = c;
    }
    pieces.push(s.slice(from));
    return new PieceText(pieces);
  };
  const cuts = fc.array(fc.nat(40), { maxLength: 5 });

  it('inserts and matches exactly as the same text in one string', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(text, tenant, cuts), { maxLength: 20 }),
        fc.array(fc.tuple(text, cuts), { maxLength: 5 }),
        (inserts, queries) => {
          const plain = new RadixTree();
          const pieced = new RadixTree();
          inserts.forEach(([t, who, c], i) => {
            plain.insert(t, who, 1000 + i);
            pieced.insert(inPieces(t, c), who, 1000 + i);
          });
          expect(pieced.totalChars()).toBe(plain.totalChars());
          for (const who of plain.tenants())
            expect(pieced.tenantCharCount(who)).toBe(plain.tenantCharCount(who));
          for (const [q, c] of [...queries, ...inserts.map(([t, , c]) => [t, c] as const)]) {
            const query = inPieces(q, c);
            const a = plain.prefixMatch(q);
            const b = pieced.prefixMatch(query);
            expect(b.matchedChars).toBe(a.matchedChars);
            expect(b.tenant).toBe(a.tenant);
            expect([...b.tenants].sort()).toEqual([...a.tenants].sort());
            const each = (tree: RadixTree, t: string | PieceText) => {
              const m = new Map<string, number>();
              tree.matchEachTenant(t, (who, n) => m.set(who, n));
              return m;
            };
            expect(each(plain, query)).toEqual(each(plain, q));
            expect(each(pieced, query)).toEqual(each(plain, q));
          }
          expectConsistent(pieced);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('commonPrefixLength over pieces agrees with the plain string', () => {
    fc.assert(
      fc.property(text, cuts, text, fc.nat(45), (t, c, label, rawPos) => {
        const pos = Math.min(rawPos, t.length);
        expect(commonPrefixLength(inPieces(t, c), pos, label)).toBe(commonPrefixLength(t, pos, label));
      }),
      { numRuns: 500 },
    );
  });

  it('long texts in pieces that diverge inside a piece split the edge there', () => {
    const tree = new RadixTree();
    const long = new PieceText(['x'.repeat(40_000), 'y'.repeat(40_000), 'z'.repeat(100)]);
    tree.insert(long, 't0', 1);
    tree.insert(new PieceText(['x'.repeat(40_000), 'y'.repeat(39_000), 'w'.repeat(50)]), 't1', 2);
    expect(tree.totalChars()).toBe(80_100 + 50);
    expect(tree.prefixMatch(long).matchedChars).toBe(80_100);
    expect(tree.prefixMatch('x'.repeat(40_000) + 'y'.repeat(39_000) + 'w').matchedChars).toBe(79_001);
    expectConsistent(tree);
  });
});
