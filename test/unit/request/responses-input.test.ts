import { describe, expect, it } from 'vitest';
import { responsesMessages } from '../../../src/request/responses-input.js';
import { chatPromptText } from '../../../src/request/prompt-text.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { RouterError } from '../../../src/request/router-error.js';
import { responsesChatBody } from '../../../src/request/responses-input.js';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';
import { tokenizeBody } from '../../../src/tokenize/request-tokens.js';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const FIXTURE = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const fixtureJson = JSON.parse(readFileSync(`${FIXTURE}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
const fixtureConfig = JSON.parse(readFileSync(`${FIXTURE}/tokenizer_config.json`, 'utf8')) as Record<
  string,
  unknown
>;

const json = (v: unknown) => Buffer.from(JSON.stringify(v));

describe('responsesMessages', () => {
  it.each([
    ['a string input is one user message', { input: 'hi' }, [{ role: 'user', content: 'hi' }]],
    [
      'instructions come first, as the system message',
      { instructions: 'be brief', input: 'hi' },
      [
        { role: 'system', content: 'be brief' },
        { role: 'user', content: 'hi' },
      ],
    ],
    [
      'message items keep their role; input_text and output_text parts become text parts',
      {
        input: [
          { role: 'user', content: [{ type: 'input_text', text: 'q1' }] },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'a1' }] },
          { role: 'user', content: 'q2' },
        ],
      },
      [
        { role: 'user', content: [{ type: 'text', text: 'q1' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'a1' }] },
        { role: 'user', content: 'q2' },
      ],
    ],
    [
      'an image part stays as it is (the routing text keys its image), a reasoning item is left out',
      {
        input: [
          { type: 'reasoning', id: 'r1', summary: [] },
          { role: 'user', content: [{ type: 'input_image', image_url: 'x' }] },
        ],
      },
      [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }],
    ],
    [
      'a function call and its output become a tool call and a tool message',
      {
        input: [
          { role: 'user', content: 'weather?' },
          { type: 'function_call', call_id: 'c1', name: 'get', arguments: '{"city":"x"}' },
          { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
        ],
      },
      [
        { role: 'user', content: 'weather?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get', arguments: '{"city":"x"}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
      ],
    ],
    [
      "a function call's output given as content parts becomes a tool message of those parts",
      {
        input: [
          {
            type: 'function_call_output',
            call_id: 'c1',
            output: [
              { type: 'input_text', text: 'screen:' },
              { type: 'input_image', image_url: 'https://x/s.png' },
            ],
          },
        ],
      },
      [
        {
          role: 'tool',
          tool_call_id: 'c1',
          content: [
            { type: 'text', text: 'screen:' },
            { type: 'input_image', image_url: 'https://x/s.png' },
          ],
        },
      ],
    ],
  ])('%s', (_name, body, messages) => {
    expect(responsesMessages(body)).toEqual(messages);
  });

  it.each([
    ['no input', {}],
    ['an empty input list', { input: [] }],
    ['a number input', { input: 3 }],
    ['a message without a role', { input: [{ content: 'x' }] }],
    ['a text part without text', { input: [{ role: 'user', content: [{ type: 'input_text' }] }] }],
    ['instructions that are not a string', { instructions: 1, input: 'x' }],
    ['only reasoning items', { input: [{ type: 'reasoning' }] }],
    ['an item that is not an object', { input: ['x'] }],
  ])('%s is malformed', (_name, body) => {
    expect(responsesMessages(body)).toBeUndefined();
  });
});

describe('parseInferenceRequest: /v1/responses', () => {
  it('routes on the same text as the same conversation sent to /v1/chat/completions', () => {
    const r = parseInferenceRequest(
      'responses',
      'application/json',
      json({
        model: 'm',
        instructions: 'sys',
        input: [{ role: 'user', content: [{ type: 'input_text', text: 'q' }] }],
      }),
    );
    const chat = chatPromptText([
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'q' },
    ]);
    expect(r).toMatchObject({ kind: 'responses', model: 'm', stream: false, text: chat });
    expect(r.promptBody.messages).toEqual([
      { role: 'system', content: 'sys' },
      { role: 'user', content: [{ type: 'text', text: 'q' }] },
    ]);
    expect(r.namesFreeResponse).toBe(true);
    expect(r.previousResponseId).toBeUndefined();
  });

  it('knows the response it continues, and when the client names or does not store its response', () => {
    const r = (v: Record<string, unknown>) =>
      parseInferenceRequest('responses', undefined, json({ model: 'm', input: 'x', ...v }));
    expect(r({ previous_response_id: 'resp_1' }).previousResponseId).toBe('resp_1');
    expect(r({ request_id: 'mine' }).namesFreeResponse).toBe(false);
    expect(r({ store: false }).namesFreeResponse).toBe(false);
    expect(r({ store: true, stream: true })).toMatchObject({ namesFreeResponse: true, stream: true });
  });

  it.each([
    ['a missing input', { model: 'm' }, 'invalid_input'],
    ['a bad previous_response_id', { model: 'm', input: 'x', previous_response_id: 7 }, 'invalid_body'],
    ['a model that is not a string', { model: 7, input: 'x' }, 'missing_model'],
  ])('answers %s with a 400', (_name, body, code) => {
    let err: unknown;
    try {
      parseInferenceRequest('responses', 'application/json', json(body));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(RouterError);
    expect(err).toMatchObject({ code, status: 400 });
  });
});

describe('/v1/responses function tools in the exact tokenization', () => {
  // A template reading tools as chat tools, as tool-use templates do (Hermes: tool.function.name;
  // Qwen/Llama: tool | tojson).
  const template =
    '{%- if tools %}{%- for tool in tools %}[{{ tool.function.name }}]{{ tool | tojson }}{%- endfor %}{%- endif %}' +
    "{%- for message in messages %}{{- message['role'] + ': ' + message['content'] + '\\n' }}{%- endfor %}";

  it('renders flat function tools wrapped and dumped as vLLM hands them to the template', () => {
    const tok = new HfTokenizer(fixtureJson, { ...fixtureConfig, chat_template: template });
    const body = {
      model: 'm',
      input: 'hi',
      tool_choice: 'none',
      tools: [
        { type: 'function', name: 'get_weather', parameters: { type: 'object' } },
        { type: 'web_search_preview' },
        {
          type: 'namespace',
          name: 'crm',
          description: 'CRM',
          tools: [{ type: 'function', name: 'lookup', description: 'Find', strict: true }],
        },
      ],
    };
    const chat = responsesChatBody(body);
    const r = tokenizeBody(tok, chat);
    const tool =
      '{"type": "function", "function": {"name": "get_weather", "description": null, ' +
      '"parameters": {"type": "object"}, "strict": null, "defer_loading": null}}';
    const namespaced =
      '{"type": "function", "function": {"name": "crm__lookup", "description": "Find", ' +
      '"parameters": null, "defer_loading": null, "strict": true}}';
    const expected = tok.encode(`[get_weather]${tool}[crm__lookup]${namespaced}user: hi\n`, true);
    expect(r.ok && Array.from(r.ids)).toEqual(expected);
  });
});

describe('/v1/responses special tokens in the exact tokenization', () => {
  it('adds the BOS vLLM adds to a Responses render (its tokenize params keep add_special_tokens on)', () => {
    const tok = new HfTokenizer(fixtureJson, fixtureConfig);
    const r = tokenizeBody(tok, responsesChatBody({ model: 'm', input: 'hi' }));
    const rendered = tok.renderChat([{ role: 'user', content: 'hi' }], { addGenerationPrompt: true });
    if (!rendered.ok) throw new Error(rendered.error);
    // The fixture's template writes <|begin_of_text|> and its tokenizer adds another: two BOS, as vLLM's.
    const expected = tok.encode(rendered.text, true);
    expect(expected.slice(0, 2)).toEqual([0, 0]);
    expect(r.ok && Array.from(r.ids)).toEqual(expected);
  });
});
