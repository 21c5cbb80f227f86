import { describe, expect, it } from 'vitest';
import { PrefixCache } from '../../../src/sim/prefix-cache.js';
import { CharTokenizer, renderChatTemplate } from '../../../src/sim/sim-tokenizer.js';
import { pngDataUrl } from '../../support/image-data-url.js';

describe('CharTokenizer', () => {
  const tok = new CharTokenizer(4);

  it.each([
    ['', 0],
    ['a', 1],
    ['abcd', 1],
    ['abcde', 2],
    ['the quick brown fox', 5],
    ['x'.repeat(1000), 250],
  ])('%j has ceil(chars / 4) tokens (%i), the count the prefix cache reports', (text, n) => {
    expect(tok.encode(text)).toHaveLength(n);
    if (text.length > 0) expect(new PrefixCache().tokensOf(text)).toBe(n);
  });

  it.each([
    'hello world',
    'line\nbreak\ttab \u0000 nul',
    'naïve café 日本語 emoji 🙂 end',
    '🙂🙂',
    'abc\u00e9defg',
  ])('decode(encode(%j)) gives the text back', (text) => {
    expect(tok.decode(tok.encode(text))).toBe(text);
    expect(
      tok
        .encode(text)
        .map((id) => tok.tokenString(id))
        .join(''),
    ).toBe(text);
  });

  it('gives a prefix that ends on a token boundary a prefix of the tokens (prefix caching by tokens)', () => {
    const system = 'You are a helpful assistant. '.repeat(10).slice(0, 256);
    const a = tok.encode(`${system}question one?`);
    const b = tok.encode(`${system}another question`);
    const s = tok.encode(system);
    expect(a.slice(0, s.length)).toEqual(s);
    expect(b.slice(0, s.length)).toEqual(s);
    expect(a.slice(s.length)).not.toEqual(b.slice(s.length));
  });

  it('gives the same ids in every instance (replicas of one model agree)', () => {
    expect(new CharTokenizer(4).encode('same text, same ids')).toEqual(tok.encode('same text, same ids'));
  });

  it('makes every non-ASCII code point one token', () => {
    expect(tok.encode('日本語')).toHaveLength(3);
    expect(tok.encode('ab日cd')).toHaveLength(3);
    expect(tok.encode('🙂')).toHaveLength(1);
  });

  it.each([-1, 1.5, Number.NaN, 2 ** 40])('rejects id %s as out of vocabulary', (id) => {
    expect(() => tok.decode([id])).toThrow(RangeError);
  });

  it.each([0, 8, 1.5])('rejects charsPerToken %s', (n) => {
    expect(() => new CharTokenizer(n)).toThrow(RangeError);
  });

  it('works with other token sizes', () => {
    const t2 = new CharTokenizer(2);
    expect(t2.encode('abcde')).toHaveLength(3);
    expect(t2.decode(t2.encode('abcde'))).toBe('abcde');
  });
});

describe('renderChatTemplate', () => {
  const msgs = [
    { role: 'system', content: 'S' },
    { role: 'user', content: [{ type: 'text', text: 'Q' }, { type: 'image_url' }] },
  ];
  it.each([
    [{ addGenerationPrompt: false }, '<|system|>\nS\n<|user|>\nQ<image_url>\n'],
    [{ addGenerationPrompt: true }, '<|system|>\nS\n<|user|>\nQ<image_url>\n<|assistant|>\n'],
    [{ addGenerationPrompt: false, continueFinalMessage: true }, '<|system|>\nS\n<|user|>\nQ<image_url>'],
  ])('%j', (opts, text) => {
    expect(renderChatTemplate(msgs, opts)).toEqual({ ok: true, text });
  });

  it.each([
    [[], /non-empty/],
    ['x', /non-empty/],
    [[{ content: 'no role' }], /role/],
    [[{ role: 'user', content: 5 }], /content/],
    [[{ role: 'user', content: [{ text: 'no type' }] }], /part/],
  ])('rejects %j', (messages, error) => {
    const r = renderChatTemplate(messages, { addGenerationPrompt: true });
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toMatch(error);
  });

  it('gives an image the placeholder tokens a Qwen2-VL processor would: ~1,000 for a photo', () => {
    const tok = new CharTokenizer();
    const render = (url: string) => {
      const r = renderChatTemplate(
        [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url } },
              { type: 'text', text: 'Q?' },
            ],
          },
        ],
        { addGenerationPrompt: true },
      );
      if (!r.ok) throw new Error(r.error);
      return tok.encode(r.text);
    };
    const photo = render(pngDataUrl(1024, 768, 'a'));
    const small = render(pngDataUrl(448, 448, 'a'));
    // 999 and 256 placeholder tokens (request/media-tokens.ts) plus a few of text and key (the two
    // keys' lengths may differ by a few characters: a token or two either way).
    expect(Math.abs(photo.length - small.length - (999 - 256))).toBeLessThanOrEqual(3);
    expect(small.length).toBeGreaterThan(256);
    expect(small.length).toBeLessThan(256 + 30);
    // An image by URL (size unknown): the default 1,024.
    expect(render('https://example.com/cat.png').length).toBeGreaterThan(1_024);
  });

  it('renders the tools in the opening system block and the tool calls after their message', () => {
    const tools = [{ type: 'function', function: { name: 'ls' } }];
    const call = { id: 'c', type: 'function', function: { name: 'ls', arguments: '{"dir": "."}' } };
    const convo = [
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', content: 'a.ts' },
    ];
    const lines = `<|tools|>\n${JSON.stringify(tools[0])}\n`;
    expect(renderChatTemplate(convo, { addGenerationPrompt: false, tools })).toEqual({
      ok: true,
      text: `<|system|>\nS\n${lines}<|user|>\nQ\n<|assistant|>\n<tool_call>ls\n{"dir": "."}\n<|tool|>\na.ts\n`,
    });
    // Without a system message the tools open the prompt.
    expect(renderChatTemplate(convo.slice(1, 2), { addGenerationPrompt: false, tools })).toEqual({
      ok: true,
      text: `${lines}<|user|>\nQ\n`,
    });
  });

  it('rejects add_generation_prompt together with continue_final_message', () => {
    const r = renderChatTemplate(msgs, { addGenerationPrompt: true, continueFinalMessage: true });
    expect(r.ok).toBe(false);
  });
});
