import { describe, expect, it } from 'vitest';
import {
  parseResponsesRequest,
  responsesGeneration,
  type ResponsesInput,
} from '../../../src/sim/responses-request.js';
import { ResponseStore, type StoredResponse } from '../../../src/sim/responses-store.js';
import { renderChatTemplate } from '../../../src/sim/sim-tokenizer.js';

function parse(body: unknown): ResponsesInput {
  const r = parseResponsesRequest(body, 16);
  if (!r.ok) throw new Error(r.error);
  return r.input;
}

function chatText(messages: unknown[]): string {
  const r = renderChatTemplate(messages, { addGenerationPrompt: false });
  if (!r.ok) throw new Error(r.error);
  return r.text;
}

describe('parseResponsesRequest', () => {
  it('reads the defaults as vLLM does', () => {
    const input = parse({ model: 'm', input: 'hi' });
    expect(input).toMatchObject({
      instructions: undefined,
      messages: [{ role: 'user', content: 'hi' }],
      previousResponseId: undefined,
      store: true,
      maxTokens: 16,
      stream: false,
      model: 'm',
      kvTransferParams: undefined,
    });
    expect(input.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(parse({ input: 'hi' }).id).not.toBe(input.id);
  });

  it('takes request_id as the response id, max_output_tokens as the output length', () => {
    const input = parse({
      input: 'hi',
      request_id: 'resp_mine',
      max_output_tokens: 3,
      store: false,
      stream: true,
      previous_response_id: 'resp_prev',
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(input).toMatchObject({
      id: 'resp_mine',
      maxTokens: 3,
      store: false,
      stream: true,
      previousResponseId: 'resp_prev',
      kvTransferParams: { do_remote_decode: true },
    });
  });

  it.each([
    [{}, 'input is required'],
    [{ input: null }, 'input is required'],
    [{ input: 42 }, 'input must be a string or an array of input items'],
    [{ input: [42] }, 'input[0]: an input item must be an object'],
    [{ input: [{ role: 'robot', content: 'x' }] }, 'input[0]: a message needs a role'],
    [{ input: [{ role: 'user', content: 7 }] }, 'input[0]: a message needs string content'],
    [{ input: [{ role: 'user', content: [{ type: 'input_text' }] }] }, 'input[0]: a message needs string'],
    [{ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input[0]: a function_call needs'],
    [{ input: [{ type: 'function_call_output', output: 'x' }] }, 'input[0]: a function_call_output needs'],
    [{ input: [{ type: 'web_search_call' }] }, 'input[0]: unsupported input item type "web_search_call"'],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens must be a positive integer'],
    [{ input: 'x', max_output_tokens: 1.5 }, 'max_output_tokens must be a positive integer'],
    [{ input: 'x', max_output_tokens: '3' }, 'max_output_tokens must be a positive integer'],
    [{ input: 'x', instructions: 1 }, 'instructions must be a string'],
    [{ input: 'x', previous_response_id: 1 }, 'previous_response_id must be a string'],
    [{ input: 'x', request_id: '' }, 'request_id must be a non-empty string'],
    [{ input: 'x', store: 'yes' }, 'store must be a boolean'],
    [{ input: 'x', kv_transfer_params: [] }, 'kv_transfer_params must be an object'],
    ['x', 'request body must be a JSON object'],
  ])('rejects %j', (body, error) => {
    const r = parseResponsesRequest(body, 16);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.error).toContain(error);
  });
});

describe('responsesGeneration', () => {
  it('renders instructions and input items as the equivalent chat messages', () => {
    const input = parse({
      instructions: 'Be brief.',
      input: [
        { role: 'user', content: [{ type: 'input_text', text: 'Weather?' }, { type: 'input_image' }] },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Checking.' }] },
        { type: 'reasoning', summary: [] },
        { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{"city":"Oslo"}' },
        { type: 'function_call_output', call_id: 'c1', output: 'rain' },
        { role: 'developer', content: 'Answer in English.' },
        { role: 'user', content: 'And tomorrow?' },
      ],
    });
    const r = responsesGeneration(input, undefined);
    if (!r.ok) throw new Error(r.error);
    const chat = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Weather?' }, { type: 'image_url' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }] },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'c1', content: 'rain' },
      { role: 'developer', content: 'Answer in English.' },
      { role: 'user', content: 'And tomorrow?' },
    ];
    expect(r.request.kind).toBe('responses');
    expect(r.request.prompts).toEqual([chatText(chat)]);
    expect(r.request.turn?.messages).toEqual(chat);
    expect(r.request.turn?.chatBody).toEqual({ messages: chat });
  });

  const previous: StoredResponse = {
    json: '{}',
    messages: [
      { role: 'system', content: 'Old rules.' },
      { role: 'user', content: 'First question' },
    ],
    outputText: ' the quick',
  };

  it.each([
    [
      'keeps the stored instructions when none are given',
      { input: 'Second question' },
      [
        { role: 'system', content: 'Old rules.' },
        { role: 'user', content: 'First question' },
        { role: 'assistant', content: ' the quick' },
        { role: 'user', content: 'Second question' },
      ],
    ],
    [
      'replaces the stored instructions with new ones',
      { input: 'Second question', instructions: 'New rules.' },
      [
        { role: 'system', content: 'New rules.' },
        { role: 'user', content: 'First question' },
        { role: 'assistant', content: ' the quick' },
        { role: 'user', content: 'Second question' },
      ],
    ],
  ])('continues the previous turn: %s', (_name, body, chat) => {
    const r = responsesGeneration(parse(body), previous);
    if (!r.ok) throw new Error(r.error);
    expect(r.request.turn?.messages).toEqual(chat);
    expect(r.request.prompts).toEqual([chatText(chat)]);
  });

  it('rejects an empty conversation, accepts empty input after a previous turn', () => {
    expect(responsesGeneration(parse({ input: [] }), undefined)).toEqual({
      ok: false,
      error: 'input must not be empty',
    });
    expect(responsesGeneration(parse({ input: [] }), previous).ok).toBe(true);
  });
});

describe('ResponseStore', () => {
  const entry = (n: number): StoredResponse => ({ json: `{"n":${n}}`, messages: [], outputText: '' });

  it('drops the oldest response beyond its capacity; storing again makes an entry the newest', () => {
    const store = new ResponseStore(2);
    store.put('a', entry(1));
    store.put('b', entry(2));
    store.put('a', entry(3));
    store.put('c', entry(4));
    expect([store.has('a'), store.has('b'), store.has('c')]).toEqual([true, false, true]);
    expect(store.get('a')?.json).toBe('{"n":3}');
    expect(store.size).toBe(2);
  });

  it('capacity 0 stores nothing; a bad capacity throws', () => {
    const store = new ResponseStore(0);
    store.put('a', entry(1));
    expect(store.size).toBe(0);
    expect(() => new ResponseStore(-1)).toThrow(RangeError);
  });
});
