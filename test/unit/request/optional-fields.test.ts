/**
 * Fields vLLM's request models take as optional, accepted as vLLM accepts them: `"stream": null` (no
 * stream: `stream: Optional[bool] = False`), and a completion with `prompt_embeds` in place of a
 * `prompt` (`--enable-prompt-embeds`).
 */
import { describe, expect, it } from 'vitest';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { flatText } from '../../../src/util/piece-text.js';

describe('"stream": null', () => {
  it.each([
    ['completions', '{"model":"m","prompt":"hi","stream":null}'],
    ['chat', '{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":null}'],
    ['responses', '{"model":"m","input":"hi","stream":null}'],
  ] as const)('%s: parsed as not streaming', (kind, text) => {
    const r = parseInferenceRequest(kind, 'application/json', Buffer.from(text));
    expect(r.stream).toBe(false);
  });
});

describe('a completion with prompt_embeds and no prompt', () => {
  const parse = (embeds: unknown) =>
    parseInferenceRequest(
      'completions',
      'application/json',
      Buffer.from(JSON.stringify({ model: 'm', prompt_embeds: embeds, max_tokens: 8 })),
    );
  const tensor = (seed: string, chars: number) =>
    Buffer.from(seed.repeat(chars)).toString('base64').slice(0, chars);

  it('is routed, on a key of its tensor: the same tensor again reads the same, another one not', () => {
    const a = flatText(parse(tensor('a', 64)).text);
    expect(a.length).toBeGreaterThan(0);
    expect(flatText(parse(tensor('a', 64)).text)).toBe(a);
    expect(flatText(parse(tensor('b', 64)).text)).not.toBe(a);
  });

  it('a tensor of megabytes (parsed in pieces) and a list of tensors too', () => {
    const big = tensor('big', 3 << 20);
    expect(flatText(parse(big).text)).toBe(flatText(parse(big).text));
    expect(flatText(parse([tensor('a', 64), tensor('b', 64)]).text).split('\n')).toHaveLength(2);
  });

  it.each([[''], [[]], [[1]], [{}]])('prompt_embeds %j is a 400 invalid_prompt', (embeds) => {
    expect(() => parse(embeds)).toThrow(/prompt_embeds/);
  });
});
