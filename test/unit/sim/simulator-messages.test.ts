/**
 * The simulator's Anthropic Messages API (POST /v1/messages) as vLLM serves it: a chat generation
 * with Anthropic's shapes, read by the official Anthropic SDK; the same conversation as chat is the same
 * prompt and the same cache blocks; vLLM's errors; the P/D roles.
 */
import Anthropic from '@anthropic-ai/sdk';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { outputText } from '../../../src/sim/openai-format.js';
import { blockPrompt, NIXL_PREFILL, postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

interface MessageBody {
  id: string;
  type: string;
  content: Array<{ type: string; text: string }>;
  usage: { input_tokens: number; output_tokens: number };
  kv_transfer_params?: Record<string, unknown>;
}

function client(url: string): Anthropic {
  return new Anthropic({ baseURL: url, apiKey: 'unused', maxRetries: 0 });
}

/** A Claude Code-like conversation: billing header, system prompt, a tool call and its result. */
const CONVERSATION = {
  system: [
    { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1; cch=0123abcd;' },
    { type: 'text', text: 'You are a coding agent. ' },
    { type: 'text', text: blockPrompt('rules', 3) },
  ],
  messages: [
    { role: 'user', content: [{ type: 'text', text: blockPrompt('task', 2) }] },
    {
      role: 'assistant',
      content: [
        { type: 'text', text: 'Reading it.' },
        { type: 'tool_use', id: 'toolu_1', name: 'read', input: { path: 'a.ts' } },
      ],
    },
    {
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'file' }] }],
    },
  ],
};

/** The same conversation as vLLM turns it into a chat request. */
const AS_CHAT = [
  { role: 'system', content: `You are a coding agent. ${blockPrompt('rules', 3)}` },
  { role: 'user', content: blockPrompt('task', 2) },
  {
    role: 'assistant',
    content: 'Reading it.',
    tool_calls: [
      { id: 'toolu_1', type: 'function', function: { name: 'read', arguments: '{"path": "a.ts"}' } },
    ],
  },
  { role: 'tool', tool_call_id: 'toolu_1', content: 'file' },
];

describe('simulator /v1/messages', () => {
  it('answers the Anthropic SDK, JSON and streamed, with the usage of a chat generation', async () => {
    const s = await sim({ model: 'claude-sim' });
    const anthropic = client(s.url);
    const message = await anthropic.messages.create({
      model: 'claude-sim',
      max_tokens: 3,
      messages: [{ role: 'user', content: 'Say hi.' }],
    });
    const prompt = Math.ceil('<|user|>\nSay hi.\n'.length / 4);
    expect(message).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'claude-sim',
      content: [{ type: 'text', text: outputText(3) }],
      stop_reason: 'max_tokens',
      usage: { input_tokens: prompt, output_tokens: 3 },
    });
    expect(message.id).toMatch(/^chatcmpl-/);

    const stream = anthropic.messages.stream({
      model: 'claude-sim',
      max_tokens: 4,
      messages: [{ role: 'user', content: 'Say hi.' }],
    });
    const types: string[] = [];
    for await (const event of stream) types.push(event.type);
    expect(types).toEqual([
      'message_start',
      'content_block_start',
      ...Array<string>(4).fill('content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const final = await stream.finalMessage();
    expect(final.content).toHaveLength(1);
    expect(final.content[0]).toMatchObject({ type: 'text', text: outputText(4) });
    expect(final.usage).toMatchObject({ input_tokens: prompt, output_tokens: 4 });
    expect(final.stop_reason).toBe('max_tokens');
    expect(s.records.map((r) => [r.path, r.outcome, r.stream])).toEqual([
      ['/v1/messages', 'ok', false],
      ['/v1/messages', 'ok', true],
    ]);
    expect(s.inFlight()).toBe(0);
  });

  it('the same conversation as chat and as messages has the same prompt and cache blocks', async () => {
    // Text mode (default) and token mode (KV events on: the cache keys on the tokenizer's ids).
    for (const opts of [{}, { kvEvents: {} }] as const) {
      const s = await sim(opts);
      const chat = await postJson(`${s.url}/v1/chat/completions`, { messages: AS_CHAT, max_tokens: 1 });
      expect(chat.status, JSON.stringify(chat.json)).toBe(200);
      const chatPrompt = (chat.json.usage as { prompt_tokens: number }).prompt_tokens;
      // The billing header changes with every request; vLLM leaves it out of the prompt.
      const system = [
        { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1; cch=ffff9999;' },
        ...CONVERSATION.system.slice(1),
      ];
      const r = await postJson(`${s.url}/v1/messages`, {
        model: 'sim-model',
        max_tokens: 1,
        ...CONVERSATION,
        system,
      });
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const body = r.json as unknown as MessageBody;
      expect(body.usage.input_tokens).toBe(chatPrompt);
      // Sent after the chat request, every full block of the prompt is a cache hit.
      const record = s.records.at(-1)!;
      expect(record.cachedTokens).toBe(Math.floor(chatPrompt / 16) * 16);
      expect(record.cachedTokens).toBeGreaterThan(0);
    }
  });

  it("answers vLLM's errors in Anthropic's shape, and ignores a body priority", async () => {
    const s = await sim({ schedulingPolicy: 'fcfs' });
    const missing = await postJson(`${s.url}/v1/messages`, {
      model: 'sim-model',
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(missing.status).toBe(400);
    expect(missing.json).toMatchObject({ type: 'error', error: { type: 'BadRequestError' } });
    const bad = await postJson(`${s.url}/v1/messages`, { model: 'sim-model', max_tokens: 2, messages: [] });
    expect(bad.status).toBe(400);
    expect(bad.json).toMatchObject({ type: 'error', error: { type: 'BadRequestError' } });
    const sdkError = await client(s.url)
      .messages.create({ model: 'sim-model', max_tokens: 0, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(sdkError).toBeInstanceOf(Anthropic.BadRequestError);
    // fcfs refuses a chat request's priority; the Messages API has none and ignores it.
    const withPriority = await postJson(`${s.url}/v1/messages`, {
      model: 'sim-model',
      max_tokens: 1,
      priority: 5,
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(withPriority.status).toBe(200);
    const get = await request(`${s.url}/v1/messages`);
    expect(get.statusCode).toBe(405);
    await get.body.dump();
    expect(s.inFlight()).toBe(0);
  });

  it('nixl round trip: the prefill leg returns kv_transfer_params, the decode leg streams the answer', async () => {
    const p = await sim({ role: 'prefill' });
    const d = await sim({ role: 'decode' });
    const messages = [{ role: 'user', content: blockPrompt('pd', 3) }];
    const pre = await postJson(`${p.url}/v1/messages`, {
      model: 'sim-model',
      max_tokens: 1,
      messages,
      kv_transfer_params: NIXL_PREFILL,
    });
    expect(pre.status, JSON.stringify(pre.json)).toBe(200);
    const preBody = pre.json as unknown as MessageBody;
    expect(preBody.kv_transfer_params).toMatchObject({
      do_remote_prefill: true,
      remote_engine_id: p.engineIds[0],
    });
    const stream = client(d.url).messages.stream({
      model: 'sim-model',
      max_tokens: 3,
      messages: messages as Anthropic.MessageParam[],
      // vLLM's extension of the request
      ...({ kv_transfer_params: preBody.kv_transfer_params } as object),
    });
    const final = await stream.finalMessage();
    expect(final.usage.input_tokens).toBe(preBody.usage.input_tokens);
    expect(final.content[0]).toMatchObject({ type: 'text', text: outputText(3) });
    // The decode worker got the whole prompt's KV cache from the prefill worker.
    expect(d.records[0]).toMatchObject({
      path: '/v1/messages',
      outcome: 'ok',
      cachedTokens: preBody.usage.input_tokens,
    });
    const plain = await postJson(`${d.url}/v1/messages`, { model: 'sim-model', max_tokens: 1, messages });
    expect(plain.status).toBe(400);
    expect(plain.json).toMatchObject({ type: 'error' });
  });
});
