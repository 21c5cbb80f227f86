/**
 * A long text kept as the list of its pieces, each a string well below V8's large-object size.
 *
 * Why: V8 allocates every string above ~128 KB (kMaxRegularHeapObjectSize) in a freshly mapped page of
 * its own, unmapped again after the next scavenge; building one costs a page fault per 4 KB on top of
 * the copy: ~10x the cost of the same bytes in pieces (225 KB: ~350 us vs ~35 us, measured on the
 * project machine), plus GC work. A 220 KB prompt joined into one string was the largest single cost
 * of routing such a request (issue 15). The router only ever reads a routing text by position (radix
 * tree walks, a short head for hashing, its length), so a long one stays in pieces on the request
 * path and is joined only by a caller that needs the whole string (`toString`, `slice` of a range).
 *
 * `RoutingText` is either a plain string (every short text) or a PieceText; both answer `length`,
 * `charCodeAt` and `slice` the same way.
 *
 * Pure and immutable.
 */

/** A plain string or a long text in pieces: what routing reads a prompt as. */
export type RoutingText = string | PieceText;

export class PieceText {
  readonly length: number;
  /** starts[i] = index in the whole text of pieces[i]'s first code unit. */
  private readonly starts: number[];
  private joined: string | undefined;

  /** `pieces` are used as they are (not copied); empty pieces are allowed. */
  constructor(readonly pieces: readonly string[]) {
    const starts = new Array<number>(pieces.length);
    let at = 0;
    for (let i = 0; i < pieces.length; i++) {
      starts[i] = at;
      at += (pieces[i] as string).length;
    }
    this.starts = starts;
    this.length = at;
  }

  /** The code unit at `pos` (NaN outside the text, as for a string). */
  charCodeAt(pos: number): number {
    const i = this.pieceAt(pos);
    if (i < 0) return NaN;
    return (this.pieces[i] as string).charCodeAt(pos - (this.starts[i] as number));
  }

  /**
   * The index of the piece holding position `pos`, or -1 outside the text: the last piece starting at
   * or before `pos` (never an empty one: an empty piece shares its start with the piece after it).
   */
  pieceAt(pos: number): number {
    if (!(pos >= 0 && pos < this.length)) return -1;
    const starts = this.starts;
    let lo = 0;
    let hi = starts.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1;
      if ((starts[mid] as number) <= pos) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  /** Where piece `i` starts in the whole text. */
  pieceStart(i: number): number {
    return this.starts[i] as number;
  }

  /** `slice` of a string (non-negative bounds, clamped to the text); joins only the pieces it spans. */
  slice(start: number, end: number = this.length): string {
    const from = Math.max(0, Math.min(start, this.length));
    const to = Math.max(from, Math.min(end, this.length));
    if (from === to) return '';
    if (from === 0 && to === this.length) return this.toString();
    const first = this.pieceAt(from);
    const parts: string[] = [];
    for (let i = first; i < this.pieces.length; i++) {
      const s = this.starts[i] as number;
      if (s >= to) break;
      const piece = this.pieces[i] as string;
      parts.push(piece.slice(Math.max(0, from - s), Math.min(piece.length, to - s)));
    }
    return parts.length === 1 ? (parts[0] as string) : parts.join('');
  }

  /** The whole text as one string (joined once, then kept). */
  toString(): string {
    this.joined ??= this.pieces.join('');
    return this.joined;
  }

  /** `JSON.stringify` writes the text, as it would the string. */
  toJSON(): string {
    return this.toString();
  }
}

/** The whole routing text as one string. */
export function flatText(text: RoutingText): string {
  return typeof text === 'string' ? text : text.toString();
}

/**
 * Builds a routing text from parts: short parts are concatenated, a PieceText keeps its pieces. The
 * result is a plain string unless it grows past `maxPieceChars` (then it is kept in pieces of about that
 * size; a piece built by `+=` is flattened by V8 where it is first read).
 */
export class RoutingTextBuilder {
  private readonly pieces: string[] = [];
  private current = '';

  constructor(private readonly maxPieceChars: number) {}

  append(part: RoutingText): void {
    if (typeof part === 'string') {
      this.current += part;
      if (this.current.length >= this.maxPieceChars) this.flush();
      return;
    }
    this.flush();
    for (const piece of part.pieces) this.pieces.push(piece);
  }

  build(): RoutingText {
    if (this.pieces.length === 0) return this.current;
    this.flush();
    return this.pieces.length === 1 ? (this.pieces[0] as string) : new PieceText(this.pieces);
  }

  private flush(): void {
    if (this.current.length === 0) return;
    this.pieces.push(this.current);
    this.current = '';
  }
}
