import { describe, expect, it } from 'vitest';
import {
  bodyModel,
  exceedsDepth,
  inferenceKind,
  MAX_REQUEST_SEQUENCES,
  parseInferenceRequest,
  type InferenceKind,
} from '../../../src/request/inference-request.js';
import {
  chatPromptText,
  completionPromptText,
  MAX_SCORED_PROMPTS,
  MAX_MEDIA_FILL_CHARS,
  MEDIA_CHARS_PER_TOKEN,
} from '../../../src/request/prompt-text.js';
import { mediaStringKey } from '../../../src/request/media-key.js';
import { DEFAULT_MEDIA_TOKENS, mediaTokensFor } from '../../../src/request/media-tokens.js';
import type { RoutingText } from '../../../src/util/piece-text.js';
import { pngDataUrl } from '../../support/image-data-url.js';

/** A routing text as one string. */
function flat(t: RoutingText | undefined): string {
  if (t === undefined) throw new Error('no routing text');
  return typeof t === 'string' ? t : t.toString();
}

/** Length of the common prefix of `a` and `b`. */
function commonPrefix(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}
import { RouterError } from '../../../src/request/router-error.js';

const json = (v: unknown) => Buffer.from(JSON.stringify(v));

describe('inferenceKind', () => {
  it.each([
    ['POST', '/v1/completions', 'completions'],
    ['POST', '/v1/chat/completions', 'chat'],
    ['POST', '/v1/chat/completions?x=1', 'chat'],
    ['POST', '/v1/responses', 'responses'],
    ['GET', '/v1/responses/resp_1', undefined],
    ['POST', '/v1/responses/resp_1/cancel', undefined],
    ['GET', '/v1/completions', undefined],
    ['GET', '/v1/models', undefined],
    ['POST', '/v1/embeddings', undefined],
    ['POST', '/v1/completionsx', undefined],
  ])('%s %s -> %s', (method, path, kind) => {
    expect(inferenceKind(method, path)).toBe(kind);
  });
});

describe('parseInferenceRequest', () => {
  it('extracts model, stream flag and prompt text from a completion', () => {
    const r = parseInferenceRequest(
      'completions',
      'application/json',
      json({ model: 'm', prompt: 'hi', stream: true }),
    );
    expect(r).toMatchObject({ kind: 'completions', model: 'm', stream: true, text: 'hi' });
  });

  it('takes a body without a model, as vLLM does (its own model): routed to any worker', () => {
    for (const body of ['{"prompt":"x"}', '{"model":null,"prompt":"x"}', '{"model":"","prompt":"x"}']) {
      expect(parseInferenceRequest('completions', 'application/json', Buffer.from(body)).model).toBe('');
    }
    const chat = json({ messages: [{ role: 'user', content: 'hi' }] });
    expect(parseInferenceRequest('chat', 'application/json', chat).model).toBe('');
  });

  it('accepts a content type with parameters and a missing content type', () => {
    const body = json({ model: 'm', prompt: 'hi' });
    expect(parseInferenceRequest('completions', 'application/json; charset=utf-8', body).text).toBe('hi');
    expect(parseInferenceRequest('completions', undefined, body).text).toBe('hi');
  });

  it.each<[string, string | undefined, Buffer | string, number, string]>([
    ['malformed JSON', 'application/json', '{"model":', 400, 'invalid_json'],
    ['empty body', 'application/json', '', 400, 'invalid_body'],
    ['array body', 'application/json', '[]', 400, 'invalid_body'],
    ['string body', 'application/json', '"x"', 400, 'invalid_body'],
    ['null body', 'application/json', 'null', 400, 'invalid_body'],
    ['numeric model', 'application/json', '{"model":1,"prompt":"x"}', 400, 'missing_model'],
    ['missing prompt', 'application/json', '{"model":"m"}', 400, 'invalid_prompt'],
    ['object prompt', 'application/json', '{"model":"m","prompt":{}}', 400, 'invalid_prompt'],
    ['mixed prompt array', 'application/json', '{"model":"m","prompt":["a",1]}', 400, 'invalid_prompt'],
    [
      'stream not boolean (pydantic refuses "maybe")',
      'application/json',
      '{"model":"m","prompt":"x","stream":"maybe"}',
      400,
      'invalid_body',
    ],
    ['wrong content type', 'text/plain', '{"model":"m","prompt":"x"}', 415, 'invalid_content_type'],
    [
      'deep nesting',
      'application/json',
      '{"model":"m","prompt":"x","a":' + '['.repeat(1000) + ']'.repeat(1000) + '}',
      400,
      'invalid_json',
    ],
    [
      'invalid UTF-8',
      'application/json',
      Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]),
      400,
      'invalid_body',
    ],
  ])('%s -> %i %s', (_name, ct, body, status, code) => {
    const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
    let err: unknown;
    try {
      parseInferenceRequest('completions', ct, buf);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RouterError);
    expect((err as RouterError).status).toBe(status);
    expect((err as RouterError).code).toBe(code);
    expect((err as RouterError).toJSON().error).toMatchObject({
      code,
      message: expect.any(String),
      type: expect.any(String),
    });
  });

  it('rejects chat requests without valid messages', () => {
    for (const messages of [undefined, [], [{ content: 'x' }], [{ role: 'user', content: 5 }], 'hi']) {
      expect(() => parseInferenceRequest('chat', 'application/json', json({ model: 'm', messages }))).toThrow(
        RouterError,
      );
    }
  });

  it('keeps brackets inside strings out of the depth check', () => {
    const prompt = '['.repeat(500);
    expect(parseInferenceRequest('completions', undefined, json({ model: 'm', prompt })).text).toBe(prompt);
  });
});

describe('sequences: what vLLM runs for a request (parallel sampling, batched prompts)', () => {
  const parse = (kind: InferenceKind, body: Record<string, unknown>) =>
    parseInferenceRequest(kind, 'application/json', json({ model: 'm', ...body })).sequences;
  const chat = { messages: [{ role: 'user', content: 'hi' }] };

  it.each<[string, InferenceKind, Record<string, unknown>, number]>([
    ['chat', 'chat', chat, 1],
    ['chat, n = 4', 'chat', { ...chat, n: 4 }, 4],
    ['chat, n = null', 'chat', { ...chat, n: null }, 1],
    ['completions, one prompt, n = 3', 'completions', { prompt: 'a', n: 3 }, 3],
    ['completions, token ids (one prompt)', 'completions', { prompt: [1, 2, 3], n: 2 }, 2],
    ['completions, three prompts', 'completions', { prompt: ['a', 'b', 'c'] }, 3],
    ['completions, two token-id prompts x n = 5', 'completions', { prompt: [[1], [2, 3]], n: 5 }, 10],
    ['n = 0 (vLLM answers 400): one', 'chat', { ...chat, n: 0 }, 1],
    ['n = 1.5: one', 'chat', { ...chat, n: 1.5 }, 1],
    ['n as a string of digits: read as vLLM reads it', 'chat', { ...chat, n: '4' }, 4],
    ['n as " +8 ": 8', 'completions', { prompt: 'a', n: ' +8 ' }, 8],
    ['n as "4.5" or "x": one (vLLM answers 422)', 'chat', { ...chat, n: '4.5' }, 1],
    ['n as "0": one', 'chat', { ...chat, n: '0' }, 1],
    ['a hostile n is capped', 'completions', { prompt: ['a', 'b'], n: 1e9 }, MAX_REQUEST_SEQUENCES],
    ['responses (no n)', 'responses', { input: 'hi', n: 4 }, 1],
    ['messages (no n)', 'messages', { ...chat, max_tokens: 8, n: 4 }, 1],
  ])('%s', (_name, kind, body, want) => {
    expect(parse(kind, body)).toBe(want);
  });
});

describe("a batched completions request's prompts (prompt-text.ts completionBatchTexts)", () => {
  const prompts = (kind: InferenceKind, body: Record<string, unknown>) =>
    parseInferenceRequest(kind, 'application/json', json({ model: 'm', ...body })).prompts?.map(String);

  it.each<[string, InferenceKind, Record<string, unknown>, string[] | undefined]>([
    ['strings: one text each', 'completions', { prompt: ['a b', 'c'] }, ['a b', 'c']],
    ['token-id lists: their ids each', 'completions', { prompt: [[1, 2], [3]] }, ['1 2', '3']],
    ['one prompt', 'completions', { prompt: 'a' }, undefined],
    ['a list of one prompt', 'completions', { prompt: ['a'] }, undefined],
    ['one prompt of token ids', 'completions', { prompt: [1, 2, 3] }, undefined],
    ['chat', 'chat', { messages: [{ role: 'user', content: 'hi' }] }, undefined],
  ])('%s', (_name, kind, body, want) => {
    expect(prompts(kind, body)).toEqual(want);
  });

  it('joined, they are the routing text; each opens with the salt, as vLLM salts every prompt', () => {
    const body = { prompt: ['first prompt', 'second prompt'], cache_salt: 'tenant-a' };
    const req = parseInferenceRequest('completions', 'application/json', json({ model: 'm', ...body }));
    const [one, two] = req.prompts!.map(String);
    const single = (prompt: string) =>
      parseInferenceRequest(
        'completions',
        'application/json',
        json({ model: 'm', prompt, cache_salt: 'tenant-a' }),
      ).text.toString();
    expect(one).toBe(single('first prompt'));
    expect(two).toBe(single('second prompt'));
    expect(req.text.toString().endsWith('first prompt\nsecond prompt')).toBe(true);
  });

  it(`gives the first ${MAX_SCORED_PROMPTS} of a longer batch (the rest count as uncached)`, () => {
    const prompt = Array.from({ length: MAX_SCORED_PROMPTS + 10 }, (_, i) => `prompt ${i}`);
    const got = prompts('completions', { prompt });
    expect(got).toHaveLength(MAX_SCORED_PROMPTS);
    expect(got!.at(-1)).toBe(`prompt ${MAX_SCORED_PROMPTS - 1}`);
  });
});

describe('routing text', () => {
  it.each<[unknown, string | undefined]>([
    ['abc', 'abc'],
    [['a', 'b'], 'a\nb'],
    [[1, 2, 3], '1 2 3'],
    [
      [
        [1, 2],
        [3, 4],
      ],
      '1 2\n3 4',
    ],
    [[], undefined],
    [[1.5], undefined],
    [[-1], undefined],
    [null, undefined],
  ])('completion prompt %j -> %j', (prompt, text) => {
    expect(completionPromptText(prompt)).toBe(text);
  });

  it('renders chat messages in order with roles, so shared history is a shared prefix', () => {
    const sys = { role: 'system', content: 'You are helpful.' };
    const a = chatPromptText([sys, { role: 'user', content: 'first' }]) as string;
    const b = chatPromptText([
      sys,
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'ok' },
    ]) as string;
    expect(b.startsWith(a)).toBe(true);
    expect(a).toBe('system\nYou are helpful.\nuser\nfirst\n');
  });

  it('concatenates text parts and marks non-text parts', () => {
    const text = chatPromptText([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'look at ' },
          { type: 'image_url', image_url: { url: 'x' } },
        ],
      },
    ]);
    // The image by URL (size unknown) weighs --media-tokens-unknown tokens of filler after its key.
    const fill = '\u001a'.repeat(DEFAULT_MEDIA_TOKENS.unknownTokens * MEDIA_CHARS_PER_TOKEN);
    expect(text).toBe(`user\nlook at <image_url:${mediaStringKey('x')}>${fill}\n`);
  });

  it('weighs an inline image as the tokens vLLM spends on it, and the same image matches it all', () => {
    const ask = (url: string, question: string) =>
      flat(
        chatPromptText([
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url } },
              { type: 'text', text: question },
            ],
          },
        ]),
      );
    const photo = pngDataUrl(1024, 768, 'photo');
    const a = ask(photo, 'What is in it?');
    // 999 tokens (media-tokens.ts) at 4 characters each: the text is 1,000 tokens, not a dozen.
    expect(a.length).toBeGreaterThan(999 * MEDIA_CHARS_PER_TOKEN);
    const b = ask(photo, 'And the colours?');
    const other = ask(pngDataUrl(1024, 768, 'other'), 'What is in it?');
    expect(commonPrefix(a, b)).toBeGreaterThan(999 * MEDIA_CHARS_PER_TOKEN); // the next turn: all cached
    expect(commonPrefix(a, other)).toBeLessThan(40); // another image: diverges at its key
    // Turned off, the image is its key alone.
    const off = { ...DEFAULT_MEDIA_TOKENS, maxTokens: 0 };
    expect(
      flat(
        chatPromptText([{ role: 'user', content: [{ type: 'image_url', image_url: { url: photo } }] }], {
          media: off,
        }),
      ),
    ).toBe(`user\n<image_url:${mediaStringKey(photo)}>\n`);
  });

  it('weighs the image alike whichever API carries it: chat, Responses, Anthropic Messages', () => {
    const photo = pngDataUrl(1024, 768, 'photo');
    const base64 = photo.slice(photo.indexOf(',') + 1);
    const bodies: Array<[InferenceKind, unknown]> = [
      ['chat', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: photo } }] }] }],
      ['responses', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: photo }] }] }],
      [
        'messages',
        {
          max_tokens: 8,
          messages: [
            {
              role: 'user',
              content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: base64 } }],
            },
          ],
        },
      ],
    ];
    for (const [kind, body] of bodies) {
      const raw = Buffer.from(JSON.stringify({ model: 'm', ...(body as object) }));
      const text = flat(parseInferenceRequest(kind, undefined, raw).text);
      const filler = text.length - text.replaceAll('\u001a', '').length;
      expect(filler, kind).toBe(999 * MEDIA_CHARS_PER_TOKEN);
    }
  });

  it('tallies the media parts: sized, weighed by default, unkeyed, and the tokens counted', () => {
    const raw = Buffer.from(
      JSON.stringify({
        model: 'm',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image_url', image_url: { url: pngDataUrl(448, 448, 'a') } },
              { type: 'image_url', image_url: { url: 'https://example.com/b.png' } },
              { type: 'input_audio' },
              { type: 'text', text: 'compare them' },
            ],
          },
        ],
      }),
    );
    expect(parseInferenceRequest('chat', undefined, raw).media).toEqual({
      sized: 1,
      unsized: 1,
      unkeyed: 1,
      tokens: 256 + DEFAULT_MEDIA_TOKENS.unknownTokens,
    });
    // Per model (--media-tokens): the request's model picks the weights.
    const forModel = mediaTokensFor(['gemma=min:256,max:256'], { ...DEFAULT_MEDIA_TOKENS, unknownTokens: 7 });
    const weigh = (model: string, url: string) => {
      const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }];
      const raw = Buffer.from(JSON.stringify({ model, messages }));
      return parseInferenceRequest('chat', undefined, raw, { media: forModel }).media?.tokens;
    };
    const [inline, byUrl] = [pngDataUrl(448, 448), 'https://x/y.png'];
    expect([weigh('gemma', inline), weigh('qwen', inline)]).toEqual([256, 256]); // 448 x 448: 256 on the grid too
    expect([weigh('gemma', byUrl), weigh('qwen', byUrl)]).toEqual([256, 7]);
    const plain = Buffer.from(JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }));
    expect(parseInferenceRequest('chat', undefined, plain).media).toBeUndefined();
  });

  it("writes the filler at the model's characters per token, so the image converts back to its tokens", () => {
    const messages = [
      { role: 'user', content: [{ type: 'image_url', image_url: { url: pngDataUrl(1024, 768) } }] },
    ];
    for (const charsPerToken of [1.8, 4, 6.5]) {
      const tally = { sized: 0, unsized: 0, unkeyed: 0, tokens: 0 };
      const media = () => ({ ...DEFAULT_MEDIA_TOKENS, charsPerToken });
      const text = flat(chatPromptText(messages, { media, tally }));
      const filler = text.length - text.replaceAll('\u001a', '').length;
      expect(filler).toBe(Math.round(999 * charsPerToken));
      expect(tally).toEqual({ sized: 1, unsized: 0, unkeyed: 0, tokens: 999 });
    }
  });

  it('bounds the filler of one request (tiny images claiming huge sizes get no more than the cap)', () => {
    const parts = Array.from({ length: 200 }, (_, i) => ({
      type: 'image_url',
      image_url: { url: pngDataUrl(60_000, 60_000, `i${i}`) },
    }));
    const text = flat(chatPromptText([{ role: 'user', content: parts }]));
    const filler = text.length - text.replaceAll('\u001a', '').length;
    expect(filler).toBe(MAX_MEDIA_FILL_CHARS);
    // The keys still all come through (past the cap, each image is its key alone).
    expect(text.split('<image_url:').length - 1).toBe(200);
  });

  it('keys each image by what it is: other images diverge at the image, the same one matches', () => {
    const ask = (url: string, extra: Record<string, unknown> = {}) =>
      chatPromptText([
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url }, ...extra },
            { type: 'text', text: 'Describe this image in detail.' },
          ],
        },
      ]) as string;
    const [a, b] = [ask('https://img/1.png'), ask('https://img/2.png')];
    expect(a).not.toBe(b);
    expect(ask('https://img/1.png')).toBe(a);
    // vLLM's user-given media id is the key when present.
    expect(ask('https://img/1.png', { uuid: 'cat' })).toBe(ask('https://img/9.png', { uuid: 'cat' }));
    // Other media: audio data, video URLs.
    const audio = (data: string) =>
      chatPromptText([
        { role: 'user', content: [{ type: 'input_audio', input_audio: { data, format: 'wav' } }] },
      ]);
    expect(audio('AAAA')).not.toBe(audio('BBBB'));
    // A part without a readable payload keeps its type alone.
    expect(chatPromptText([{ role: 'user', content: [{ type: 'image_url' }] }])).toBe('user\n<image_url>\n');
  });

  it('ignores key order, sampling parameters and the stream flag', () => {
    const a = parseInferenceRequest(
      'chat',
      undefined,
      Buffer.from('{"model":"m","messages":[{"role":"user","content":"q"}],"temperature":0.1}'),
    );
    const b = parseInferenceRequest(
      'chat',
      undefined,
      Buffer.from('{"stream":true,"messages":[{"content":"q","role":"user"}],"model":"m","top_p":0.5}'),
    );
    expect(a.text).toBe(b.text);
  });
});

describe('exceedsDepth (brackets outside strings)', () => {
  /** The plain per-character scan it replaces, as the reference. */
  function reference(text: string, max: number): boolean {
    let depth = 0;
    let inString = false;
    for (let i = 0; i < text.length; i++) {
      const c = text.charCodeAt(i);
      if (inString) {
        if (c === 92) i++;
        else if (c === 34) inString = false;
      } else if (c === 34) inString = true;
      else if (c === 123 || c === 91) {
        if (++depth > max) return true;
      } else if (c === 125 || c === 93) depth--;
    }
    return false;
  }

  it.each([
    ['depth exactly at the limit', '[[[1]]]', 3, false],
    ['one level over', '[[[[1]]]]', 3, true],
    ['brackets inside a string do not count', '{"a":"[[[[[[[[["}', 2, false],
    ['an escaped quote does not end the string', '{"a":"x\\"[[[[[[[["}', 2, false],
    ['an escaped backslash before the quote ends it', '{"a":"x\\\\"}', 2, false],
    ['brackets after an escaped backslash and quote count', '["x\\\\",[[[[1]]]]]', 3, true],
    ['three backslashes: the quote is escaped', '["x\\\\\\"[[[[[["]', 2, false],
    ['an unterminated string', '[["abc[[[[[[', 3, false],
    ['a closing bracket lowers the depth', '[[1],[2],[3],[[4]]]', 3, false],
    ['empty', '', 0, false],
  ])('%s', (_name, text, max, expected) => {
    expect(exceedsDepth(text, max)).toBe(expected);
    expect(reference(text, max)).toBe(expected);
  });

  it('agrees with the per-character scan on random bracket, quote and backslash soups', () => {
    const alphabet = ['[', ']', '{', '}', '"', '\\', 'a', ','];
    let seed = 12345;
    const rand = (n: number) => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % n;
    for (let t = 0; t < 2000; t++) {
      const text = Array.from({ length: rand(40) }, () => alphabet[rand(alphabet.length)]).join('');
      const max = rand(5);
      expect(exceedsDepth(text, max), text).toBe(reference(text, max));
    }
  });
});

describe('bodyModel', () => {
  it.each<[string, string | undefined, string, string | undefined]>([
    ['an embeddings body', 'application/json', '{"model":"e5","input":["a","b"]}', 'e5'],
    ['no content type', undefined, '{"input":"x","model":"m"}', 'm'],
    ['a nested model only', 'application/json', '{"input":{"model":"inner"}}', undefined],
    ['an empty model', 'application/json', '{"model":""}', undefined],
    ['a non-string model', 'application/json', '{"model":7}', undefined],
    ['a form body', 'multipart/form-data; boundary=x', '--x\r\nmodel\r\n', undefined],
    ['invalid JSON', 'application/json', '{"model":', undefined],
    ['an array', 'application/json', '[{"model":"m"}]', undefined],
    ['an empty body', 'application/json', '', undefined],
  ])('%s -> %s', (_name, contentType, body, model) => {
    expect(bodyModel(contentType, Buffer.from(body))).toBe(model);
  });

  it('reads the model of a long body without failing on its size', () => {
    const body = JSON.stringify({ model: 'e5', input: ['x'.repeat(300_000)] });
    expect(bodyModel('application/json', Buffer.from(body))).toBe('e5');
  });
});

describe('cache_salt in the routing text (request/prompt-text.ts saltedText)', () => {
  const chat = (extra: Record<string, unknown>) =>
    parseInferenceRequest(
      'chat',
      'application/json',
      Buffer.from(
        JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'same prompt' }], ...extra }),
      ),
    ).text.toString();

  it('opens the text with a marker of the salt: equal salts share it, others share nothing past it', () => {
    const plain = chat({});
    const a = chat({ cache_salt: 'tenant-a' });
    expect(a.endsWith(plain)).toBe(true);
    expect(chat({ cache_salt: 'tenant-a' })).toBe(a);
    const b = chat({ cache_salt: 'tenant-b' });
    expect(b).not.toBe(a);
    let common = 0;
    while (a[common] === b[common]) common++;
    expect(common).toBeLessThan(8);
    // a long salt costs a few characters, not its length
    expect(chat({ cache_salt: 'x'.repeat(1024) }).length - plain.length).toBeLessThan(32);
  });

  it('ignores an empty or non-string salt, as vLLM does', () => {
    expect(chat({ cache_salt: '' })).toBe(chat({}));
    expect(chat({ cache_salt: 7 })).toBe(chat({}));
  });

  it('keeps a long text in pieces', () => {
    const long = 'word '.repeat(60_000);
    const req = parseInferenceRequest(
      'completions',
      'application/json',
      Buffer.from(JSON.stringify({ model: 'm', prompt: long, cache_salt: 's' })),
    );
    expect(typeof req.text).not.toBe('string');
    expect(req.text.toString().endsWith(long)).toBe(true);
  });
});

describe('tools and tool calls in the routing text', () => {
  const tool = (name: string, description = `Runs ${name}.`) => ({
    type: 'function',
    function: { name, description, parameters: { type: 'object', properties: { path: { type: 'string' } } } },
  });
  const sys = { role: 'system', content: 'You are a coding agent.' };
  /** A file an agent writes: 184 KB, so its body is over 128 KB and parsed in pieces (json-body.ts). */
  const largeFile = 'export const line = 1;\n'.repeat(8_000);
  const ask = { role: 'user', content: 'Fix the failing test.' };
  const chat = (body: Record<string, unknown>) =>
    flat(parseInferenceRequest('chat', undefined, json({ model: 'm', ...body })).text);

  it('writes the tools after the opening system message, or first when there is none', () => {
    const tools = [tool('read_file'), tool('run_tests')];
    const lines = `tools\n${JSON.stringify(tools[0])}\n${JSON.stringify(tools[1])}\n`;
    expect(chat({ messages: [sys, ask], tools })).toBe(
      `system\nYou are a coding agent.\n${lines}user\nFix the failing test.\n`,
    );
    expect(chat({ messages: [ask], tools })).toBe(`${lines}user\nFix the failing test.\n`);
    expect(chat({ messages: [{ ...sys, role: 'developer' }, ask], tools })).toContain(`agent.\n${lines}user`);
    // No tools, or an empty list: the text of the messages alone.
    expect(chat({ messages: [sys, ask], tools: [] })).toBe(chat({ messages: [sys, ask] }));
  });

  it('keeps agents with other tools apart, and agents with the same tools together', () => {
    const a = chat({ messages: [sys, ask], tools: [tool('read_file'), tool('run_tests')] });
    const same = chat({ messages: [sys, ask], tools: [tool('read_file'), tool('run_tests')] });
    const other = chat({ messages: [sys, ask], tools: [tool('query_db'), tool('run_tests')] });
    expect(same).toBe(a);
    const diverge = commonPrefix(a, other);
    expect(diverge).toBeLessThan('system\nYou are a coding agent.\ntools\n'.length + 40);
    // The same tools behind another system prompt share nothing past the system prompt, as vLLM's.
    expect(
      commonPrefix(a, chat({ messages: [{ ...sys, content: 'Other.' }, ask], tools: [tool('read_file')] })),
    ).toBe('system\n'.length);
  });

  it("writes each assistant tool call's name and arguments, so a conversation's next turn extends it", () => {
    const tools = [tool('read_file')];
    const call = {
      id: 'call_1',
      type: 'function',
      function: { name: 'read_file', arguments: '{"path": "src/a.ts"}' },
    };
    const turn1 = [sys, ask];
    const turn2 = [
      ...turn1,
      { role: 'assistant', content: null, tool_calls: [call] },
      { role: 'tool', tool_call_id: 'call_1', content: 'export const a = 1;' },
    ];
    const t1 = chat({ messages: turn1, tools });
    const t2 = chat({ messages: turn2, tools });
    expect(t2.startsWith(t1)).toBe(true);
    expect(t2.slice(t1.length)).toBe(
      'assistant\n<tool_call>read_file\n{"path": "src/a.ts"}\ntool\nexport const a = 1;\n',
    );
    // Another call's arguments are another prompt.
    const otherArgs = { ...call, function: { ...call.function, arguments: '{"path": "src/b.ts"}' } };
    const t2b = chat({
      messages: [...turn1, { role: 'assistant', content: null, tool_calls: [otherArgs] }],
      tools,
    });
    expect(commonPrefix(t2, t2b)).toBe(t1.length + 'assistant\n<tool_call>read_file\n{"path": "src/'.length);
  });

  it('reads the tools and tool calls of the Responses API and the Anthropic Messages API alike', () => {
    const fn = { name: 'read_file', description: 'Reads a file.', parameters: { type: 'object' } };
    const responses = flat(
      parseInferenceRequest(
        'responses',
        undefined,
        json({
          model: 'm',
          instructions: 'You are a coding agent.',
          tools: [{ type: 'function', ...fn }],
          input: [
            { role: 'user', content: 'Fix the failing test.' },
            { type: 'function_call', call_id: 'c1', name: 'read_file', arguments: '{"path": "a"}' },
            { type: 'function_call_output', call_id: 'c1', output: 'x = 1' },
          ],
        }),
      ).text,
    );
    expect(responses).toContain(`tools\n${JSON.stringify({ type: 'function', ...fn })}\nuser\n`);
    expect(responses).toContain('assistant\n<tool_call>read_file\n{"path": "a"}\ntool\nx = 1\n');
    const messages = flat(
      parseInferenceRequest(
        'messages',
        undefined,
        json({
          model: 'm',
          max_tokens: 8,
          system: 'You are a coding agent.',
          tools: [{ name: 'read_file', description: 'Reads a file.', input_schema: { type: 'object' } }],
          messages: [
            { role: 'user', content: 'Fix the failing test.' },
            {
              role: 'assistant',
              content: [{ type: 'tool_use', id: 'c1', name: 'read_file', input: { path: 'a' } }],
            },
            { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'x = 1' }] },
          ],
        }),
      ).text,
    );
    // As vLLM converts it: a chat tool (function name, description, parameters), the input as Python's json.dumps.
    expect(messages).toBe(
      `system\nYou are a coding agent.\ntools\n${JSON.stringify(tool('read_file', 'Reads a file.')).replace(
        ',"properties":{"path":{"type":"string"}}',
        '',
      )}\nuser\nFix the failing test.\nassistant\n<tool_call>read_file\n{"path": "a"}\ntool\nx = 1\n`,
    );
  });

  it('writes a long tool-call argument the body parser kept in pieces as its text', () => {
    // Over 128 KB, the body's long `content` values come back in pieces (json-body.ts); an Anthropic
    // tool call's input is written as Python's json.dumps writes it, whatever form its values took.
    const file = largeFile;
    const text = flat(
      parseInferenceRequest(
        'messages',
        undefined,
        json({
          model: 'm',
          max_tokens: 8,
          messages: [
            { role: 'user', content: 'Write the file.' },
            {
              role: 'assistant',
              content: [
                { type: 'tool_use', id: 'c1', name: 'write', input: { path: 'a.ts', content: file } },
              ],
            },
            { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'ok' }] },
          ],
        }),
      ).text,
    );
    expect(text).toContain(
      `<tool_call>write\n{"path": "a.ts", "content": ${JSON.stringify(file)}}\ntool\nok\n`,
    );
  });

  it("reads a large agent body's long tool-call arguments and outputs, kept in pieces, as their text", () => {
    const file = largeFile;
    const args = JSON.stringify({ path: 'a.ts', content: file });
    const call = { id: 'c1', type: 'function', function: { name: 'write', arguments: args } };
    const chatText = chat({ messages: [ask, { role: 'assistant', content: null, tool_calls: [call] }] });
    expect(chatText).toBe(`user\nFix the failing test.\nassistant\n<tool_call>write\n${args}\n`);
    const responses = parseInferenceRequest(
      'responses',
      undefined,
      json({
        model: 'm',
        input: [
          { role: 'user', content: 'Fix the failing test.' },
          { type: 'function_call', call_id: 'c1', name: 'write', arguments: args },
          { type: 'function_call_output', call_id: 'c1', output: file },
        ],
      }),
    );
    expect(flat(responses.text)).toBe(
      `user\nFix the failing test.\nassistant\n<tool_call>write\n${args}\ntool\n${file}\n`,
    );
  });

  it('leaves tools and tool calls out when told the template renders none (--tools-in-prompt false)', () => {
    const body = {
      model: 'm',
      tools: [tool('read_file')],
      messages: [
        sys,
        ask,
        {
          role: 'assistant',
          content: 'ok',
          tool_calls: [{ function: { name: 'read_file', arguments: '{}' } }],
        },
      ],
    };
    const off = flat(parseInferenceRequest('chat', undefined, json(body), { tools: false }).text);
    expect(off).toBe('system\nYou are a coding agent.\nuser\nFix the failing test.\nassistant\nok\n');
    expect(flat(parseInferenceRequest('chat', undefined, json(body)).text)).toContain('<tool_call>read_file');
  });

  it('writes malformed tools and calls as they are, for vLLM to refuse', () => {
    expect(chat({ messages: [ask], tools: ['x', 3] })).toBe('tools\n"x"\n3\nuser\nFix the failing test.\n');
    expect(
      chat({ messages: [ask, { role: 'assistant', content: 'ok', tool_calls: [null, { function: 7 }] }] }),
    ).toBe('user\nFix the failing test.\nassistant\nok<tool_call>\n<tool_call>\n\n');
    expect(chat({ messages: [ask], tools: 'not a list' })).toBe(chat({ messages: [ask] }));
  });
});
