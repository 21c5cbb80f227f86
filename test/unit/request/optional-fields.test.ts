/**
 * Fields vLLM's request models take as optional, accepted as vLLM accepts them: `"stream": null` (no
 * stream: `stream: Optional[bool] = False`), and a completion with `prompt_embeds` in place of a
 * `prompt` (`--enable-prompt-embeds`), weighed by its tensor's tokens (real torch.save payloads in
 * test/fixtures/prompt-embeds). Values pydantic's lax mode converts (`"stream": "true"`, `"max_tokens":
 * "64"`) read as vLLM reads them (request/lax-bool.ts, lax-int.ts).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { DEFAULT_MEDIA_TOKENS } from '../../../src/request/media-tokens.js';
import { MAX_MEDIA_FILL_CHARS } from '../../../src/request/prompt-text.js';
import { flatText, type RoutingText } from '../../../src/util/piece-text.js';

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

describe("values vLLM's pydantic models accept in lax mode", () => {
  const parse = (kind: 'completions' | 'chat' | 'responses', body: Record<string, unknown>) =>
    parseInferenceRequest(kind, 'application/json', Buffer.from(JSON.stringify({ model: 'm', ...body })));

  it.each(['true', 'True', 'yes', 'on', 't', '1', 1])(
    '"stream": %j streams, as on the worker (not a 400)',
    (stream) => {
      expect(parse('completions', { prompt: 'hi', stream }).stream).toBe(true);
      expect(parse('chat', { messages: [{ role: 'user', content: 'hi' }], stream }).stream).toBe(true);
    },
  );

  it.each(['false', 'no', 'off', '0', 0])('"stream": %j does not stream', (stream) => {
    expect(parse('completions', { prompt: 'hi', stream }).stream).toBe(false);
  });

  it('"max_tokens": "64" asks for 64 output tokens; "store": "false" stores no response to name', () => {
    expect(parse('completions', { prompt: 'hi', max_tokens: '64' }).outputTokens).toBe(64);
    expect(parse('responses', { input: 'hi', max_output_tokens: '32' }).outputTokens).toBe(32);
    expect(parse('responses', { input: 'hi', store: 'false' }).namesFreeResponse).toBe(false);
    expect(parse('responses', { input: 'hi', store: 'true' }).namesFreeResponse).toBe(true);
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

  it("weighs each tensor's prompt tokens (its first dimension) as the prefill it is", () => {
    const fixtures = (
      JSON.parse(
        readFileSync(new URL('../../fixtures/prompt-embeds/tensors.json', import.meta.url), 'utf8'),
      ) as { tensors: Array<{ name: string; base64: string }> }
    ).tensors;
    const payload = (name: string) => fixtures.find((f) => f.name === name)!.base64;
    /** The filler characters in a routing text (what the tensors weigh beyond their keys). */
    const filler = (text: RoutingText) => flatText(text).split('\u001a').length - 1;
    expect(filler(parse(tensor('a', 64)).text)).toBe(0); // unreadable: its key alone, as before
    // 300 tokens at the default 4 characters per token.
    expect(filler(parse(payload('300 tokens, float32')).text)).toBe(1200);
    // At the model's characters per token (learned, as a media part's filler).
    const learned = parseInferenceRequest(
      'completions',
      'application/json',
      Buffer.from(JSON.stringify({ model: 'm', prompt_embeds: payload('300 tokens, float32') })),
      { media: () => ({ ...DEFAULT_MEDIA_TOKENS, charsPerToken: 2 }) },
    );
    expect(filler(learned.text)).toBe(600);
    // A list: each tensor's own tokens after its key; the same tensors again read the same.
    const list = [payload('7 tokens, float16'), payload('[1, 5, 8] bfloat16, squeezed')];
    const lines = flatText(parse(list).text).split('\n');
    expect(lines.map((l) => l.split('\u001a').length - 1)).toEqual([28, 20]);
    expect(flatText(parse(list).text)).toBe(flatText(parse(list).text));
    // 70,000 tokens: within the media filler budget of a request, kept in pieces.
    const long = parse(payload('70000 tokens, one stored row expanded')).text;
    expect(filler(long)).toBe(Math.min(70_000 * 4, MAX_MEDIA_FILL_CHARS));
    expect(typeof long).not.toBe('string');
  });

  it('truncate_prompt_tokens k weighs a longer tensor as its last k rows, which vLLM keeps', () => {
    const fixtures = (
      JSON.parse(
        readFileSync(new URL('../../fixtures/prompt-embeds/tensors.json', import.meta.url), 'utf8'),
      ) as { tensors: Array<{ name: string; base64: string }> }
    ).tensors;
    const payload = fixtures.find((f) => f.name === '300 tokens, float32')!.base64;
    const cut = (truncate: unknown) =>
      parseInferenceRequest(
        'completions',
        'application/json',
        Buffer.from(JSON.stringify({ model: 'm', prompt_embeds: payload, truncate_prompt_tokens: truncate })),
      ).text;
    const filler = (text: RoutingText) => flatText(text).split('\u001a').length - 1;
    // vLLM's TokenizeParams truncates prompt_embeds as token ids: 300 rows cut to the last 50.
    expect(filler(cut(50))).toBe(200);
    expect(filler(cut('50'))).toBe(200);
    expect(filler(cut(1000))).toBe(1200);
    expect(filler(cut(-1))).toBe(1200); // to the model's context: unknown here
    // Other rows than the whole tensor's: not the same prefix.
    const key = (text: RoutingText) => flatText(text).split('\u001a')[0];
    expect(key(cut(50))).not.toBe(key(cut(undefined)));
    expect(key(cut(1000))).toBe(key(cut(undefined)));
  });

  it.each([[''], [[]], [[1]], [{}]])('prompt_embeds %j is a 400 invalid_prompt', (embeds) => {
    expect(() => parse(embeds)).toThrow(/prompt_embeds/);
  });
});
