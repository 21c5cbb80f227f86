import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';
import { seededRandom } from '../../../src/util/seeded-random.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
const config = JSON.parse(readFileSync(`${DIR}/tokenizer_config.json`, 'utf8')) as Record<string, unknown>;
/** Golden values from the Rust `tokenizers` library (scripts/gen-tokenizer-fixture.py). */
const expected = JSON.parse(readFileSync(`${DIR}/expected.json`, 'utf8')) as {
  samples: Array<{ text: string; ids: number[]; ids_no_special: number[] }>;
  chats: Array<{ text: string; ids: number[] }>;
};
/** Llama 3's pre-tokenizer regex (its tokenizer.json), in the Rust regex syntax tokenizers.js accepts. */
const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const fixture = new HfTokenizer(json, config);
const llama3 = new HfTokenizer(
  {
    ...json,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Split', pattern: { Regex: LLAMA3_SPLIT }, behavior: 'Isolated', invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    },
  },
  config,
);
const digitsThenGpt2 = new HfTokenizer(
  {
    ...json,
    pre_tokenizer: {
      type: 'Sequence',
      pretokenizers: [
        { type: 'Digits', individual_digits: true },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
      ],
    },
  },
  config,
);

/** Pieces of varied text: words, unicode, whitespace runs, digits, punctuation, added tokens. */
const PARTS = [
  'the',
  ' the',
  'router',
  ' Prefix',
  'caching',
  "'s",
  "'ll",
  "n't",
  ' ',
  '  ',
  '    ',
  '\t',
  '\n',
  '\n\n',
  '\r\n',
  ' \n',
  '\u00a0',
  '\u3000',
  '0',
  '42',
  '12345',
  '3.14',
  '1,000',
  '.',
  ',',
  '!?',
  '...',
  '--',
  '"',
  "'",
  '(',
  ')]}',
  '<|',
  '|>',
  '<|eot_id|>',
  '<|start_header_id|>',
  '<|end_header_id|>',
  '<|begin_of_text|>',
  'é',
  'Zürich',
  'naïve',
  'e\u0301',
  '日本語',
  'のテキスト',
  '한국어',
  'العربية',
  '😀',
  '👍🏽',
  '𝔘𝔫𝔦',
  '\u200b',
  '\ufeff',
  'ﬁ',
];

function randomText(rng: () => number, parts: number): string {
  let text = '';
  for (let i = 0; i < parts; i++) text += PARTS[Math.floor(rng() * PARTS.length)];
  return text;
}

describe('byte-level BPE fast path (same ids as the plain library tokenizer)', () => {
  it.each([
    ['fixture (ByteLevel with its regex)', fixture],
    ['Llama-3-style (Split regex, then ByteLevel)', llama3],
    ['Digits, then ByteLevel with its regex', digitsThenGpt2],
  ])('%s: is used and matches the library on 600 random texts', (_name, tok) => {
    expect(tok.fastPath).toBe(true);
    const rng = seededRandom(13);
    for (let n = 0; n < 600; n++) {
      const text = randomText(rng, 1 + Math.floor(rng() * 40));
      expect(tok.encode(text)).toEqual(tok.encodeUncached(text));
      expect(tok.encode(text, false)).toEqual(tok.encodeUncached(text, false));
    }
  });

  it('matches the Rust tokenizers library on the fixture samples and chats', () => {
    for (const s of expected.samples) {
      expect(fixture.encode(s.text)).toEqual(s.ids);
      expect(fixture.encode(s.text, false)).toEqual(s.ids_no_special);
    }
    for (const c of expected.chats) expect(fixture.encode(c.text, false)).toEqual(c.ids);
  });

  it('long words (past the word cache) and long whitespace runs are exact', () => {
    const text = `${'日本語'.repeat(200)} ${'x'.repeat(300)}${' '.repeat(150)}end\n${'\t'.repeat(90)}😀`;
    expect(fixture.encode(text)).toEqual(fixture.encodeUncached(text));
    expect(llama3.encode(text)).toEqual(llama3.encodeUncached(text));
  });

  it('stays exact across word-cache generations (more distinct words than one generation holds)', () => {
    const tok = new HfTokenizer(json, config, 'fresh', { maxCachedChars: 1024 });
    const words = Array.from({ length: 34_000 }, (_, i) => ` w${i.toString(36)}`);
    for (let i = 0; i < words.length; i += 2000) {
      const text = words.slice(i, i + 2000).join('');
      expect(tok.encode(text)).toEqual(tok.encodeUncached(text));
    }
    const again = words.slice(0, 3000).join('');
    expect(tok.encode(again)).toEqual(tok.encodeUncached(again));
  });

  it.each([
    ['a normalizer', { ...json, normalizer: { type: 'Prepend', prepend: ' ' } }],
    [
      'add_prefix_space',
      { ...json, pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, use_regex: true } },
    ],
    ['a non-BPE-shaped model option', { ...json, model: { ...(json.model as object), fuse_unk: true } }],
    ['no pre-tokenizer', { ...json, pre_tokenizer: null }],
    [
      'an lstrip added token (pieces are not split at added tokens)',
      {
        ...json,
        added_tokens: (json.added_tokens as Array<Record<string, unknown>>).map((t, i) =>
          i === 1 ? { ...t, lstrip: true } : t,
        ),
      },
    ],
  ])('a tokenizer with %s uses the library (and stays exact)', (_name, variant) => {
    const tok = new HfTokenizer(variant, config);
    expect(tok.fastPath).toBe(false);
    const text = 'Hello world, 123\n  indented 😀 <|eot_id|><|start_header_id|>x';
    expect(tok.encode(text)).toEqual(tok.encodeUncached(text));
  });
});
