/**
 * Fresh, self-contained copies of substrings (so a cache never pins the prompt it came from).
 *
 * V8 represents `s.slice(a, b)` of 13 or more characters as a SlicedString: a header pointing into
 * the parent string. Storing such a slice of a 256 KB prompt as a 40-character radix-tree edge would
 * keep the whole 256 KB alive, so the tree would hold far more memory than the characters it
 * accounts for. Concatenation with `+` is no better (a ConsString references both halves).
 *
 * `[head, tail].join('')` with two non-empty parts is built by V8's array-join builtin into a newly
 * allocated sequential string, copying the characters (a memcpy, ~0.1 ns per character measured on
 * the project machine) and referencing neither part. We prefer it to the `Number(s)` / `s | 0`
 * flattening trick (flatstr), which only flattens cons strings and whose unused result an optimising
 * compiler may drop: measured, `c = a + b; Number(c)` on 32 KB took ~1 ns per KB in optimised code,
 * i.e. nothing was copied and `c` still referenced both halves.
 * Strings shorter than 13 UTF-16 code units are never sliced or cons strings in V8: they are already
 * flat copies and are returned as they are.
 *
 * Operates on UTF-16 code units: a lone surrogate at either end is copied unchanged.
 */

/** Below this length V8 copies on slice and never builds cons strings (SlicedString/ConsString::kMinLength). */
const MIN_SHARED_LENGTH = 13;

/** A copy of `s` that shares no storage with any other string. */
export function flatCopy(s: string): string {
  if (s.length < MIN_SHARED_LENGTH) return s;
  const half = s.length >>> 1;
  return [s.slice(0, half), s.slice(half)].join('');
}

/** `text.slice(start, end)` as a self-contained copy (see flatCopy). */
export function flatSlice(text: string, start: number, end: number = text.length): string {
  return flatCopy(text.slice(start, end));
}
