/**
 * The nesting-depth guard run before JSON.parse: a linear scan of brackets outside strings, so a
 * hostile body cannot exhaust the parser's stack.
 */

/**
 * True if brackets nest deeper than `max` outside strings. Linear, no allocation. String contents are
 * skipped with indexOf (a quote preceded by an odd number of backslashes is escaped): a 220 KB prompt
 * is one string, and a per-character loop over it cost more than JSON.parse itself (~1.2 ms vs 0.4).
 */
export function exceedsDepth(text: string, max: number): boolean {
  let depth = 0;
  const n = text.length;
  let i = 0;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 34 /* " */) {
      i = stringEnd(text, i);
      if (i < 0) return false; // unterminated: JSON.parse rejects it
      continue;
    }
    if (c === 123 /* { */ || c === 91 /* [ */) {
      if (++depth > max) return true;
    } else if (c === 125 || c === 93) depth--;
    i++;
  }
  return false;
}

/** The index after the closing quote of the string opening at `open`, or -1. */
function stringEnd(text: string, open: number): number {
  let from = open + 1;
  for (;;) {
    const q = text.indexOf('"', from);
    if (q < 0) return -1;
    let backslashes = 0;
    for (let k = q - 1; k > open && text.charCodeAt(k) === 92; k--) backslashes++;
    if (backslashes % 2 === 0) return q + 1;
    from = q + 1;
  }
}
