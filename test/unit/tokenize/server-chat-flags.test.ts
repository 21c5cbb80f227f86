import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../../../src/config.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';
import {
  parseServerChatFlags,
  type ServerChatFlagSettings,
} from '../../../src/tokenize/server-chat-flags.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));

/**
 * A vLLM server's own chat flags change every render of its model; the router, told them per model,
 * renders as the worker does. Golden ids: transformers' apply_chat_template on the fixture with what
 * vLLM passes under each flag, then the tokenizer without special tokens.
 */
describe("a vLLM server's chat flags, given per model", () => {
  // A template the server was started with: a default system prompt, tools by name, Qwen3's switch.
  const SERVER =
    "{{ bos_token }}{% if tools %}<|start_header_id|>tools<|end_header_id|>\n\n{% for t in tools %}{{ t.function.name }}\n{% endfor %}<|eot_id|>{% endif %}{% if messages[0].role != 'system' %}<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant.<|eot_id|>{% endif %}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}";
  const work = mkdtempSync(join(tmpdir(), 'chat-flags-'));
  const serverFile = join(work, 'server.jinja');
  writeFileSync(serverFile, SERVER);
  afterAll(() => rmSync(work, { recursive: true, force: true }));

  const messages = [{ role: 'user', content: 'Summarise the document.' }];
  const tools = [{ type: 'function', function: { name: 'ls', description: 'list files' } }];
  const QUESTION = [2, 297, 261, 3, 202, 202, 54, 283, 379, 495, 264, 511, 462, 17, 1];
  const GENERATION = [2, 68, 296, 339, 3, 202, 202];
  const THINK_OFF = [31, 87, 75, 271, 78, 33, 202, 202, 31, 18, 87, 75, 271, 78, 33, 202, 202];
  const SERVER_SYSTEM = [2, 387, 450, 3, 202, 202, 352, 88, 330, 263, 430, 374, 365, 342, 17, 1];
  const SERVER_TOOLS = [2, 87, 82, 382, 86, 3, 202, 202, 79, 86, 202, 1];
  /** The model's own template (tokenizer_config.json): the same question, no system prompt. */
  const MODEL_IDS = [0, ...QUESTION, ...GENERATION];

  const tokenizer = (flags: ServerChatFlagSettings): RequestTokenizer =>
    RequestTokenizer.load(new Map([['m', DIR]])).loadChatFlags(parseServerChatFlags(flags));
  const ids = (r: RequestTokenizer, body: Record<string, unknown>): unknown => {
    const out = r.tokenize('m', body);
    return out.ok ? Array.from(out.ids) : out;
  };

  it("--chat-template: the server's template renders every chat request of the model, those with tools too", () => {
    const r = tokenizer({ chatTemplate: [`m=${serverFile}`] });
    expect(ids(r, { messages })).toEqual([0, ...SERVER_SYSTEM, ...QUESTION, ...GENERATION]);
    expect(ids(r, { messages, tools })).toEqual([
      0,
      ...SERVER_TOOLS,
      ...SERVER_SYSTEM,
      ...QUESTION,
      ...GENERATION,
    ]);
    // Without the flag, the model's own template (what the router rendered for every request).
    expect(ids(tokenizer({}), { messages })).toEqual(MODEL_IDS);
  });

  it('--default-chat-template-kwargs: the server\'s {"enable_thinking": false} renders under the request\'s own kwargs and reasoning_effort', () => {
    const r = tokenizer({
      chatTemplate: [`m=${serverFile}`],
      defaultChatTemplateKwargs: ['m={"enable_thinking": false}'],
    });
    const thinkOff = [0, ...SERVER_SYSTEM, ...QUESTION, ...GENERATION, ...THINK_OFF];
    const thinkOn = [0, ...SERVER_SYSTEM, ...QUESTION, ...GENERATION];
    expect(ids(r, { messages })).toEqual(thinkOff);
    expect(ids(r, { messages, chat_template_kwargs: { enable_thinking: true } })).toEqual(thinkOn);
    // vLLM's merge_kwargs drops a request's null (and "auto"): the server's default stands.
    expect(ids(r, { messages, chat_template_kwargs: { enable_thinking: null } })).toEqual(thinkOff);
    // A reasoning_effort switches thinking on over the server's default (build_chat_params).
    expect(ids(r, { messages, reasoning_effort: 'high' })).toEqual(thinkOn);
    // A /v1/responses request of the model renders under the same defaults (and vLLM encodes its
    // render with the tokenizer's BOS on top).
    const json = Buffer.from(JSON.stringify({ model: 'm', input: 'Summarise the document.' }));
    const responses = parseInferenceRequest('responses', 'application/json', json).promptBody;
    expect(ids(r, responses)).toEqual([0, ...thinkOff]);
  });

  it('--chat-template-content-format string: text parts reach a template that loops over them joined as one string', () => {
    // The fixture's template loops over a list content (vLLM detects "openai"): each part trimmed.
    const parts = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Summarise' },
          { type: 'text', text: 'the document.' },
        ],
      },
    ];
    const OPENAI = [0, 2, 297, 261, 3, 202, 202, 54, 283, 379, 313, 362, 262, 511, 462, 17, 1, ...GENERATION];
    const STRING = [
      0,
      2,
      297,
      261,
      3,
      202,
      202,
      54,
      283,
      379,
      495,
      202,
      87,
      262,
      511,
      462,
      17,
      1,
      ...GENERATION,
    ];
    expect(ids(tokenizer({}), { messages: parts })).toEqual(OPENAI);
    expect(ids(tokenizer({ chatTemplateContentFormat: ['m=string'] }), { messages: parts })).toEqual(STRING);
    expect(ids(tokenizer({ chatTemplateContentFormat: ['m=auto'] }), { messages: parts })).toEqual(OPENAI);
  });

  it('--exclude-tools-when-tool-choice-none: a request with tool_choice "none" renders without its tools', () => {
    const r = tokenizer({ excludeToolsWhenToolChoiceNone: ['m'] });
    expect(ids(r, { messages, tools, tool_choice: 'none' })).toEqual(MODEL_IDS);
    expect(ids(r, { messages, tools, tool_choice: 'auto' })).not.toEqual(MODEL_IDS);
    expect(ids(r, { messages, tools })).toEqual(ids(tokenizer({}), { messages, tools }));
    // Without the flag vLLM renders the tools whatever the tool_choice.
    expect(ids(tokenizer({}), { messages, tools, tool_choice: 'none' })).not.toEqual(MODEL_IDS);
    // A /v1/responses request's tool_choice too (construct_tool_dicts).
    const json = Buffer.from(
      JSON.stringify({
        model: 'm',
        input: 'Summarise the document.',
        tools: [{ type: 'function', name: 'ls', parameters: {} }],
        tool_choice: 'none',
      }),
    );
    const responses = parseInferenceRequest('responses', 'application/json', json).promptBody;
    expect(ids(r, responses)).toEqual(ids(r, { messages, add_special_tokens: true }));
    // And a /v1/messages request's {"type": "none"} (vLLM converts it to "none").
    const anthropic = (choice: unknown) =>
      parseInferenceRequest(
        'messages',
        'application/json',
        Buffer.from(
          JSON.stringify({
            model: 'm',
            max_tokens: 8,
            messages,
            tools: [{ name: 'ls', description: 'list files', input_schema: {} }],
            tool_choice: choice,
          }),
        ),
      ).promptBody;
    expect(ids(r, anthropic({ type: 'none' }))).toEqual(MODEL_IDS);
    expect(ids(r, anthropic({ type: 'auto' }))).not.toEqual(MODEL_IDS);
  });

  it('the flags are router options named as vLLM names them; a bad one fails start-up', () => {
    const parsed = parseConfig(
      [
        '--tokenizer',
        `m=${DIR}`,
        '--chat-template',
        `m=${serverFile}`,
        '--default-chat-template-kwargs',
        'm={"enable_thinking": false, "x": 1}',
        '--chat-template-content-format',
        'm=string',
        '--exclude-tools-when-tool-choice-none',
        'm',
      ],
      {},
    );
    if (parsed.help) throw new Error('help');
    const config = parsed.config;
    expect(config.defaultChatTemplateKwargs).toEqual(['m={"enable_thinking": false, "x": 1}']);
    const specs = parseServerChatFlags(config);
    expect(specs.flags.get('m')).toEqual({
      defaultKwargs: { enable_thinking: false, x: 1 },
      contentFormat: 'string',
      excludeToolsWhenToolChoiceNone: true,
    });
    expect(() => parseConfig(['--default-chat-template-kwargs', 'm=[1]'], {})).toThrow(/JSON object/);
    expect(() => parseConfig(['--chat-template-content-format', 'm=xml'], {})).toThrow(/string\|openai/);
    expect(() => parseConfig(['--chat-template', 'nofile'], {})).toThrow(/MODEL=FILE/);
    expect(() => tokenizer({ chatTemplate: [`m=${join(work, 'missing.jinja')}`] })).toThrow(
      /--chat-template m=/,
    );
    // A flag for a model the router has no tokenizer for would change nothing: a typo, refused.
    expect(() => tokenizer({ excludeToolsWhenToolChoiceNone: ['other'] })).toThrow(/"other"/);
    expect(readFileSync(serverFile, 'utf8')).toBe(SERVER);
  });
});
