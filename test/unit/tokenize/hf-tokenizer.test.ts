import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { HfTokenizer, LINE_BREAK, splitLines } from '../../../src/tokenize/hf-tokenizer.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import { RequestTokenizer, parseTokenizerSpecs } from '../../../src/tokenize/request-tokens.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
/** Golden values from the Rust `tokenizers` library and Jinja2 (scripts/gen-tokenizer-fixture.py). */
const expected = JSON.parse(readFileSync(`${DIR}/expected.json`, 'utf8')) as {
  samples: Array<{ text: string; ids: number[]; ids_no_special: number[] }>;
  chats: Array<{ messages: unknown[]; add_generation_prompt: boolean; text: string; ids: number[] }>;
  /** A coding agent's chat request, and what Jinja2 renders from what vLLM hands the template. */
  agent: { request: Record<string, unknown>; text: string; ids: number[] };
};
const tok = HfTokenizer.load(DIR);
/** Llama 3's pre-tokenizer regex (its tokenizer.json), in the Rust regex syntax tokenizers.js accepts. */
const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

describe('HfTokenizer on the fixture (checked against the Rust tokenizers library)', () => {
  it.each(expected.samples.map((s) => [s.text, s] as const))('encodes %j like Rust', (_text, s) => {
    expect(tok.encode(s.text)).toEqual(s.ids);
    expect(tok.encode(s.text, false)).toEqual(s.ids_no_special);
    expect(tok.encodeUncached(s.text)).toEqual(s.ids);
  });

  it.each(expected.samples.map((s) => [s.text] as const))('round-trips %j', (text) => {
    expect(tok.decode(tok.encode(text, false))).toBe(text);
  });

  it('the piece cache gives the same ids on a second, cached pass', () => {
    const text = expected.chats[0]!.text;
    const first = tok.encode(text, false);
    expect(tok.encode(text, false)).toEqual(first);
    expect(first).toEqual(tok.encodeUncached(text, false));
  });

  it('a full piece cache keeps its shared lines: a one-off piece replaces them only when seen twice', () => {
    const lines = Array.from({ length: 20 }, (_, i) => `Shared line ${i} of the system prompt.\n`);
    const shared = lines.join('');
    const question = (i: number) => `question ${i}: why ${i * 31}?`;
    // Room for the shared lines and a few questions.
    const t = HfTokenizer.load(DIR, { maxCachedChars: shared.length + 100 });
    const ask = (i: number) => {
      const text = `${shared}${question(i)}`;
      expect(t.encode(text, false)).toEqual(t.encodeUncached(text, false));
    };
    for (let i = 0; i < 10; i++) ask(i); // fills the cache: every piece entered while there was room
    const full = t.cacheStats();
    expect(full.chars).toBeLessThanOrEqual(shared.length + 100);
    expect(full.pieces).toBeGreaterThan(20);
    for (let i = 10; i < 60; i++) ask(i); // one-off questions into a full cache: none enters
    expect(t.cacheStats()).toEqual(full);
    for (const line of lines) expect(t.isCached(line)).toBe(true);
    expect(t.isCached(question(42))).toBe(false);
    ask(42); // seen a second time: it enters, evicting the least recently used questions only
    expect(t.isCached(question(42))).toBe(true);
    for (const line of lines) expect(t.isCached(line)).toBe(true);
    expect(t.cacheStats().chars).toBeLessThanOrEqual(shared.length + 100);
  });

  it('a shared multi-line prompt is tokenized line by line, with the same ids as the whole text', () => {
    expect(tok.splitsLines).toBe(true);
    const doc = Array.from({ length: 40 }, (_, i) => `Line ${i}: the router sends requests, ${i * 7}.`);
    const shared = `Context:\n${doc.join('\n')}\n\n  indented\n\ttabbed \nend`;
    for (const question of ['Why?', ' leading space', '\nafter a blank line', 'ünïcödé 😀', '123\n456']) {
      const text = `${shared}\n${question}`;
      expect(tok.encode(text)).toEqual(tok.encodeUncached(text));
      expect(tok.encode(text, false)).toEqual(tok.encodeUncached(text, false));
    }
  });

  it('a Llama-3-style pre-tokenizer (Split regex, then ByteLevel) also splits lines exactly', () => {
    const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
    const llama3 = new HfTokenizer(
      {
        ...json,
        pre_tokenizer: {
          type: 'Sequence',
          pretokenizers: [
            {
              type: 'Split',
              pattern: { Regex: LLAMA3_SPLIT },
              behavior: 'Isolated',
              invert: false,
            },
            { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false },
          ],
        },
      },
      {},
    );
    expect(llama3.splitsLines).toBe(true);
    const text = 'Rules.\nword \nnext\r\n12\n\nlast line. \n  indented\nWhy?';
    expect(llama3.encode(text)).toEqual(llama3.encodeUncached(text));
    expect(llama3.encode(text)).toEqual(llama3.encodeUncached(text)); // cached pass
  });

  it('the newline scan cuts where LINE_BREAK matches, on random texts', () => {
    const rng = seededRandom(7);
    const alphabet = ['a', 'Z', '7', '.', ',', ' ', ' ', '\t', '\r', '\n', '\n', 'é', '日', "'"];
    for (let n = 0; n < 2000; n++) {
      let text = '';
      const len = Math.floor(rng() * 24);
      for (let i = 0; i < len; i++) text += alphabet[Math.floor(rng() * alphabet.length)];
      expect(splitLines(text)).toEqual(text.split(LINE_BREAK));
    }
  });

  it('a tokenizer whose lines do not tokenize apart keeps whole pieces (and stays exact)', () => {
    const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
    // Prepend a space to every encoded text: line 2 of a split text would get one the whole text lacks.
    const prepending = new HfTokenizer({ ...json, normalizer: { type: 'Prepend', prepend: ' ' } }, {});
    expect(prepending.splitsLines).toBe(false);
    const text = 'first line\nsecond line\nthird';
    expect(prepending.encode(text)).toEqual(prepending.encodeUncached(text));
    expect(prepending.encode(text)).toEqual(prepending.encode(text)); // cached pass
  });

  it('tokenString names vocabulary entries and rejects unknown ids', () => {
    expect(tok.tokenString(0)).toBe('<|begin_of_text|>');
    expect(() => tok.tokenString(10_000)).toThrow(RangeError);
  });
});

describe('chat template rendering (checked against Jinja2)', () => {
  it.each(expected.chats.map((c, i) => [i, c] as const))(
    'conversation %i renders and tokenizes like vLLM',
    (_i, c) => {
      const r = tok.renderChat(c.messages, { addGenerationPrompt: c.add_generation_prompt });
      expect(r).toEqual({ ok: true, text: c.text });
      expect(tok.encode(c.text, false)).toEqual(c.ids);
    },
  );

  it("a coding agent's request (tools, a tool call) tokenizes as vLLM renders it", () => {
    // Its tools as vLLM's models dump them, the call's arguments parsed (tokenize/vllm-chat-input.ts).
    const rt = new RequestTokenizer(new Map([['m', tok]]));
    const r = rt.tokenize('m', { ...expected.agent.request, add_generation_prompt: true });
    expect(r.ok).toBe(true);
    if (r.ok) {
      expect(tok.decode(Array.from(r.ids))).toBe(expected.agent.text);
      expect(Array.from(r.ids)).toEqual(expected.agent.ids);
    }
  });

  it('continue_final_message leaves the last message open; both flags at once is an error', () => {
    const messages = [
      { role: 'user', content: 'Say' },
      { role: 'assistant', content: 'Hello' },
    ];
    const r = tok.renderChat(messages, { addGenerationPrompt: false, continueFinalMessage: true });
    expect(r.ok && r.text.endsWith('assistant<|end_header_id|>\n\nHello')).toBe(true);
    expect(tok.renderChat(messages, { addGenerationPrompt: true, continueFinalMessage: true }).ok).toBe(
      false,
    );
  });
});

describe('RequestTokenizer', () => {
  const rt = new RequestTokenizer(new Map([['m', tok]]));
  const chat = expected.chats[0]!;

  it.each<[string, Record<string, unknown> | undefined, unknown]>([
    ['chat -> template, no extra BOS', { messages: chat.messages }, { ok: true, ids: chat.ids }],
    [
      'completion string -> BOS added',
      { prompt: 'Hello world' },
      { ok: true, ids: expected.samples[0]!.ids },
    ],
    [
      'completion, add_special_tokens false',
      { prompt: 'Hello world', add_special_tokens: false },
      { ok: true, ids: expected.samples[0]!.ids_no_special },
    ],
    [
      'completion, add_special_tokens "false" (pydantic reads it as false, so does vLLM)',
      { prompt: 'Hello world', add_special_tokens: 'false' },
      { ok: true, ids: expected.samples[0]!.ids_no_special },
    ],
    [
      'chat, add_special_tokens "true": the BOS vLLM adds on top of the template',
      { messages: chat.messages, add_special_tokens: 'true' },
      { ok: true, ids: [0, ...chat.ids] },
    ],
    ['token ids as is', { prompt: [5, 6, 7] }, { ok: true, ids: [5, 6, 7] }],
    ['one-element batch', { prompt: [[5, 6]] }, { ok: true, ids: [5, 6] }],
    [
      'batch of token-id prompts: one sequence each',
      { prompt: [[5, 6], [7]] },
      { ok: true, ids: [5, 6], batch: [[5, 6], [7]] },
    ],
    [
      'batch of strings: each encoded on its own',
      { prompt: ['Hello world', 'Hello world'], add_special_tokens: false },
      {
        ok: true,
        ids: expected.samples[0]!.ids_no_special,
        batch: [expected.samples[0]!.ids_no_special, expected.samples[0]!.ids_no_special],
      },
    ],
    ['a batch mixing strings and token ids', { prompt: ['a', [5]] }, { ok: false, reason: 'no_prompt' }],
    [
      'image part',
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
      { ok: false, reason: 'multimodal' },
    ],
    ['no body', undefined, { ok: false, reason: 'no_prompt' }],
    ['no prompt', { max_tokens: 3 }, { ok: false, reason: 'no_prompt' }],
  ])('%s', (_name, body, out) => {
    const r = rt.tokenize('m', body);
    expect(
      r.ok
        ? {
            ok: true,
            ids: Array.from(r.ids),
            ...(r.batch !== undefined ? { batch: r.batch.map((b) => Array.from(b)) } : {}),
          }
        : r,
    ).toEqual(out);
  });

  it("encodeIds gives encode's ids in a typed array, long prompts included", () => {
    const long = `${'The quick brown fox jumps over the lazy dog.\n'.repeat(2000)}Question: why?`;
    for (const text of ['Hello world', '', long]) {
      for (const special of [true, false]) {
        const typed = tok.encodeIds(text, special);
        expect(typed).toBeInstanceOf(Uint32Array);
        expect(Array.from(typed)).toEqual(tok.encode(text, special));
      }
    }
    expect(tok.encode(long).length).toBeGreaterThan(16_384); // past V8's large-object size as a JS array
  });

  it("renders an assistant tool call's null content as nothing, as vLLM's templates do", () => {
    const call = { id: 'c', type: 'function', function: { name: 'ls', arguments: '{}' } };
    const messages = (content: string | null) => [
      ...chat.messages,
      { role: 'assistant', content, tool_calls: [call] },
    ];
    const withNull = rt.tokenize('m', { messages: messages(null) });
    expect(withNull.ok).toBe(true);
    expect(withNull).toEqual(rt.tokenize('m', { messages: messages('') }));
  });

  it('a model without a tokenizer falls back', () => {
    expect(rt.tokenize('other', { prompt: 'x' })).toEqual({ ok: false, reason: 'no_tokenizer' });
  });

  it('renders with chat_template_kwargs and documents as vLLM hands them to the template', () => {
    // A template that reads variables at its start (a reasoning switch, retrieved documents in the
    // system part) and at its end (Qwen3's enable_thinking in the generation prompt).
    const template =
      '{{ bos_token }}{% if reasoning %}<|reasoning:{{ reasoning }}|>{% endif %}' +
      '{% for d in documents or [] %}<doc>{{ d.text }}</doc>{% endfor %}' +
      '{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}' +
      '{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}';
    const t = new HfTokenizer(
      JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
      { chat_template: template, bos_token: '<s>' },
    );
    const r = new RequestTokenizer(new Map([['m', t]]));
    const messages = [{ role: 'user', content: 'hello' }];
    const text = (body: Record<string, unknown>): string => {
      const ids = r.tokenize('m', { messages, ...body });
      if (!ids.ok) throw new Error(ids.reason);
      return t.decode(Array.from(ids.ids));
    };
    expect(text({})).toBe('<s><user>hello<assistant>');
    expect(text({ chat_template_kwargs: { enable_thinking: false } })).toBe(
      '<s><user>hello<assistant><think></think>',
    );
    expect(text({ chat_template_kwargs: { reasoning: 'high' }, documents: [{ text: 'D1' }] })).toBe(
      '<s><|reasoning:high|><doc>D1</doc><user>hello<assistant>',
    );
    // The request's own flags and documents win over chat_template_kwargs', as in vLLM's
    // build_chat_params (merge_kwargs(chat_template_kwargs, {add_generation_prompt, ..., documents})).
    expect(text({ chat_template_kwargs: { add_generation_prompt: false } })).toBe(
      '<s><user>hello<assistant>',
    );
    expect(
      text({ add_generation_prompt: false, chat_template_kwargs: { add_generation_prompt: true } }),
    ).toBe('<s><user>hello');
    expect(text({ chat_template_kwargs: { documents: [{ text: 'K' }] } })).toBe(
      '<s><doc>K</doc><user>hello<assistant>',
    );
    expect(text({ documents: [{ text: 'D1' }], chat_template_kwargs: { documents: [{ text: 'K' }] } })).toBe(
      '<s><doc>D1</doc><user>hello<assistant>',
    );
    // The flags as vLLM's pydantic models read them: "false" is false.
    expect(text({ add_generation_prompt: 'false' })).toBe('<s><user>hello');
    expect(text({ chat_template_kwargs: ['not', 'an', 'object'] })).toBe('<s><user>hello<assistant>');
    // Variables may replace special tokens (transformers merges kwargs over them), never the messages.
    expect(text({ chat_template_kwargs: { bos_token: '', messages: [] } })).toBe('<user>hello<assistant>');
  });

  it('truncate_prompt_tokens keeps the last k tokens as vLLM does (BOS kept), on both endpoints', () => {
    // Golden ids: transformers' AutoTokenizer on the fixture, truncation_side "left" as vLLM loads a
    // generate model's tokenizer, tokenizer(text, truncation=True, max_length=k).
    const text = expected.samples[1]!.text; // 21 ids with BOS
    const ids = (body: Record<string, unknown>): unknown => {
      const r = rt.tokenize('m', body);
      return r.ok ? Array.from(r.ids) : r;
    };
    expect(ids({ prompt: text, truncate_prompt_tokens: 5 })).toEqual([0, 344, 499, 383, 17]);
    expect(ids({ prompt: text, truncate_prompt_tokens: '5' })).toEqual([0, 344, 499, 383, 17]);
    expect(ids({ prompt: text, truncate_prompt_tokens: 5, add_special_tokens: false })).toEqual([
      264, 344, 499, 383, 17,
    ]);
    expect(ids({ prompt: text, truncate_prompt_tokens: 5, truncation_side: 'right' })).toEqual([
      0, 352, 88, 330, 263,
    ]);
    expect(ids({ prompt: text, truncate_prompt_tokens: 100 })).toEqual(expected.samples[1]!.ids);
    expect(ids({ prompt: [5, 6, 7, 8, 9], truncate_prompt_tokens: 2 })).toEqual([8, 9]);
    const batch = rt.tokenize('m', { prompt: [[5, 6, 7], [8]], truncate_prompt_tokens: 2 });
    expect(batch.ok && batch.batch!.map((b) => Array.from(b))).toEqual([[6, 7], [8]]);
    // A chat render (no added specials): its last 8 ids.
    expect(ids({ messages: chat.messages, truncate_prompt_tokens: 8 })).toEqual([
      1, 2, 68, 296, 339, 3, 202, 202,
    ]);
    // -1 truncates to the model's context, which the router does not know.
    expect(ids({ prompt: text, truncate_prompt_tokens: -1 })).toEqual({ ok: false, reason: 'truncation' });
  });

  it("a request's own chat_template falls back: the router renders only the model's", () => {
    expect(rt.tokenize('m', { messages: chat.messages, chat_template: '{{ messages[0].content }}' })).toEqual(
      { ok: false, reason: 'request_chat_template' },
    );
    expect(
      rt.tokenize('m', { messages: chat.messages, chat_template_kwargs: { chat_template: '{{ 1 }}' } }),
    ).toEqual({ ok: false, reason: 'request_chat_template' });
  });

  describe('which chat template renders (as transformers picks it, golden ids from it)', () => {
    const MAIN =
      '{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}';
    const TOOL_USE =
      '{{ bos_token }}{% for t in tools %}{{ t.function.name }}: {{ t.function.description }}\n{% endfor %}' +
      '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}';
    const messages = [{ role: 'user', content: 'Summarise the document.' }];
    const tools = [{ type: 'function', function: { name: 'ls', description: 'list files' } }];
    const PLAIN_IDS = [0, 2, 297, 261, 3, 202, 202, 54, 283, 379, 495, 264, 511, 462, 17, 1];
    const TOOL_IDS = [0, 79, 86, 29, 471, 300, 368, 361, 202, ...PLAIN_IDS.slice(1)];
    const ids = (r: RequestTokenizer, body: Record<string, unknown>): unknown => {
      const out = r.tokenize('m', body);
      return out.ok ? Array.from(out.ids) : out;
    };

    it("a model directory's chat_template.jinja wins over tokenizer_config's; tools pick additional_chat_templates/tool_use.jinja", () => {
      const dir = mkdtempSync(join(tmpdir(), 'tok-'));
      try {
        copyFileSync(join(DIR, 'tokenizer.json'), join(dir, 'tokenizer.json'));
        const config = JSON.parse(readFileSync(join(DIR, 'tokenizer_config.json'), 'utf8')) as Record<
          string,
          unknown
        >;
        writeFileSync(
          join(dir, 'tokenizer_config.json'),
          JSON.stringify({ ...config, chat_template: '{{ bos_token }}stale{{ messages[0].content }}' }),
        );
        writeFileSync(join(dir, 'chat_template.jinja'), MAIN);
        mkdirSync(join(dir, 'additional_chat_templates'));
        writeFileSync(join(dir, 'additional_chat_templates', 'tool_use.jinja'), TOOL_USE);
        const r = RequestTokenizer.load(new Map([['m', dir]]));
        expect(ids(r, { messages })).toEqual(PLAIN_IDS);
        expect(ids(r, { messages, tools })).toEqual(TOOL_IDS);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("tools pick a config's named tool_use template, as transformers' get_chat_template does", () => {
      const t = new HfTokenizer(
        JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
        {
          bos_token: '<|begin_of_text|>',
          chat_template: [
            { name: 'default', template: MAIN },
            { name: 'tool_use', template: TOOL_USE },
          ],
        },
      );
      const r = new RequestTokenizer(new Map([['m', t]]));
      expect(ids(r, { messages })).toEqual(PLAIN_IDS);
      expect(ids(r, { messages, tools: null })).toEqual(PLAIN_IDS);
      expect(ids(r, { messages, tools })).toEqual(TOOL_IDS);
    });
  });

  it("passes a request's reasoning_effort to the template, and enable_thinking from it, as vLLM does", () => {
    // A GLM-style template: the effort in a system line at the start, a thinking switch at the end.
    const template =
      '{{ bos_token }}{% if reasoning_effort is defined %}<|start_header_id|>system<|end_header_id|>\n\nReasoning Effort: {{ reasoning_effort }}<|eot_id|>{% endif %}' +
      '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}' +
      '{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}';
    const t = new HfTokenizer(
      JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
      { chat_template: template, bos_token: '<|begin_of_text|>' },
    );
    const r = new RequestTokenizer(new Map([['m', t]]));
    const messages = [{ role: 'user', content: 'Summarise the document.' }];
    const ids = (body: Record<string, unknown>): unknown => {
      const out = r.tokenize('m', { messages, ...body });
      return out.ok ? Array.from(out.ids) : out;
    };
    // Golden ids: transformers' apply_chat_template with the kwargs vLLM passes, then the tokenizer.
    const SYSTEM = [0, 2, 387, 450, 3, 202, 202, 53, 72, 68, 86, 272, 304, 224, 40, 73, 73, 267, 87, 29, 224];
    const REST = [
      1, 2, 297, 261, 3, 202, 202, 54, 283, 379, 495, 264, 511, 462, 17, 1, 2, 68, 296, 339, 3, 202, 202,
    ];
    expect(ids({ reasoning_effort: 'high' })).toEqual([...SYSTEM, 75, 76, 74, 75, ...REST]);
    expect(ids({ reasoning_effort: 'none' })).toEqual([
      ...SYSTEM,
      81,
      272,
      72,
      ...REST,
      31,
      87,
      75,
      271,
      78,
      33,
      31,
      18,
      87,
      75,
      271,
      78,
      33,
    ]);
    // chat_template_kwargs' own enable_thinking stands.
    expect(ids({ reasoning_effort: 'none', chat_template_kwargs: { enable_thinking: true } })).toEqual([
      ...SYSTEM,
      81,
      272,
      72,
      ...REST,
    ]);
    expect(ids({})).toEqual([0, ...REST.slice(1)]);
  });

  it("renders a /v1/responses request with its reasoning.effort as chat's reasoning_effort, as vLLM does", () => {
    // vLLM's ResponsesRequest.build_chat_params: reasoning.effort as reasoning_effort, enable_thinking
    // from it unless chat_template_kwargs names it (vllm-project/vllm#43401, #43761).
    const template =
      '{{ bos_token }}{% if reasoning_effort is defined %}<|start_header_id|>system<|end_header_id|>\n\nReasoning Effort: {{ reasoning_effort }}<|eot_id|>{% endif %}' +
      '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}' +
      '{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}';
    const t = new HfTokenizer(
      JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
      { chat_template: template, bos_token: '<|begin_of_text|>' },
    );
    const r = new RequestTokenizer(new Map([['m', t]]));
    const ids = (out: ReturnType<RequestTokenizer['tokenize']>): unknown =>
      out.ok ? Array.from(out.ids) : out;
    const question = 'Summarise the document.';
    // vLLM encodes a Responses render with special tokens (ResponsesRequest.build_tok_params): the chat
    // request it equals is one with add_special_tokens.
    const chat = (body: Record<string, unknown>) =>
      ids(
        r.tokenize('m', {
          messages: [{ role: 'user', content: question }],
          add_special_tokens: true,
          ...body,
        }),
      );
    const responses = (body: Record<string, unknown>) => {
      const json = Buffer.from(JSON.stringify({ model: 'm', input: question, ...body }));
      return ids(r.tokenize('m', parseInferenceRequest('responses', 'application/json', json).promptBody));
    };
    expect(chat({ reasoning_effort: 'none' })).toEqual(expect.arrayContaining([0]));
    expect(responses({ reasoning: { effort: 'none' } })).toEqual(chat({ reasoning_effort: 'none' }));
    expect(responses({ reasoning: { effort: 'high', summary: 'auto' } })).toEqual(
      chat({ reasoning_effort: 'high' }),
    );
    expect(
      responses({ reasoning: { effort: 'none' }, chat_template_kwargs: { enable_thinking: true } }),
    ).toEqual(chat({ reasoning_effort: 'none', chat_template_kwargs: { enable_thinking: true } }));
    expect(responses({ reasoning: { effort: null } })).toEqual(chat({}));
    // Chat-only fields a ResponsesRequest does not have render nothing there.
    expect(responses({ reasoning_effort: 'none', add_generation_prompt: false, documents: [] })).toEqual(
      chat({}),
    );
    // A last assistant message still in progress is continued, with no generation prompt.
    const partial = {
      type: 'message',
      role: 'assistant',
      status: 'incomplete',
      content: [{ type: 'output_text', text: 'The document' }],
    };
    expect(responses({ input: [{ role: 'user', content: question }, partial] })).toEqual(
      chat({
        messages: [
          { role: 'user', content: question },
          { role: 'assistant', content: [{ type: 'text', text: 'The document' }] },
        ],
        add_generation_prompt: false,
        continue_final_message: true,
      }),
    );
    const completed = responses({
      input: [
        { role: 'user', content: question },
        { ...partial, status: 'completed' },
      ],
    });
    expect(completed).not.toEqual(responses({ input: [{ role: 'user', content: question }, partial] }));
    expect(completed).toEqual(
      chat({
        messages: [
          { role: 'user', content: question },
          { role: 'assistant', content: [{ type: 'text', text: 'The document' }] },
        ],
      }),
    );
  });

  it('renders a /v1/messages request with its output_config.effort and chat_template_kwargs, as vLLM converts it', () => {
    // vLLM's Anthropic serving: chat_template_kwargs passed on, output_config.effort as reasoning_effort
    // (vllm/entrypoints/anthropic/serving.py _build_base_request, _handle_output_config).
    const template =
      '{{ bos_token }}{% if reasoning_effort is defined %}<|start_header_id|>system<|end_header_id|>\n\nReasoning Effort: {{ reasoning_effort }}<|eot_id|>{% endif %}' +
      '{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}' +
      '{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}';
    const t = new HfTokenizer(
      JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
      { chat_template: template, bos_token: '<|begin_of_text|>' },
    );
    const r = new RequestTokenizer(new Map([['m', t]]));
    const ids = (out: ReturnType<RequestTokenizer['tokenize']>): unknown =>
      out.ok ? Array.from(out.ids) : out;
    const messages = [{ role: 'user', content: 'Summarise the document.' }];
    const anthropic = (body: Record<string, unknown>) => {
      const json = Buffer.from(JSON.stringify({ model: 'm', max_tokens: 64, messages, ...body }));
      return ids(r.tokenize('m', parseInferenceRequest('messages', 'application/json', json).promptBody));
    };
    // Golden ids (transformers' apply_chat_template with reasoning_effort="high", enable_thinking=True).
    const SYSTEM = [0, 2, 387, 450, 3, 202, 202, 53, 72, 68, 86, 272, 304, 224, 40, 73, 73, 267, 87, 29, 224];
    const REST = [
      1, 2, 297, 261, 3, 202, 202, 54, 283, 379, 495, 264, 511, 462, 17, 1, 2, 68, 296, 339, 3, 202, 202,
    ];
    expect(anthropic({ output_config: { effort: 'high' } })).toEqual([...SYSTEM, 75, 76, 74, 75, ...REST]);
    expect(anthropic({ output_config: { effort: 'high' } })).toEqual(
      ids(r.tokenize('m', { messages, reasoning_effort: 'high' })),
    );
    expect(anthropic({ chat_template_kwargs: { enable_thinking: false } })).toEqual(
      ids(r.tokenize('m', { messages, chat_template_kwargs: { enable_thinking: false } })),
    );
    expect(anthropic({ chat_template_kwargs: { enable_thinking: false } })).not.toEqual(anthropic({}));
    expect(anthropic({})).toEqual([0, ...REST.slice(1)]);
  });

  it("a Mistral-format model's chats fall back: vLLM renders them with mistral_common, not the template beside it", () => {
    // vLLM's default tokenizer mode loads mistral_common for a directory with tekken.json or
    // tokenizer.model.v* (and Mistral-format weights) and renders chats with it (renderers/mistral.py).
    const dir = mkdtempSync(join(tmpdir(), 'tok-'));
    try {
      for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(DIR, f), join(dir, f));
      const chatBody = { messages: chat.messages };
      expect(RequestTokenizer.load(new Map([['m', dir]])).tokenize('m', chatBody).ok).toBe(true);
      writeFileSync(join(dir, 'tekken.json'), '{}');
      const r = RequestTokenizer.load(new Map([['m', dir]]));
      expect(r.tokenize('m', chatBody)).toEqual({ ok: false, reason: 'mistral_tokenizer' });
      // A completions prompt is the tokenizer's own encoding still.
      const prompt = r.tokenize('m', { prompt: 'Hello world' });
      expect(prompt.ok && Array.from(prompt.ids)).toEqual(expected.samples[0]!.ids);
      writeFileSync(join(dir, 'consolidated.safetensors'), '');
      expect(RequestTokenizer.load(new Map([['m', dir]])).tokenize('m', chatBody).ok).toBe(false);
      // Converted weights only (no consolidated*.safetensors): vLLM loads the Hugging Face tokenizer.
      rmSync(join(dir, 'consolidated.safetensors'));
      writeFileSync(join(dir, 'model-00001-of-00001.safetensors'), '');
      expect(RequestTokenizer.load(new Map([['m', dir]])).tokenize('m', chatBody).ok).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a gpt-oss model's chats fall back: vLLM renders them with openai_harmony, not the template beside it", () => {
    // vLLM's chat server sets use_harmony for config.json model_type "gpt_oss" and renders with
    // openai_harmony (its own system message and channels), never with the Jinja template.
    const dir = mkdtempSync(join(tmpdir(), 'tok-'));
    try {
      for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(DIR, f), join(dir, f));
      const chatBody = { messages: chat.messages };
      writeFileSync(join(dir, 'config.json'), JSON.stringify({ model_type: 'llama' }));
      expect(RequestTokenizer.load(new Map([['m', dir]])).tokenize('m', chatBody).ok).toBe(true);
      writeFileSync(
        join(dir, 'config.json'),
        JSON.stringify({ architectures: ['GptOssForCausalLM'], model_type: 'gpt_oss' }),
      );
      const r = RequestTokenizer.load(new Map([['m', dir]]));
      expect(r.tokenize('m', chatBody)).toEqual({ ok: false, reason: 'harmony' });
      const prompt = r.tokenize('m', { prompt: 'Hello world' });
      expect(prompt.ok && Array.from(prompt.ids)).toEqual(expected.samples[0]!.ids);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it.each([
    'DeepseekV32ForCausalLM',
    'DeepseekV4ForCausalLM',
    'Grok1ForCausalLM',
    'KimiK3ForConditionalGeneration',
    'MoonshotKimiaForCausalLM',
    'QwenVLForConditionalGeneration',
  ])(
    "a %s model's chats fall back: vLLM's default tokenizer mode renders them with its own encoder",
    (arch) => {
      // vllm/config/model.py turns tokenizer_mode "auto" into the model's own mode for these
      // architectures; their renderers (vllm/renderers/) do not render the Jinja template beside them.
      const dir = mkdtempSync(join(tmpdir(), 'tok-'));
      try {
        for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(DIR, f), join(dir, f));
        writeFileSync(join(dir, 'config.json'), JSON.stringify({ architectures: [arch] }));
        const r = RequestTokenizer.load(new Map([['m', dir]]));
        expect(r.tokenize('m', { messages: chat.messages })).toEqual({ ok: false, reason: 'model_renderer' });
        const prompt = r.tokenize('m', { prompt: 'Hello world' });
        expect(prompt.ok && Array.from(prompt.ids)).toEqual(expected.samples[0]!.ids);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it("a multimodal model's text chats render with its processor's chat_template.json, as vLLM's do", () => {
    // vLLM's resolve_chat_template prefers the AutoProcessor's template (transformers reads the legacy
    // chat_template.json, or processor_config.json's chat_template) for a request without tools.
    const PROCESSOR_TEMPLATE =
      "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + " +
      "'<|end_header_id|>\\n\\n' }}{%- if message['content'] is string %}{{- message['content'] }}" +
      "{%- else %}{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}" +
      "{%- endif %}{%- endfor %}{%- endif %}{{- '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}" +
      "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
    const messages = [
      { role: 'system', content: ' You are a helpful assistant. ' },
      { role: 'user', content: 'Summarise the document.\n' },
    ];
    // Golden ids: transformers' apply_chat_template with each template, then encode (no specials).
    const PROCESSOR_IDS = [
      0, 2, 387, 450, 3, 202, 202, 224, 352, 88, 330, 263, 430, 374, 365, 342, 17, 224, 1, 2, 297, 261, 3,
      202, 202, 54, 283, 379, 495, 264, 511, 462, 17, 202, 1, 2, 68, 296, 339, 3, 202, 202,
    ];
    const TOKENIZER_IDS = [
      0, 2, 387, 450, 3, 202, 202, 352, 88, 330, 263, 430, 374, 365, 342, 17, 1, 2, 297, 261, 3, 202, 202, 54,
      283, 379, 495, 264, 511, 462, 17, 1, 2, 68, 296, 339, 3, 202, 202,
    ];
    const ids = (dir: string, body: Record<string, unknown>): unknown => {
      const out = RequestTokenizer.load(new Map([['m', dir]])).tokenize('m', body);
      return out.ok ? Array.from(out.ids) : out;
    };
    const dir = mkdtempSync(join(tmpdir(), 'tok-'));
    try {
      for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(DIR, f), join(dir, f));
      writeFileSync(join(dir, 'chat_template.json'), JSON.stringify({ chat_template: PROCESSOR_TEMPLATE }));
      // No processor in the directory: AutoProcessor gives the tokenizer, whose template vLLM renders.
      expect(ids(dir, { messages })).toEqual(TOKENIZER_IDS);
      writeFileSync(
        join(dir, 'preprocessor_config.json'),
        JSON.stringify({ processor_class: 'LlavaProcessor' }),
      );
      expect(ids(dir, { messages })).toEqual(PROCESSOR_IDS);
      // Text parts: the processor's template reads them as a list (its content format).
      const parts = messages.map((m) => ({ ...m, content: [{ type: 'text', text: m.content }] }));
      expect(ids(dir, { messages: parts })).toEqual(PROCESSOR_IDS);
      // A request with tools renders with the tokenizer's template.
      const tool = { type: 'function', function: { name: 'f', parameters: { type: 'object' } } };
      const withTools = ids(dir, { messages, tools: [tool] });
      expect(withTools).toEqual(ids(DIR, { messages, tools: [tool] }));
      // processor_config.json's own chat_template wins over chat_template.json.
      writeFileSync(
        join(dir, 'processor_config.json'),
        JSON.stringify({
          chat_template: JSON.parse(readFileSync(join(DIR, 'tokenizer_config.json'), 'utf8')).chat_template,
        }),
      );
      expect(ids(dir, { messages })).toEqual(TOKENIZER_IDS);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a template that raises is a template_error', () => {
    const raising = new HfTokenizer(
      JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
      { chat_template: "{{ raise_exception('tools unsupported') }}" },
    );
    const r = new RequestTokenizer(new Map([['m', raising]]));
    expect(r.tokenize('m', { messages: [{ role: 'user', content: 'x' }] })).toEqual({
      ok: false,
      reason: 'template_error',
    });
  });

  it('parses MODEL=PATH specs and loads each directory once', () => {
    const specs = parseTokenizerSpecs([`a=${DIR}`, `org/b:v1=${DIR}`]);
    expect([...specs.keys()]).toEqual(['a', 'org/b:v1']);
    const loaded = RequestTokenizer.load(specs);
    expect(loaded.tokenizerFor('a')).toBe(loaded.tokenizerFor('org/b:v1'));
    expect(() => parseTokenizerSpecs(['nopath'])).toThrow(/MODEL=PATH/);
    expect(() => RequestTokenizer.load(new Map([['x', '/nonexistent']]))).toThrow(/--tokenizer x=/);
  });
});
