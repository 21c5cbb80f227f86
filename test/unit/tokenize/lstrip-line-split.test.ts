import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Tokenizer } from '@huggingface/tokenizers';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
const config = JSON.parse(readFileSync(`${DIR}/tokenizer_config.json`, 'utf8')) as Record<string, unknown>;

/** The fixture with <|eot_id|> declared lstrip (as RoBERTa's <mask> and several chat models' tokens are). */
const lstripJson = {
  ...json,
  added_tokens: (json.added_tokens as Array<Record<string, unknown>>).map((t) =>
    t.content === '<|eot_id|>' ? { ...t, lstrip: true } : t,
  ),
};

describe('an lstrip added token right after a line cut', () => {
  const tok = new HfTokenizer(lstripJson, config);
  const ref = new Tokenizer(lstripJson, config);
  const refIds = (text: string): number[] => ref.encode(text, { add_special_tokens: false }).ids.map(Number);

  // Before the fix, tok.splitsLines was true here (LINE_PROBES hold no added tokens), so the text was
  // cut after "\n" and the lstrip token could not take the newline before it.
  it.each(['Answer\n<|eot_id|>', 'first line\nsecond line\n<|eot_id|>next'])(
    'encodes %j like the library',
    (text) => {
      expect(tok.encode(text, false)).toEqual(refIds(text));
    },
  );
});
