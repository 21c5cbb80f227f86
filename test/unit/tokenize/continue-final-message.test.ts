import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { HfTokenizer } from '../../../src/tokenize/hf-tokenizer.js';
import { RequestTokenizer } from '../../../src/tokenize/request-tokens.js';

const DIR = fileURLToPath(new URL('../../fixtures/tokenizer', import.meta.url));
const config = JSON.parse(readFileSync(`${DIR}/tokenizer_config.json`, 'utf8')) as Record<string, unknown>;
const json = JSON.parse(readFileSync(`${DIR}/tokenizer.json`, 'utf8')) as Record<string, unknown>;

/**
 * What transformers' apply_chat_template(continue_final_message=True) returns (vLLM passes the flag
 * through): the final message's text is its content, or for a list the LAST text part; the render is
 * cut at rindex(text.strip()) + len(text.lstrip()) when the template kept the text's trailing
 * whitespace, else + len(text.strip()).
 */
function transformersCut(rendered: string, finalText: string): string {
  const at = rendered.lastIndexOf(finalText.trim());
  if (rendered.slice(at, at + finalText.trimStart().length) === finalText) {
    return rendered.slice(0, at + finalText.trimStart().length);
  }
  return rendered.slice(0, at + finalText.trim().length);
}

describe('continue_final_message', () => {
  it('the fixture (openai content format): a request with a string final message is cut open', () => {
    const tok = HfTokenizer.load(DIR);
    expect(tok.contentFormat).toBe('openai'); // vLLM hands this template contents as part lists
    const rt = new RequestTokenizer(new Map([['m', tok]]));
    const messages = [
      { role: 'user', content: 'Say hello' },
      { role: 'assistant', content: 'Hello' },
    ];
    const r = rt.tokenize('m', { messages, add_generation_prompt: false, continue_final_message: true });
    expect(r.ok).toBe(true);
    const full = tok.renderChat(
      [
        { role: 'user', content: [{ type: 'text', text: 'Say hello' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Hello' }] },
      ],
      { addGenerationPrompt: false },
    );
    if (!r.ok || !full.ok) throw new Error('render failed');
    const want = transformersCut(full.text, 'Hello');
    expect(want.endsWith('<|end_header_id|>\n\nHello')).toBe(true);
    expect(Array.from(r.ids)).toEqual(tok.encodeUncached(want, false));
  });

  it("a template that keeps trailing whitespace keeps the final message's trailing space", () => {
    // A Qwen/ChatML-style template: content written as is, no trim.
    const chatml =
      "{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] + '<|eot_id|>' }}{%- endfor %}" +
      "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}";
    const tok = new HfTokenizer(json, { ...config, chat_template: chatml });
    expect(tok.contentFormat).toBe('string');
    const messages = [
      { role: 'user', content: 'Count' },
      { role: 'assistant', content: 'One, two, ' },
    ];
    const r = tok.renderChat(messages, { addGenerationPrompt: false, continueFinalMessage: true });
    const full = tok.renderChat(messages, { addGenerationPrompt: false });
    if (!r.ok || !full.ok) throw new Error('render failed');
    expect(r.text).toBe(transformersCut(full.text, 'One, two, '));
  });
});
