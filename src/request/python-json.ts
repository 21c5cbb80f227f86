/**
 * JSON text as Python's `json.dumps(value)` writes it with its defaults (pure): `", "` between items,
 * `": "` after keys, every character outside printable ASCII escaped (`ensure_ascii`: `\uXXXX` in
 * lower-case hex, a character beyond the BMP as its two surrogates), keys in their order.
 *
 * vLLM writes a tool call's arguments this way when it turns an Anthropic `tool_use` block into a chat
 * tool call (request/anthropic-messages.ts), and the chat template renders that text into the prompt:
 * the router's token ids match the worker's only if its text matches byte for byte.
 *
 * What a JavaScript value cannot say stays approximate: a float with no fractional part (`1.0` parses
 * to 1 and is written `1`), and a key JavaScript reorders (integer-like keys come first in an object).
 */
import { PieceText } from '../util/piece-text.js';

export function pythonJsonDumps(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'number') return pythonNumber(value);
  if (typeof value === 'string') return pythonString(value);
  // A long string value the body parser kept in pieces (request/json-body.ts).
  if (value instanceof PieceText) return pythonString(value.toString());
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(', ')}]`;
  if (typeof value === 'object') {
    const items: string[] = [];
    for (const [k, v] of Object.entries(value)) items.push(`${pythonString(k)}: ${pythonJsonDumps(v)}`);
    return `{${items.join(', ')}}`;
  }
  return pythonString(String(value));
}

function pythonNumber(n: number): string {
  if (Number.isNaN(n)) return 'NaN';
  if (!Number.isFinite(n)) return n > 0 ? 'Infinity' : '-Infinity';
  const plain = String(n);
  if (Number.isInteger(n) && !plain.includes('e')) return plain;
  // Python's repr of a float: the same shortest digits, in exponent form outside 1e-4 <= |n| < 1e16,
  // with a signed exponent of two digits at least (1e-05, 1.5e+300).
  const [mantissa, exp] = n.toExponential().split('e') as [string, string];
  const e = Number(exp);
  if (e >= -4 && e < 16) return plain;
  return `${mantissa}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
}

const ESCAPES: Readonly<Record<number, string>> = {
  0x22: '\\"',
  0x5c: '\\\\',
  0x0a: '\\n',
  0x0d: '\\r',
  0x09: '\\t',
  0x08: '\\b',
  0x0c: '\\f',
};

function pythonString(s: string): string {
  let out = '"';
  let from = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x20 && c <= 0x7e && c !== 0x22 && c !== 0x5c) continue;
    out += s.slice(from, i) + (ESCAPES[c] ?? `\\u${c.toString(16).padStart(4, '0')}`);
    from = i + 1;
  }
  return `${out}${s.slice(from)}"`;
}
