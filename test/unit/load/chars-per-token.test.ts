import { describe, expect, it } from 'vitest';
import {
  CharsPerToken,
  MAX_MODELS,
  MIN_SAMPLE_CHARS,
  MIN_SAMPLES,
} from '../../../src/load/chars-per-token.js';
import { cachedTokensIn, inputTokensIn, promptTokensIn } from '../../../src/load/usage-tokens.js';

describe('CharsPerToken', () => {
  it('keeps the prior until a model has MIN_SAMPLES samples, then the ratio of the sums', () => {
    const r = new CharsPerToken({ prior: 4, decay: 1 });
    for (let i = 0; i < MIN_SAMPLES - 1; i++) expect(r.observe('m', 1800, 1000)).toBe(true);
    expect(r.of('m')).toBe(4);
    r.observe('m', 900, 500);
    expect(r.of('m')).toBeCloseTo(1.8, 10);
    expect(r.of('other')).toBe(4);
    expect(r.view()).toEqual([{ model: 'm', charsPerToken: expect.closeTo(1.8, 10), samples: MIN_SAMPLES }]);
  });

  it('weighs long prompts more (a ratio of sums, not a mean of ratios)', () => {
    const r = new CharsPerToken({ prior: 4, decay: 1 });
    r.observe('m', 10_000, 5000); // 2 chars/token, long
    for (let i = 0; i < 3; i++) r.observe('m', 100, 10); // 10 chars/token, short
    expect(r.of('m')).toBeCloseTo(10_300 / 5030, 10);
  });

  it('follows a change: old samples decay', () => {
    const r = new CharsPerToken({ prior: 4, decay: 0.9 });
    for (let i = 0; i < 20; i++) r.observe('m', 4000, 1000);
    for (let i = 0; i < 60; i++) r.observe('m', 2000, 1000);
    expect(r.of('m')).toBeGreaterThan(2);
    expect(r.of('m')).toBeLessThan(2.01);
  });

  it.each<[string, number, number]>([
    ['a prompt shorter than MIN_SAMPLE_CHARS', MIN_SAMPLE_CHARS - 1, 10],
    ['zero tokens', 1000, 0],
    ['negative tokens', 1000, -5],
    ['NaN', Number.NaN, 10],
    ['infinite tokens', 1000, Number.POSITIVE_INFINITY],
    ['an absurd ratio (1000 chars per token)', 100_000, 100],
    ['an absurd ratio (0.1 chars per token)', 100, 1000],
  ])('drops %s', (_name, chars, tokens) => {
    const r = new CharsPerToken({ prior: 3 });
    expect(r.observe('m', chars, tokens)).toBe(false);
    expect(r.view()).toEqual([]);
    expect(r.of('m')).toBe(3);
  });

  it(`tracks at most ${MAX_MODELS} models, forgetting the least recently observed`, () => {
    const r = new CharsPerToken({ prior: 4, decay: 1 });
    for (let i = 0; i < MIN_SAMPLES; i++) r.observe('keep', 2000, 1000);
    for (let i = 0; i < MAX_MODELS - 1; i++) r.observe(`m${i}`, 1000, 500);
    r.observe('keep', 2000, 1000); // refreshed: now the most recent
    r.observe('one-more', 1000, 500); // evicts m0, not keep
    expect(r.view()).toHaveLength(MAX_MODELS);
    expect(r.of('keep')).toBe(2);
    expect(r.view().some((v) => v.model === 'm0')).toBe(false);
    r.clear();
    expect(r.view()).toEqual([]);
  });

  it('refuses a bad prior or decay', () => {
    expect(() => new CharsPerToken({ prior: 0 })).toThrow(RangeError);
    expect(() => new CharsPerToken({ prior: Number.NaN })).toThrow(RangeError);
    expect(() => new CharsPerToken({ prior: 4, decay: 0 })).toThrow(RangeError);
    expect(() => new CharsPerToken({ prior: 4, decay: 1.5 })).toThrow(RangeError);
  });
});

describe('inputTokensIn', () => {
  it('reads the usage of a /v1/responses event, and not a chat usage', () => {
    const completed =
      'event: response.completed\ndata: {"response":{"usage":{"input_tokens":512,"input_tokens_details":{"cached_tokens":496},"output_tokens":8}}}\n\n';
    expect(inputTokensIn(Buffer.from(completed))).toBe(512);
    expect(cachedTokensIn(Buffer.from(completed))).toBe(496);
    expect(inputTokensIn(Buffer.from('{"usage":{"prompt_tokens":5,"completion_tokens":1}}'))).toBeUndefined();
  });
});

describe('promptTokensIn', () => {
  const b = (s: string) => Buffer.from(s);
  it.each<[string, string, number | undefined]>([
    [
      'a streamed usage chunk (vLLM, include_usage)',
      'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":6880,"total_tokens":6896,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":6800}}}\n\ndata: [DONE]\n\n',
      6880,
    ],
    [
      'a non-streamed body, spaces around the colon',
      '{"choices":[{"text":"hi"}],"usage": {"prompt_tokens" : 12 ,"completion_tokens":1}}',
      12,
    ],
    ['a chunk without usage', 'data: {"choices":[{"delta":{"content":"x"}}]}\n\n', undefined],
    [
      'the key inside generated text (escaped quotes)',
      'data: {"choices":[{"delta":{"content":"\\"prompt_tokens\\": 5"}}]}\n\n',
      undefined,
    ],
    ['a value cut by the chunk boundary', 'data: {"usage":{"prompt_tokens":68', undefined],
    ['a key cut by the chunk boundary', 'data: {"usage":{"prompt_tok', undefined],
    ['null', '{"usage":{"prompt_tokens":null}}', undefined],
    ['a negative value', '{"usage":{"prompt_tokens":-3}}', undefined],
    ['a string value', '{"usage":{"prompt_tokens":"12"}}', undefined],
    ['absurdly many digits', `{"usage":{"prompt_tokens":${'9'.repeat(20)}}}`, undefined],
  ])('%s', (_name, text, want) => {
    expect(promptTokensIn(b(text))).toBe(want);
  });

  it('takes the last usage in a chunk that carries two events', () => {
    expect(promptTokensIn(b('{"usage":{"prompt_tokens":1}}\n{"usage":{"prompt_tokens":2}}\n'))).toBe(2);
  });
});

describe('cachedTokensIn', () => {
  const b = (s: string) => Buffer.from(s);
  it.each<[string, string, number | undefined]>([
    [
      'a streamed usage chunk (vLLM, include_usage, --enable-prompt-tokens-details)',
      'data: {"choices":[],"usage":{"prompt_tokens":6880,"total_tokens":6896,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":6800}}}\n\ndata: [DONE]\n\n',
      6800,
    ],
    ['none cached', '{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":0}}}', 0],
    [
      'details null (vLLM without the flag)',
      '{"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}',
      undefined,
    ],
    ['no details at all', '{"usage":{"prompt_tokens":9,"completion_tokens":1}}', undefined],
    ['a value cut by the chunk boundary', '{"usage":{"prompt_tokens_details":{"cached_tokens":68', undefined],
    [
      'the key inside generated text (escaped quotes)',
      'data: {"choices":[{"delta":{"content":"\\"cached_tokens\\": 5"}}]}\n\n',
      undefined,
    ],
  ])('%s', (_name, text, want) => {
    expect(cachedTokensIn(b(text))).toBe(want);
  });
});
