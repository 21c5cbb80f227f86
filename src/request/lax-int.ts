/**
 * An integer field of a request body as vLLM's request models read it: pydantic's default (lax)
 * mode takes a JSON integer, a float with no fraction (`4.0`, already an integer once parsed here)
 * and a string of decimal digits (`"4"`, surrounding whitespace and a leading `+` allowed), and
 * refuses anything else. Undefined for what it refuses (vLLM answers 422 or 400).
 */
const DIGITS = /^\s*\+?\d+\s*$/;

export function laxInt(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isInteger(value) ? value : undefined;
  if (typeof value === 'string' && DIGITS.test(value)) {
    const n = Number(value);
    return Number.isSafeInteger(n) ? n : undefined;
  }
  return undefined;
}
