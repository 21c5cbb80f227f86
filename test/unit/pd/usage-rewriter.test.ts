import { describe, expect, it } from 'vitest';
import { SseUsageRewriter } from '../../../src/pd/usage-rewriter.js';

const frame = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const token = frame({ choices: [{ text: 'a' }] });
const usage = frame({
  choices: [],
  usage: { prompt_tokens: 100, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 100 } },
});

function run(rw: SseUsageRewriter, chunks: string[]): string {
  let out = '';
  chunks.forEach((c, i) => {
    const buf = Buffer.from(c);
    const r = rw.transform(buf, i === chunks.length - 1);
    out += (r ?? buf).toString();
  });
  return out;
}

describe('SseUsageRewriter', () => {
  it('passes frames without usage through untouched (undefined = no rewrite)', () => {
    const rw = new SseUsageRewriter(() => 7);
    expect(rw.transform(Buffer.from(token), false)).toBeUndefined();
  });

  it("replaces the decode worker's cached_tokens with the prefill worker's", () => {
    const out = run(new SseUsageRewriter(() => 32), [token, usage, 'data: [DONE]\n\n']);
    expect(out).toContain('"cached_tokens":32');
    expect(out).not.toContain('"cached_tokens":100');
    expect(out.endsWith('data: [DONE]\n\n')).toBe(true);
  });

  it("rewrites a /v1/responses stream's response.completed event, keeping its event line", () => {
    const delta = `event: response.output_text.delta\ndata: ${JSON.stringify({ type: 'response.output_text.delta', delta: 'a' })}\n\n`;
    const completed = `event: response.completed\ndata: ${JSON.stringify({
      type: 'response.completed',
      response: { id: 'resp_1', usage: { input_tokens: 100, input_tokens_details: { cached_tokens: 100 } } },
    })}\n\n`;
    const rw = new SseUsageRewriter(() => 32);
    expect(rw.transform(Buffer.from(delta), false)).toBeUndefined();
    const out = run(rw, [completed.slice(0, 30), completed.slice(30)]);
    expect(out.startsWith('event: response.completed\ndata: {')).toBe(true);
    expect(JSON.parse(out.slice(out.indexOf('data: ') + 6)).response.usage.input_tokens_details).toEqual({
      cached_tokens: 32,
    });
  });

  it('removes cached_tokens when the prefill worker reported none', () => {
    const out = run(new SseUsageRewriter(() => undefined), [usage, 'data: [DONE]\n\n']);
    expect(out).toContain('"prompt_tokens_details":{}');
  });

  it.each([1, 5, 17, 40, 77])(
    'rewrites a usage frame split across chunks at byte %i, without losing bytes',
    (at) => {
      const whole = token + usage + 'data: [DONE]\n\n';
      const cut = token.length + at;
      const out = run(new SseUsageRewriter(() => 9), [whole.slice(0, cut), whole.slice(cut)]);
      expect(out).toBe(
        token + usage.replace('"cached_tokens":100', '"cached_tokens":9') + 'data: [DONE]\n\n',
      );
    },
  );

  it('never splits a multi-byte character', () => {
    const text = frame({ choices: [{ text: 'héllo 🌍' }] });
    const bytes = Buffer.from(text + usage);
    const rw = new SseUsageRewriter(() => 1);
    const parts: Buffer[] = [];
    for (let i = 0; i < bytes.length; i += 3) {
      const c = bytes.subarray(i, i + 3);
      parts.push(rw.transform(c, i + 3 >= bytes.length) ?? c);
    }
    const out = Buffer.concat(parts).toString('utf8');
    expect(out).toContain('héllo 🌍');
    expect(out).toContain('"cached_tokens":1');
  });
});
