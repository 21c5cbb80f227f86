import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;
const config = JSON.parse(readFileSync(`${DIR}/tokenizer_config.json`, 'utf8')) as Record<string, unknown>;

/**
 * transformers renders with `tools=None, documents=None` when the request has none (render_jinja_template:
 * `compiled_template.render(messages=..., tools=tool_schemas, documents=documents, ...)`), so a template's
 * `tools is not none` / `documents is none` tests see None. Jinja2 output of this template for a
 * tool-less, document-less chat: "<|begin_of_text|>[no docs]<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>".
 */
const template =
  '{{- bos_token }}{%- if tools is not none %}[TOOLS]{{ tools | tojson }}[/TOOLS]{%- endif %}' +
  '{%- if documents is none %}[no docs]{%- endif %}' +
  "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{%- endfor %}";

describe('template variables transformers always passes', () => {
  it('renders `tools is not none` and `documents is none` as Jinja2 does with None', () => {
    const tok = new HfTokenizer(json, { ...config, chat_template: template });
    const r = tok.renderChat([{ role: 'user', content: 'hi' }], { addGenerationPrompt: false });
    expect(r).toEqual({
      ok: true,
      text: '<|begin_of_text|>[no docs]<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>',
    });
  });
});
