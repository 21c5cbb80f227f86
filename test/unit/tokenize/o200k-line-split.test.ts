import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Tokenizer } from '@huggingface/tokenizers';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;

/**
 * The o200k pre-tokenizer regex (GPT-4o; gpt-oss's and Llama 4's tokenizer.json use it): its
 * punctuation branch ` ?[^\s\p{L}\p{N}]+[\r\n/]*` runs over a newline INTO a following '/', so
 * "();\n// comment" pre-tokenizes as "();\n//", " comment": a line cut after that newline splits a
 * pre-token.
 */
const O200K =
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const model = json.model as { vocab: Record<string, number>; merges: string[][] };
/** The fixture with the o200k pre-tokenizer and one more merge, "Ċ" + "/" (a newline then a slash). */
const o200kJson = {
  ...json,
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: O200K }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
    ],
  },
  model: {
    ...model,
    vocab: { ...model.vocab, 'Ċ/': 512 },
    merges: [['Ċ', '/'], ...model.merges],
  },
};

describe('line cuts under an o200k-style pre-tokenizer', () => {
  const tok = new HfTokenizer(o200kJson, {});
  const ref = new Tokenizer(o200kJson, {});
  const refIds = (text: string): number[] => ref.encode(text, { add_special_tokens: false }).ids.map(Number);

  it('passes the load-time line probes', () => {
    expect(tok.splitsLines).toBe(true);
  });

  it.each(['foo();\n// comment', 'See the file:\n/usr/share/doc', 'end.\n/path'])(
    'encodes %j like the library',
    (text) => {
      expect(refIds(text)).toContain(512); // the library's pre-token spans the newline and the slash
      expect(tok.encode(text, false)).toEqual(refIds(text));
    },
  );
});
