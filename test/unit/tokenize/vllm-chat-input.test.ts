import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { detectContentFormat, vllmChatInput } from '../../../src/tokenize/vllm-chat-input.js';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';

const call = (args: unknown) => ({
  id: 'c1',
  type: 'function',
  function: { name: 'read_file', arguments: args },
});
const assistant = (extra: Record<string, unknown>) => ({ role: 'assistant', content: null, ...extra });

describe('vllmChatInput: what vLLM hands the chat template', () => {
  it('dumps each chat tool as its pydantic model does: declared fields in order, null when absent, extras after', () => {
    const tools = [
      { type: 'function', function: { name: 'ls' } },
      {
        function: { strict: true, parameters: { type: 'object' }, name: 'read', description: 'Reads.' },
        type: 'function',
        cache_control: { type: 'ephemeral' },
      },
      { type: 'function', name: 'flat', parameters: {} }, // the Responses API's shape: left alone
    ];
    const out = vllmChatInput([{ role: 'user', content: 'q' }], tools)!;
    expect(JSON.stringify(out.tools)).toBe(
      JSON.stringify([
        { type: 'function', function: { name: 'ls', description: null, parameters: null } },
        {
          type: 'function',
          function: { name: 'read', description: 'Reads.', parameters: { type: 'object' }, strict: true },
          cache_control: { type: 'ephemeral' },
        },
        { type: 'function', name: 'flat', parameters: {} },
      ]),
    );
  });

  it("parses an assistant tool call's arguments; empty or missing ones become {}; an empty list goes", () => {
    const messages = [
      { role: 'user', content: 'q' },
      assistant({
        tool_calls: [call('{"path":"a.ts","n":2}'), call(''), call(undefined), call({ kept: 1 })],
      }),
      assistant({ content: 'done', tool_calls: [] }),
      { role: 'tool', tool_call_id: 'c1', content: '{"not":"parsed"}' },
    ];
    const before = JSON.stringify(messages);
    const out = vllmChatInput(messages, undefined)!;
    expect(out.messages[1]).toEqual(
      assistant({ tool_calls: [call({ path: 'a.ts', n: 2 }), call({}), call({}), call({ kept: 1 })] }),
    );
    expect(out.messages[2]).toEqual({ role: 'assistant', content: 'done' });
    expect(out.messages[0]).toBe(messages[0]);
    expect(out.messages[3]).toBe(messages[3]);
    expect(JSON.stringify(messages)).toBe(before); // the request's own objects are not changed
  });

  it('hands a conversation with nothing to change back as it is', () => {
    const messages = [{ role: 'user', content: 'q' }, assistant({ tool_calls: [call({ path: 'a' })] })];
    expect(vllmChatInput(messages, undefined)!.messages).toBe(messages);
  });

  it('gives the reasoning under both names, whichever the client sent', () => {
    const out = vllmChatInput(
      [assistant({ content: 'a', reasoning: 'r1' }), assistant({ content: 'b', reasoning_content: 'r2' })],
      undefined,
    )!;
    expect(out.messages).toEqual([
      assistant({ content: 'a', reasoning: 'r1', reasoning_content: 'r1' }),
      assistant({ content: 'b', reasoning: 'r2', reasoning_content: 'r2' }),
    ]);
  });

  it('refuses arguments that are not JSON (vLLM answers 400): the router falls back', () => {
    expect(vllmChatInput([assistant({ tool_calls: [call('{"path":')] })], undefined)).toBeUndefined();
    expect(vllmChatInput([assistant({ tool_calls: [call(5)] })], undefined)).toBeUndefined();
  });
});

describe('content format (vLLM\'s "auto": does the template loop over a message\'s content?)', () => {
  it.each([
    ["{{ message['content'] }}", 'string'],
    ['{%- if message.content is string %}{{ message.content }}{%- endif %}', 'string'],
    ["{%- for part in message['content'] %}{{ part['text'] }}{%- endfor %}", 'openai'],
    ['{% for item in msg.content %}{{ item.text }}{% endfor %}', 'openai'],
    [
      "{%- for content in message['content'] | selectattr('type', 'equalto', 'image') %}x{%- endfor %}",
      'openai',
    ],
    ['{%- for message in messages %}{{ message.content }}{%- endfor %}', 'string'],
  ])('%s -> %s', (template, format) => {
    expect(detectContentFormat(template)).toBe(format);
  });

  it('hands a string template joined text parts, an OpenAI-format template a list of text parts', () => {
    const messages = [
      { role: 'system', content: 'S' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b', extra: 1 },
        ],
      },
      { role: 'assistant', content: null, tool_calls: [call({})] },
    ];
    expect(vllmChatInput(messages, undefined, 'string')!.messages).toEqual([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'a\nb' },
      { role: 'assistant', content: '', tool_calls: [call({})] },
    ]);
    expect(vllmChatInput(messages, undefined, 'openai')!.messages).toEqual([
      { role: 'system', content: [{ type: 'text', text: 'S' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
      { role: 'assistant', content: [], tool_calls: [call({})] },
    ]);
    // The fixture's template loops over the content: OpenAI format.
    const dir = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
    expect(HfTokenizer.load(dir).contentFormat).toBe('openai');
  });
});

describe('the exact tokenizer renders tools and tool calls as vLLM does', () => {
  // A Qwen2.5-style template's tool parts: `tool | tojson`, and a call's arguments as `tojson` when
  // they are an object (which vLLM makes them), as given otherwise.
  const TEMPLATE =
    '{%- if tools %}{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}{%- endif %}' +
    '{%- for m in messages %}<{{ m.role }}>{{ m.content if m.content else "" }}' +
    '{%- for c in m.tool_calls or [] %}[{{ c.function.name }} ' +
    '{%- if c.function.arguments is string %}{{ c.function.arguments }}{%- else %}{{ c.function.arguments | tojson }}{%- endif %}]' +
    '{%- endfor %}{%- endfor %}';
  const dir = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
  const tok = new HfTokenizer(
    JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')) as Record<string, unknown>,
    {
      chat_template: TEMPLATE,
    },
  );
  const rt = new RequestTokenizer(new Map([['m', tok]]));

  it('writes what Python renders (json.dumps of the dumped tool and of the parsed arguments)', () => {
    const body = {
      tools: [{ type: 'function', function: { name: 'read_file', parameters: { type: 'object' } } }],
      messages: [
        { role: 'user', content: 'Fix it.' },
        assistant({ tool_calls: [call('{"path":"src/a.ts"}')] }),
        { role: 'tool', content: 'x = 1' },
      ],
      add_generation_prompt: false,
    };
    // What Jinja2 (transformers' environment and tojson: Python's json.dumps, ", " and ": ") writes
    // from vLLM's input for this body: checked with Python's jinja2 3.1.6.
    const python =
      '{"type": "function", "function": {"name": "read_file", "description": null, "parameters": {"type": "object"}}}' +
      '<user>Fix it.<assistant>[read_file{"path": "src/a.ts"}]<tool>x = 1';
    const r = rt.tokenize('m', body);
    expect(r.ok).toBe(true);
    if (r.ok) expect(tok.decode(Array.from(r.ids))).toBe(python);
  });

  it('writes text parts joined by a newline for a template that reads content as a string', () => {
    // Jinja2 renders "<user>a\nb" from vLLM's input (content "a\nb"); the parts as given would not.
    const body = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'a' },
            { type: 'text', text: 'b' },
          ],
        },
      ],
    };
    const r = rt.tokenize('m', body);
    expect(r.ok).toBe(true);
    if (r.ok) expect(tok.decode(Array.from(r.ids))).toBe('<user>a\nb');
  });
});
