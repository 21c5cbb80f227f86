import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  closingQuote,
  hasControlByte,
  joinLongTexts,
  MIN_BODY_BYTES,
  MIN_CARVED_BYTES,
  parseLongStringBody,
  PIECE_BYTES,
  pieceEnd,
} from '../../../src/request/json-body.js';
import { MAX_JSON_DEPTH, parseInferenceRequest } from '../../../src/request/inference-request.js';
import { RouterError } from '../../../src/request/router-error.js';
import { flatText, PieceText } from '../../../src/util/piece-text.js';

const body = (text: string): Buffer => Buffer.from(text, 'utf8');
/** A deterministic long text: words, newlines, quotes, backslashes and non-ASCII characters. */
function longText(chars: number, seed = 1, alphabet = 'abc de\nf"g\\h\té ü 漢字 😀 \u0001'): string {
  let x = seed;
  let out = '';
  while (out.length < chars) {
    x = (x * 1103515245 + 12345) >>> 0;
    out += alphabet[x % alphabet.length];
  }
  return out.slice(0, chars);
}
const parse = (b: Buffer) => parseLongStringBody(b, MAX_JSON_DEPTH);
/** The parsed value with its long texts joined (what JSON.parse returns). */
const joined = (b: Buffer): unknown => joinLongTexts(parse(b)?.value);
/** V8 allocates a string of more bytes than this in a large-object page of its own. */
const V8_LARGE_OBJECT_BYTES = 128 * 1024;

describe('parseLongStringBody: same value as JSON.parse', () => {
  const doc = longText(220 * 1024);
  it.each<[string, unknown]>([
    ['a completion with a 220 KB prompt', { model: 'm', prompt: doc, max_tokens: 8, stream: true }],
    ['an ASCII-only prompt', { model: 'm', prompt: longText(200_000, 2, 'abc de\nfg') }],
    [
      'chat messages with a long document and short turns',
      {
        model: 'm',
        messages: [
          { role: 'system', content: 'You answer questions.' },
          { role: 'user', content: doc },
          { role: 'assistant', content: null },
          { role: 'user', content: [{ type: 'text', text: longText(70_000, 3) }] },
        ],
      },
    ],
    [
      'several long values in an array',
      { model: 'm', prompt: [longText(40_000, 4), 'x', longText(90_000, 5)] },
    ],
    [
      'a long key is left in the skeleton',
      { model: 'm', [longText(MIN_CARVED_BYTES + 10, 6, 'ab')]: 1, p: doc },
    ],
    [
      'duplicate keys: the last (long) one wins',
      `{"model":"m","prompt":"short","prompt":${JSON.stringify(doc)}}`,
    ],
    [
      'a value that only looks like a placeholder',
      { model: 'm', note: '\u0000vllm-router-long-string:x', p: doc },
    ],
  ])('%s', (_, value) => {
    const b = body(typeof value === 'string' ? value : JSON.stringify(value));
    expect(parse(b)).toBeDefined();
    expect(joined(b)).toEqual(JSON.parse(b.toString('utf8')));
  });

  it('returns a long prompt or message text in pieces, each a string V8 keeps in its regular heap', () => {
    const value = {
      model: 'm',
      prompt: doc,
      messages: [
        { role: 'user', content: [{ type: 'text', text: doc }] },
        { role: 'user', content: doc },
        { role: 'assistant', tool_calls: [{ function: { name: 'write', arguments: doc } }] },
      ],
      input: [{ type: 'function_call_output', call_id: 'c', output: doc }],
      other: doc,
    };
    const got = parse(body(JSON.stringify(value)))!.value as {
      prompt: unknown;
      messages: { content: unknown; tool_calls?: { function: { arguments: unknown } }[] }[];
      input: { output: unknown }[];
      other: unknown;
    };
    const first = got.messages[0]!.content as { text: unknown }[];
    const args = got.messages[2]!.tool_calls![0]!.function.arguments;
    for (const text of [got.prompt, first[0]!.text, got.messages[1]!.content, args, got.input[0]!.output]) {
      expect(text).toBeInstanceOf(PieceText);
      const pieces = (text as PieceText).pieces;
      expect(pieces.length).toBeGreaterThan(1);
      for (const piece of pieces) expect(piece.length * 2).toBeLessThan(V8_LARGE_OBJECT_BYTES);
      expect(flatText(text as PieceText)).toBe(doc);
    }
    // Any other long value is a string, as JSON.parse gives it.
    expect(got.other).toBe(doc);
  });

  it('keeps a "__proto__" key an own property, as JSON.parse does', () => {
    const b = body(`{"model":"m","__proto__":${JSON.stringify(doc)}}`);
    const got = joined(b) as Record<string, unknown>;
    expect(Object.getPrototypeOf(got)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(got, '__proto__')?.value).toBe(doc);
  });

  it('agrees with JSON.parse whatever the escapes at the piece boundaries', () => {
    // Escapes of every length (\n, \\, \", \u00e9, a surrogate pair) placed at every offset around
    // where the first piece would end.
    for (const escape of ['\\n', '\\\\', '\\"', '\\u00e9', '\\ud83d\\ude00']) {
      for (let shift = -8; shift <= 8; shift++) {
        const head = 'a'.repeat(PIECE_BYTES + shift);
        const raw = `{"model":"m","prompt":"${head}${escape}${'b'.repeat(MIN_BODY_BYTES)}"}`;
        expect(joined(body(raw)), `${escape} at ${shift}`).toEqual(JSON.parse(raw));
      }
    }
  });

  it('agrees with JSON.parse on random long values (property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 }),
        fc.integer({ min: 1, max: 1000 }),
        fc.nat({ max: 3 }),
        (extra, seed, where) => {
          const value = { model: 'm', extra, prompt: longText(MIN_BODY_BYTES + seed * 37, seed) };
          const arr = [...extra];
          arr.splice(Math.min(where, arr.length), 0, longText(MIN_CARVED_BYTES + seed, seed + 1));
          const b = body(JSON.stringify({ ...value, arr }));
          expect(parse(b)).toBeDefined();
          expect(joined(b)).toEqual(JSON.parse(b.toString('utf8')));
        },
      ),
      { numRuns: 40 },
    );
  });
});

describe('parseLongStringBody: leaves the body to the plain parse', () => {
  const doc = longText(MIN_BODY_BYTES, 7);
  it.each<[string, Buffer]>([
    [
      'a body below MIN_BODY_BYTES',
      body(JSON.stringify({ model: 'm', prompt: 'a'.repeat(MIN_BODY_BYTES - 100) })),
    ],
    [
      'a long value overwritten by a later duplicate key (its placeholder is never met)',
      body(`{"model":"m","prompt":${JSON.stringify(doc)},"prompt":"short"}`),
    ],
    [
      'no string value long enough to cut',
      body(JSON.stringify({ model: 'm', prompt: Array(20).fill(longText(8000)) })),
    ],
    [
      'invalid UTF-8',
      Buffer.concat([
        body(`{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}`),
        Buffer.from([0xff]),
        body('"}'),
      ]),
    ],
    ['an unterminated string', body(`{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}`)],
    [
      'a raw control character in a long value',
      body(`{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}\u0001"}`),
    ],
    ['an invalid escape in a long value', body(`{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}\\x"}`)],
    ['trailing garbage after the object', body(`{"model":"m","prompt":${JSON.stringify(doc)}} x`)],
    ['a leading byte-order mark', body(`\ufeff{"model":"m","prompt":${JSON.stringify(doc)}}`)],
    [
      'nesting deeper than the limit',
      body(`${'['.repeat(MAX_JSON_DEPTH + 1)}${JSON.stringify(doc)}${']'.repeat(MAX_JSON_DEPTH + 1)}`),
    ],
    [
      'a value equal to a placeholder the body needs',
      body(`{"note":"\\u0000vllm-router-long-string:0","model":"m","prompt":${JSON.stringify(doc)}}`),
    ],
  ])('%s', (_, b) => {
    expect(parse(b)).toBeUndefined();
  });

  it('so a malformed large body still gets the same 400 as before', () => {
    const raw = body(`{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}\u0001"}`);
    let err: unknown;
    try {
      parseInferenceRequest('completions', 'application/json', raw);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).code).toBe('invalid_json');
    expect((err as RouterError).message).toMatch(/^request body is not valid JSON: /);
  });

  it('the routing text of a large completion is its prompt, unchanged (in pieces until the body is read)', () => {
    const prompt = longText(220 * 1024, 9);
    const r = parseInferenceRequest(
      'completions',
      'application/json',
      body(JSON.stringify({ model: 'm', prompt })),
    );
    expect(r.text).toBeInstanceOf(PieceText);
    expect(flatText(r.text)).toBe(prompt);
    expect(r.json.prompt).toBe(prompt);
    expect(r.json).toBe(r.json);
  });

  it('the routing text of a large chat is its messages rendered, in pieces', () => {
    const doc = longText(220 * 1024, 10);
    const messages = [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: [{ type: 'text', text: doc }, { type: 'image_url' }] },
      { role: 'user', content: 'and then?' },
    ];
    const r = parseInferenceRequest('chat', undefined, body(JSON.stringify({ model: 'm', messages })));
    expect(r.text).toBeInstanceOf(PieceText);
    for (const piece of (r.text as PieceText).pieces)
      expect(piece.length * 2).toBeLessThan(V8_LARGE_OBJECT_BYTES);
    expect(flatText(r.text)).toBe(`system\nAnswer briefly.\nuser\n${doc}<image_url>\nuser\nand then?\n`);
    expect(r.json).toEqual({ model: 'm', messages });
  });
});

describe('closingQuote and pieceEnd', () => {
  it.each<[string, number]>([
    ['"abc"', 4],
    ['"a\\"b"', 5],
    ['"a\\\\"b"', 4],
    ['"a\\\\\\"b"', 7],
    ['"abc', -1],
    ['"abc\\"', -1],
  ])('closingQuote(%j) = %i', (text, at) => {
    expect(closingQuote(Buffer.from(text), 0)).toBe(at);
  });

  it('never cuts an escape sequence or a multi-byte character', () => {
    const s = 'a'.repeat(PIECE_BYTES - 3);
    const cases: Array<[string, number]> = [
      [`${s}aaaaaaaaaa`, PIECE_BYTES],
      // A backslash 3 bytes before the target: no cut until it is 6 bytes back.
      [`${s}\\u00e9aaaa`, PIECE_BYTES + 4],
      [`${s}\\naaaaaaaa`, PIECE_BYTES + 4],
      [`${s}aaa\u00e9aaaa`, PIECE_BYTES + 2],
    ];
    for (const [text, at] of cases) {
      const b = Buffer.from(text);
      expect(pieceEnd(b, 0, b.length), JSON.stringify(text.slice(PIECE_BYTES - 6))).toBe(at);
    }
    const all = Buffer.from(`${s}\\n\\n\\n\\n\\n`);
    expect(pieceEnd(all, 0, all.length)).toBe(all.length);
  });
});

describe('hasControlByte', () => {
  it('finds a byte below 0x20 at any offset and alignment, and nothing else', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 0, maxLength: 70 }),
        fc.nat(7),
        fc.nat(70),
        fc.nat(70),
        (bytes, shift, a, b) => {
          // A view at an arbitrary offset into a larger buffer, as Envoy's body is.
          const buf = Buffer.alloc(bytes.length + 8, 0x61).subarray(shift, shift + bytes.length);
          buf.set(bytes);
          const start = Math.min(a, buf.length);
          const end = Math.max(start, Math.min(b, buf.length));
          const want = buf.subarray(start, end).some((x) => x < 0x20);
          expect(hasControlByte(buf, start, end)).toBe(want);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('a long value with a raw control character and no escape still falls back to the plain parse', () => {
    const raw = `{"model":"m","prompt":"${'a'.repeat(MIN_BODY_BYTES)}\u001f${'b'.repeat(PIECE_BYTES)}"}`;
    expect(parse(body(raw))).toBeUndefined();
  });
});
