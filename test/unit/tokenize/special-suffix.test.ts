import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { Tokenizer } from '@huggingface/tokenizers';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
const config = JSON.parse(readFileSync(`${DIR}/tokenizer_config.json`, 'utf8')) as Record<string, unknown>;

/**
 * The fixture with a post-processor that also appends EOS ("<s> $A </s>": add_eos_token models,
 * e.g. Llama/Mistral-based embedding models served by vLLM).
 */
const bosEos = { id: '<|begin_of_text|>', type_id: 0 };
const eos = { id: '<|eot_id|>', type_id: 0 };
const suffixJson = {
  ...json,
  post_processor: {
    type: 'TemplateProcessing',
    single: [{ SpecialToken: bosEos }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: eos }],
    pair: [
      { SpecialToken: bosEos },
      { Sequence: { id: 'A', type_id: 0 } },
      { Sequence: { id: 'B', type_id: 0 } },
      { SpecialToken: eos },
    ],
    special_tokens: {
      '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [0], tokens: ['<|begin_of_text|>'] },
      '<|eot_id|>': { id: '<|eot_id|>', ids: [1], tokens: ['<|eot_id|>'] },
    },
  },
};

describe('a post-processor that appends a special token', () => {
  const tok = new HfTokenizer(suffixJson, config);
  const ref = new Tokenizer(suffixJson, config);

  it.each(['Hello world', 'You are a helpful assistant.\nAnswer the question.'])(
    'encodes %j with add_special_tokens like the library',
    (text) => {
      const want = ref.encode(text, { add_special_tokens: true }).ids.map(Number);
      expect(want[want.length - 1]).toBe(1); // the library appends EOS
      expect(tok.encode(text, true)).toEqual(want);
      expect(Array.from(tok.encodeIds(text, true))).toEqual(want);
    },
  );
});
