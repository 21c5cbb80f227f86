import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { flatText, PieceText, RoutingTextBuilder } from '../../../src/util/piece-text.js';

describe('PieceText', () => {
  const pieces = fc.array(fc.string({ unit: fc.constantFrom('a', 'b', '😀', '\n'), maxLength: 12 }), {
    maxLength: 6,
  });

  it('reads like the joined string: length, charCodeAt, slice, toString', () => {
    fc.assert(
      fc.property(
        pieces,
        fc.integer({ min: -3, max: 80 }),
        fc.integer({ min: -3, max: 80 }),
        (parts, a, b) => {
          const text = new PieceText(parts);
          const s = parts.join('');
          expect(text.length).toBe(s.length);
          expect(text.toString()).toBe(s);
          expect(flatText(text)).toBe(s);
          for (let i = -1; i <= s.length; i++) expect(text.charCodeAt(i)).toEqual(s.charCodeAt(i));
          const from = Math.max(0, a);
          expect(text.slice(from, Math.max(0, b))).toBe(s.slice(from, Math.max(0, b)));
          expect(text.slice(from)).toBe(s.slice(from));
        },
      ),
      { numRuns: 300 },
    );
  });

  it('pieceAt skips empty pieces and answers -1 outside the text', () => {
    const text = new PieceText(['', 'ab', '', '', 'c']);
    expect([-1, 0, 1, 2, 3].map((p) => text.pieceAt(p))).toEqual([-1, 1, 1, 4, -1]);
    expect(text.pieceStart(4)).toBe(2);
  });
});

describe('RoutingTextBuilder', () => {
  it('a short text stays one plain string', () => {
    const b = new RoutingTextBuilder(100);
    for (const part of ['user\n', 'hello', '\n']) b.append(part);
    expect(b.build()).toBe('user\nhello\n');
  });

  it('a long one is kept in pieces of about the given size, a PieceText keeping its own', () => {
    const b = new RoutingTextBuilder(10);
    b.append('0123456');
    b.append('789ab');
    b.append(new PieceText(['LONG', 'TEXT']));
    b.append('!');
    const text = b.build();
    expect(text).toBeInstanceOf(PieceText);
    expect((text as PieceText).pieces).toEqual(['0123456789ab', 'LONG', 'TEXT', '!']);
  });

  it('a single PieceText part comes back with its pieces', () => {
    const b = new RoutingTextBuilder(10);
    b.append(new PieceText(['a', 'b']));
    expect(flatText(b.build())).toBe('ab');
  });
});
