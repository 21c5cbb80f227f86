import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import type { SimTokenizer } from '../../../src/sim/sim-tokenizer.js';
import { getText, postJson } from './sim-test-client.js';

describe('simulator POST /tokenize and /detokenize (vLLM shapes)', () => {
  let s: Simulator;
  beforeAll(async () => {
    s = await startSimulator({ timeScale: 0, maxModelLen: 4096 });
  });
  afterAll(async () => {
    await s.close();
  });

  it('tokenizes a prompt: {count, max_model_len, tokens, token_strs: null}', async () => {
    const r = await postJson(`${s.url}/tokenize`, { model: 'sim-model', prompt: 'hello world!' });
    expect(r.status).toBe(200);
    expect(Object.keys(r.json).sort()).toEqual(['count', 'max_model_len', 'token_strs', 'tokens']);
    expect(r.json.count).toBe(3);
    expect(r.json.max_model_len).toBe(4096);
    expect(r.json.tokens).toHaveLength(3);
    expect(r.json.token_strs).toBeNull();
  });

  it('returns token strings when asked and detokenizes the ids back to the prompt', async () => {
    const prompt = 'The quick brown fox — jumps.';
    const t = await postJson(`${s.url}/tokenize`, { prompt, return_token_strs: true });
    expect((t.json.token_strs as string[]).join('')).toBe(prompt);
    const d = await postJson(`${s.url}/detokenize`, { model: 'sim-model', tokens: t.json.tokens });
    expect(d.status).toBe(200);
    expect(d.json).toEqual({ prompt });
  });

  it('counts the same prompt tokens as the generation endpoint reports in usage', async () => {
    const prompt = 'x'.repeat(333);
    const t = await postJson(`${s.url}/tokenize`, { prompt });
    const g = await postJson(`${s.url}/v1/completions`, { prompt, max_tokens: 1 });
    expect(t.json.count).toBe((g.json.usage as { prompt_tokens: number }).prompt_tokens);

    const messages = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: 'y'.repeat(101) },
    ];
    const chat = await postJson(`${s.url}/tokenize`, { messages, add_generation_prompt: false });
    const cg = await postJson(`${s.url}/v1/chat/completions`, { messages, max_tokens: 1 });
    expect(chat.json.count).toBe((cg.json.usage as { prompt_tokens: number }).prompt_tokens);

    // Tools are rendered into the prompt by both, and cost their tokens.
    const tools = [{ type: 'function', function: { name: 'read_file', description: 'd'.repeat(400) } }];
    const withTools = await postJson(`${s.url}/tokenize`, { messages, tools, add_generation_prompt: false });
    const gt = await postJson(`${s.url}/v1/chat/completions`, { messages, tools, max_tokens: 1 });
    expect(withTools.json.count).toBe((gt.json.usage as { prompt_tokens: number }).prompt_tokens);
    expect(withTools.json.count as number).toBeGreaterThan((chat.json.count as number) + 100);
  });

  it('renders messages through the chat template with a generation prompt by default', async () => {
    const messages = [{ role: 'user', content: 'hi' }];
    const withGen = await postJson(`${s.url}/tokenize`, { messages, return_token_strs: true });
    expect((withGen.json.token_strs as string[]).join('')).toBe('<|user|>\nhi\n<|assistant|>\n');
    const cont = await postJson(`${s.url}/tokenize`, {
      messages,
      add_generation_prompt: false,
      continue_final_message: true,
      return_token_strs: true,
    });
    expect((cont.json.token_strs as string[]).join('')).toBe('<|user|>\nhi');
    // The request's own flags win over chat_template_kwargs', as vLLM's TokenizeChatRequest merges them
    // (merge_kwargs(self.chat_template_kwargs, {add_generation_prompt, continue_final_message})).
    const kw = await postJson(`${s.url}/tokenize`, {
      messages,
      chat_template_kwargs: { add_generation_prompt: false },
      return_token_strs: true,
    });
    expect((kw.json.token_strs as string[]).join('')).toBe('<|user|>\nhi\n<|assistant|>\n');
  });

  it.each([
    ['/tokenize', { prompt: 5 }, /prompt/],
    ['/tokenize', {}, /prompt/],
    ['/tokenize', { messages: [] }, /messages/],
    ['/tokenize', { messages: [{ role: 'user', content: 'a' }], continue_final_message: true }, /both/],
    ['/tokenize', { prompt: 'a', add_special_tokens: 'yes' }, /add_special_tokens/],
    ['/tokenize', [1, 2], /object/],
    ['/detokenize', { tokens: 'abc' }, /tokens/],
    ['/detokenize', { tokens: [1.5] }, /tokens/],
    ['/detokenize', { tokens: [-1] }, /vocabulary/],
    ['/detokenize', '{not json', /invalid JSON/],
  ])('POST %s %j -> 400 with an OpenAI error', async (path, body, message) => {
    const r = await postJson(`${s.url}${path}`, body);
    expect(r.status).toBe(400);
    expect((r.json.error as { message: string }).message).toMatch(message);
  });

  it('answers GET /tokenize with 405 and does not record tokenization as generation traffic', async () => {
    const before = s.records.length;
    expect((await getText(`${s.url}/tokenize`)).status).toBe(405);
    await postJson(`${s.url}/tokenize`, { prompt: 'a' });
    expect(s.records.length).toBe(before);
  });

  it('applies an injected fault on /tokenize, and a delayed request keeps its body', async () => {
    s.injectFault({ status: 503 }, { path: '/tokenize' });
    expect((await postJson(`${s.url}/tokenize`, { prompt: 'abcd' })).status).toBe(503);
    s.injectFault({ delayMs: 1 }, { path: '/detokenize' });
    const d = await postJson(`${s.url}/detokenize`, { tokens: [] });
    expect(d).toMatchObject({ status: 200, json: { prompt: '' } });
  });
});

describe('a pluggable tokenizer', () => {
  it('serves /tokenize and /detokenize through SimulatorOptions.tokenizer', async () => {
    const words: SimTokenizer = {
      name: 'words',
      encode: (text, special = false) => [
        ...(special ? [1] : []),
        ...text.split(' ').map((w) => w.length + 100),
      ],
      decode: (ids) => ids.map((id) => 'w'.repeat(id - 100)).join(' '),
      tokenString: (id) => `<${id}>`,
      renderChat: () => ({ ok: true, text: 'a bb' }),
    };
    const s = await startSimulator({ timeScale: 0, tokenizer: words });
    try {
      expect((await postJson(`${s.url}/tokenize`, { prompt: 'a bb ccc' })).json.tokens).toEqual([
        1, 101, 102, 103,
      ]);
      const chat = await postJson(`${s.url}/tokenize`, { messages: [{ role: 'user', content: 'x' }] });
      expect(chat.json.tokens).toEqual([101, 102]); // chat: add_special_tokens defaults to false
      expect((await postJson(`${s.url}/detokenize`, { tokens: [101, 103] })).json.prompt).toBe('w www');
    } finally {
      await s.close();
    }
  });
});
