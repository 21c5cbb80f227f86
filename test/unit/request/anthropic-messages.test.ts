import { describe, expect, it } from 'vitest';
import { anthropicChatMessages, anthropicChatTools } from '../../../src/request/anthropic-messages.js';
import { chatPromptText } from '../../../src/request/prompt-text.js';
import { inferenceKind, parseInferenceRequest } from '../../../src/request/inference-request.js';
import { pythonJsonDumps } from '../../../src/request/python-json.js';
import { RouterError } from '../../../src/request/router-error.js';
import { PieceText } from '../../../src/util/piece-text.js';

const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const user = (content: unknown) => ({ role: 'user', content });

// Expected values follow vllm/entrypoints/anthropic/serving.py's conversion to a chat request.
describe('anthropicChatMessages', () => {
  it.each([
    ['a string content is kept', { messages: [user('hi')] }, [{ role: 'user', content: 'hi' }]],
    [
      'a top-level system string comes first, as the system message',
      { system: 'be brief', messages: [user('hi')] },
      [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hi' },
      ],
    ],
    [
      "system text blocks are concatenated, Claude Code's billing header left out, system messages appended",
      {
        system: [
          { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.3; cch=9f8e7d;' },
          { type: 'text', text: 'You are Claude Code. ' },
          { type: 'text', text: 'Be careful.', cache_control: { type: 'ephemeral' } },
          { type: 'text', text: '' },
        ],
        messages: [{ role: 'system', content: [{ type: 'text', text: ' Also this.' }] }, user('hi')],
      },
      [
        { role: 'system', content: 'You are Claude Code. Be careful. Also this.' },
        { role: 'user', content: 'hi' },
      ],
    ],
    [
      'one text block becomes a string content, several stay text parts, an image becomes image_url',
      {
        messages: [
          user([{ type: 'text', text: 'one' }]),
          {
            role: 'assistant',
            content: [
              { type: 'text', text: 'a' },
              { type: 'text', text: 'b' },
            ],
          },
          user([
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'QUJD' } },
            { type: 'text', text: 'what is it?' },
          ]),
          user([{ type: 'image', source: { type: 'url', url: 'https://x/y.png' } }]),
        ],
      },
      [
        { role: 'user', content: 'one' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: 'data:image/png;base64,QUJD' } },
            { type: 'text', text: 'what is it?' },
          ],
        },
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/y.png' } }] },
      ],
    ],
    [
      'tool_use becomes a tool call (Python json.dumps arguments), thinking the reasoning',
      {
        messages: [
          user('list files'),
          {
            role: 'assistant',
            content: [
              { type: 'thinking', thinking: 'I should look.', signature: 'sig' },
              { type: 'redacted_thinking', data: 'xyz' },
              { type: 'text', text: 'Looking.' },
              { type: 'tool_use', id: 'toolu_1', name: 'ls', input: { path: '/src', all: true, n: 0.5 } },
            ],
          },
        ],
      },
      [
        { role: 'user', content: 'list files' },
        {
          role: 'assistant',
          reasoning: 'I should look.',
          tool_calls: [
            {
              id: 'toolu_1',
              type: 'function',
              function: { name: 'ls', arguments: '{"path": "/src", "all": true, "n": 0.5}' },
            },
          ],
          content: 'Looking.',
        },
      ],
    ],
    [
      "a user's tool results become tool messages before it; a user message left empty is dropped",
      {
        messages: [
          user([
            { type: 'tool_result', tool_use_id: 'toolu_1', content: 'a.ts\nb.ts' },
            {
              type: 'tool_result',
              tool_use_id: 'toolu_2',
              content: [
                { type: 'text', text: 'line 1' },
                { type: 'text', text: 'line 2' },
                { type: 'image', source: { type: 'url', url: 'https://x/s.png' } },
                { type: 'tool_reference', tool_name: 'grep' },
              ],
            },
          ]),
          user([
            { type: 'tool_result', tool_use_id: 'toolu_3', content: 'ok' },
            { type: 'text', text: 'now fix it' },
          ]),
        ],
      },
      [
        { role: 'tool', tool_call_id: 'toolu_1', content: 'a.ts\nb.ts' },
        { role: 'tool', tool_call_id: 'toolu_2', content: 'line 1\nline 2' },
        { role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x/s.png' } }] },
        { role: 'tool', tool_call_id: 'toolu_2', content: [{ type: 'tool_reference', name: 'grep' }] },
        { role: 'tool', tool_call_id: 'toolu_3', content: 'ok' },
        { role: 'user', content: 'now fix it' },
      ],
    ],
    [
      "an assistant's tool result is a text part; Claude Code's ctx and msg roles are user",
      {
        messages: [
          { role: 'ctx', content: 'context' },
          { role: 'msg', content: 'question' },
          { role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }] },
        ],
      },
      [
        { role: 'user', content: 'context' },
        { role: 'user', content: 'question' },
        { role: 'assistant', content: 'Tool result: r' },
      ],
    ],
  ])('%s', (_name, body, expected) => {
    expect(anthropicChatMessages(body)).toEqual(expected);
  });

  it.each([
    ['no messages', {}],
    ['empty messages', { messages: [] }],
    ['a message that is not an object', { messages: ['hi'] }],
    ['a role vLLM refuses', { messages: [{ role: 'tool', content: 'x' }] }],
    ['content of the wrong type', { messages: [user(3)] }],
    ['a block without a type', { messages: [user([{ text: 'x' }])] }],
    ['a system of the wrong type', { system: 5, messages: [user('x')] }],
  ])('%s: undefined', (_name, body) => {
    expect(anthropicChatMessages(body)).toBeUndefined();
  });

  it('keeps long texts in pieces, system parts joined without copying them', () => {
    const long = new PieceText(['a'.repeat(40_000), 'b'.repeat(40_000)]);
    const out = anthropicChatMessages({
      system: [
        { type: 'text', text: 'head ' },
        { type: 'text', text: long },
      ],
      messages: [user([{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'text', text: long }] }])],
    })!;
    expect(out[0]!.content).toBeInstanceOf(PieceText);
    expect((out[0]!.content as PieceText).toString()).toBe(`head ${long.toString()}`);
    expect(out[1]!.content).toBeInstanceOf(PieceText);
    expect((out[1]!.content as PieceText).toString()).toBe(long.toString());
  });
});

describe('anthropicChatTools', () => {
  it('turns tools into chat functions, parameters of type object by default', () => {
    expect(
      anthropicChatTools([
        { name: 'ls', description: 'List', input_schema: { properties: { p: { type: 'string' } } } },
        { name: 'x', input_schema: { type: 'object', properties: {} }, cache_control: { type: 'ephemeral' } },
        { description: 'no name' },
      ]),
    ).toEqual([
      {
        type: 'function',
        function: {
          name: 'ls',
          description: 'List',
          parameters: { properties: { p: { type: 'string' } }, type: 'object' },
        },
      },
      { type: 'function', function: { name: 'x', parameters: { type: 'object', properties: {} } } },
    ]);
    expect(anthropicChatTools(undefined)).toBeUndefined();
  });
});

describe('pythonJsonDumps', () => {
  it.each([
    [{ a: 1, b: [true, null, 'x'] }, '{"a": 1, "b": [true, null, "x"]}'],
    [{ s: 'é"\\\n\t\u0001\u007f😀' }, '{"s": "\\u00e9\\"\\\\\\n\\t\\u0001\\u007f\\ud83d\\ude00"}'],
    [[0.5, -2.5e-5, 1e-7, 1.5e300, 123.25, 42], '[0.5, -2.5e-05, 1e-07, 1.5e+300, 123.25, 42]'],
    [{}, '{}'],
    [[], '[]'],
  ])('%j -> %s', (value, expected) => {
    expect(pythonJsonDumps(value)).toBe(expected);
  });
});

describe('a /v1/messages request', () => {
  it('is an inference kind of its own; count_tokens is not', () => {
    expect(inferenceKind('POST', '/v1/messages')).toBe('messages');
    expect(inferenceKind('POST', '/v1/messages?beta=true')).toBe('messages');
    expect(inferenceKind('POST', '/v1/messages/count_tokens')).toBeUndefined();
    expect(inferenceKind('GET', '/v1/messages')).toBeUndefined();
  });

  it('routes on the text of the chat conversation it stands for, whatever the billing header', () => {
    const body = (hash: string) => ({
      model: 'm',
      max_tokens: 64,
      stream: true,
      system: [
        { type: 'text', text: `x-anthropic-billing-header: cc_version=2.1; cch=${hash};` },
        { type: 'text', text: 'You are a coding agent.' },
      ],
      messages: [user('fix the bug')],
      tools: [{ name: 'ls', input_schema: { type: 'object' } }],
      cache_salt: 'ignored by vLLM here',
      priority: 3,
    });
    const a = parseInferenceRequest('messages', 'application/json', json(body('aaaa')));
    const b = parseInferenceRequest('messages', 'application/json', json(body('bbbb')));
    const chat = chatPromptText(
      [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'fix the bug' },
      ],
      { tools: [{ type: 'function', function: { name: 'ls', parameters: { type: 'object' } } }] },
    );
    expect(a.text).toBe(chat);
    expect(b.text).toBe(chat);
    expect(a).toMatchObject({ kind: 'messages', model: 'm', stream: true, outputTokens: 64 });
    expect(a.promptBody).toEqual({
      messages: [
        { role: 'system', content: 'You are a coding agent.' },
        { role: 'user', content: 'fix the bug' },
      ],
      tools: [{ type: 'function', function: { name: 'ls', parameters: { type: 'object' } } }],
    });
  });

  it('a malformed conversation is a 400 naming what Anthropic bodies hold', () => {
    const err = (() => {
      try {
        parseInferenceRequest('messages', undefined, json({ model: 'm', max_tokens: 1, messages: [] }));
      } catch (e) {
        return e;
      }
      return undefined;
    })();
    expect(err).toBeInstanceOf(RouterError);
    expect(err).toMatchObject({ code: 'invalid_messages', status: 400 });
    expect((err as RouterError).message).toContain('"system"');
  });
});

describe('RouterError.toAnthropicJSON', () => {
  it.each([
    [400, 'invalid_request_error'],
    [413, 'request_too_large'],
    [429, 'rate_limit_error'],
    [502, 'api_error'],
    [503, 'overloaded_error'],
    [504, 'timeout_error'],
  ])('status %d is %s', (status, type) => {
    const e = new RouterError('no_workers', status, 'why');
    expect(e.toAnthropicJSON()).toEqual({
      type: 'error',
      error: { type, message: 'why', code: 'no_workers' },
    });
  });
});
