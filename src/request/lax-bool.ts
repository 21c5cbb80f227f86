/**
 * A boolean field of a request body as vLLM's request models read it: pydantic's default (lax) mode
 * takes a JSON boolean, the numbers 0 and 1 (`0.0`, `1.0` too), and the strings `'0'`, `'1'` and,
 * in any case, `'f'`, `'false'`, `'n'`, `'no'`, `'off'` / `'t'`, `'true'`, `'y'`, `'yes'`, `'on'`
 * (pydantic's conversion table: bool from str), and refuses anything else. Undefined for what it
 * refuses (vLLM answers 400), so `"add_special_tokens": "true"` adds the BOS the worker adds, and
 * `"echo": "true"` echoes there as it does on the worker.
 */
const TRUE = new Set(['1', 't', 'true', 'y', 'yes', 'on']);
const FALSE = new Set(['0', 'f', 'false', 'n', 'no', 'off']);

export function laxBool(value: unknown): boolean | undefined {
  if (typeof value === 'boolean') return value;
  if (typeof value === 'number') return value === 1 ? true : value === 0 ? false : undefined;
  if (typeof value !== 'string') return undefined;
  const s = value.toLowerCase();
  return TRUE.has(s) ? true : FALSE.has(s) ? false : undefined;
}
