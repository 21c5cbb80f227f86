/**
 * Routing text: what the model will actually see, rendered deterministically, so requests that
 * share a prompt prefix share a text prefix regardless of JSON key order, sampling parameters or the
 * `stream` flag.
 *
 *  - /v1/completions: `prompt` as a string; an array of strings joined by '\n'; token ids rendered as
 *    space-separated decimal numbers (an array of arrays is joined by '\n').
 *  - /v1/chat/completions: each message in order as `<role>\n<text>\n`, where text is a string
 *    content or the concatenation of its `text` parts (non-text parts contribute their type name so
 *    an image does not silently vanish from the key).
 *
 * Returns undefined when the field is missing or of the wrong type (the caller reports a 400).
 */
export function completionPromptText(prompt: unknown): string | undefined {
  if (typeof prompt === 'string') return prompt;
  if (!Array.isArray(prompt) || prompt.length === 0) return undefined;
  if (prompt.every((p) => typeof p === 'string')) return prompt.join('\n');
  if (prompt.every(isTokenId)) return prompt.join(' ');
  if (prompt.every((p) => Array.isArray(p) && p.length > 0 && p.every(isTokenId))) {
    return (prompt as number[][]).map((ids) => ids.join(' ')).join('\n');
  }
  return undefined;
}

function isTokenId(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

export function chatPromptText(messages: unknown): string | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  let out = '';
  for (const m of messages) {
    if (typeof m !== 'object' || m === null || Array.isArray(m)) return undefined;
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (typeof role !== 'string') return undefined;
    const text = contentText(content);
    if (text === undefined) return undefined;
    out += `${role}\n${text}\n`;
  }
  return out;
}

function contentText(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  // Assistant messages with tool calls may carry null content.
  if (content === null || content === undefined) return '';
  if (!Array.isArray(content)) return undefined;
  let out = '';
  for (const part of content) {
    if (typeof part !== 'object' || part === null) return undefined;
    const { type, text } = part as { type?: unknown; text?: unknown };
    if (type === 'text' && typeof text === 'string') out += text;
    else if (typeof type === 'string') out += `<${type}>`;
    else return undefined;
  }
  return out;
}
