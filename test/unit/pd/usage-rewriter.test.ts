import { describe, expect, it } from 'vitest';
import { JsonUsageRewriter, MAX_HELD_FRAME_BYTES, SseUsageRewriter } from '../../../src/pd/usage-rewriter.js';

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

describe('SseUsageRewriter: a frame too long to hold', () => {
  it('never holds more than its cap of one unended data line, and the stream reaches the client whole', () => {
    // A worker (or a hostile upstream) sending one huge `data:` line without a newline.
    const piece = Buffer.alloc(64 * 1024, 'x');
    const pieces = Math.ceil((MAX_HELD_FRAME_BYTES * 1.25) / piece.length);
    const rw = new SseUsageRewriter(() => 3);
    let inBytes = 0;
    let outBytes = 0;
    let mostHeld = 0;
    const out: Buffer[] = [];
    const send = (c: Buffer, eos: boolean) => {
      const r = rw.transform(c, eos) ?? c;
      inBytes += c.length;
      outBytes += r.length;
      mostHeld = Math.max(mostHeld, inBytes - outBytes);
      out.push(r);
    };
    send(Buffer.from('data: {"choices":[{"text":"'), false);
    for (let i = 0; i < pieces; i++) send(piece, false);
    send(Buffer.from('"}]}\n\n' + usage), false);
    send(Buffer.from('data: [DONE]\n\n'), true);
    expect(mostHeld).toBeLessThanOrEqual(MAX_HELD_FRAME_BYTES);
    const text = Buffer.concat(out).toString();
    expect(text.length).toBe(inBytes - usage.length + usage.replace('100}', '3}').length);
    expect(
      text.endsWith(usage.replace('"cached_tokens":100', '"cached_tokens":3') + 'data: [DONE]\n\n'),
    ).toBe(true);
  });

  it('with a cap below one frame, passes that frame on and rewrites the usage after it, wherever the chunks are cut', () => {
    const big = frame({ choices: [{ text: 'y'.repeat(300) }] });
    const whole = token + big + usage + 'data: [DONE]\n\n';
    const expected =
      token + big + usage.replace('"cached_tokens":100', '"cached_tokens":5') + 'data: [DONE]\n\n';
    for (let cut = 1; cut < whole.length; cut++) {
      // Three pieces: cut at `cut`, the rest halved, so frame ends straddle chunks somewhere.
      const mid = cut + Math.ceil((whole.length - cut) / 2);
      const parts = [whole.slice(0, cut), whole.slice(cut, mid), whole.slice(mid)].filter((p) => p);
      expect(run(new SseUsageRewriter(() => 5, 200), parts), `cut at ${cut}`).toBe(expected);
    }
  });
});

/** What the client receives: each chunk's replacement (empty while held) or the chunk itself. */
function forward(rw: JsonUsageRewriter, chunks: readonly Buffer[]): { out: Buffer; held: number } {
  let held = 0;
  const parts = chunks.map((c, i) => {
    const r = rw.transform(c, i === chunks.length - 1);
    if (r !== undefined && r.length === 0) held++;
    return r ?? c;
  });
  return { out: Buffer.concat(parts), held };
}

function pieces(text: string, size: number): Buffer[] {
  const bytes = Buffer.from(text);
  const out: Buffer[] = [];
  for (let i = 0; i < bytes.length; i += size) out.push(bytes.subarray(i, i + size));
  return out;
}

describe('JsonUsageRewriter (non-streamed answers)', () => {
  const chat = JSON.stringify({
    id: 'chatcmpl-1',
    choices: [{ index: 0, message: { role: 'assistant', content: 'héllo 🌍 "usage"' } }],
    usage: { prompt_tokens: 100, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 100 } },
  });

  it("holds the body's chunks and answers its end with the prefill worker's count", () => {
    const { out, held } = forward(new JsonUsageRewriter(() => 32), pieces(chat, 7));
    const body = JSON.parse(out.toString('utf8'));
    expect(body.usage.prompt_tokens_details).toEqual({ cached_tokens: 32 });
    expect(body.usage.prompt_tokens).toBe(100);
    expect(body.choices[0].message.content).toBe('héllo 🌍 "usage"');
    expect(held).toBe(pieces(chat, 7).length - 1);
  });

  it("rewrites a /v1/responses body's input_tokens_details", () => {
    const resp = JSON.stringify({
      id: 'resp_1',
      output: [],
      usage: { input_tokens: 100, input_tokens_details: { cached_tokens: 100 }, output_tokens: 3 },
    });
    const { out } = forward(new JsonUsageRewriter(() => 5), [Buffer.from(resp), Buffer.alloc(0)]);
    expect(JSON.parse(out.toString()).usage.input_tokens_details).toEqual({ cached_tokens: 5 });
  });

  it("a Responses answer of several turns (gpt-oss's built-in tools): only the first turn's count is the prefill worker's", () => {
    // vLLM's HarmonyContext sums each turn's cached tokens; the decode worker ran the second turn
    // alone and found 128 of its prompt in its own cache.
    const usageOf = (turn0: number) => ({
      input_tokens: 240,
      input_tokens_details: {
        cached_tokens: turn0 + 128,
        input_tokens_per_turn: [100, 140],
        cached_tokens_per_turn: [turn0, 128],
      },
      output_tokens: 30,
    });
    const resp = JSON.stringify({ id: 'resp_1', output: [], usage: usageOf(99) });
    const { out } = forward(new JsonUsageRewriter(() => 20), [Buffer.from(resp), Buffer.alloc(0)]);
    expect(JSON.parse(out.toString()).usage).toEqual(usageOf(20));
    const completed = `event: response.completed\ndata: ${JSON.stringify({
      type: 'response.completed',
      response: { id: 'resp_1', usage: usageOf(99) },
    })}\n\n`;
    const streamed = run(new SseUsageRewriter(() => 20), [completed]);
    expect(JSON.parse(streamed.split('data: ')[1]!).response.usage).toEqual(usageOf(20));
  });

  it('removes cached_tokens when the prefill worker reported none', () => {
    const { out } = forward(new JsonUsageRewriter(() => undefined), [Buffer.from(chat)]);
    expect(JSON.parse(out.toString()).usage.prompt_tokens_details).toEqual({});
  });

  it.each([
    ['not JSON', '<html>bad gateway</html>'],
    ['JSON without usage', '{"object":"list","data":[]}'],
    ['a cut JSON body', chat.slice(0, chat.length - 5)],
  ])('gives back %s byte for byte', (_what, text) => {
    const { out } = forward(new JsonUsageRewriter(() => 1), pieces(text, 5));
    expect(out.toString('utf8')).toBe(text);
  });

  it('past its cap, passes everything held and the rest on unchanged, and holds nothing more', () => {
    const big = JSON.stringify({ choices: [{ text: 'x'.repeat(200) }], usage: JSON.parse(chat).usage });
    const rw = new JsonUsageRewriter(() => 1, 64);
    const chunks = pieces(big, 30);
    const replies = chunks.map((c, i) => rw.transform(c, i === chunks.length - 1));
    // Two chunks (60 bytes) are held; the third passes the cap and carries them on with it.
    expect(replies.slice(0, 2).map((r) => r?.length)).toEqual([0, 0]);
    expect(replies[2]?.toString()).toBe(big.slice(0, 90));
    expect(replies.slice(3).every((r) => r === undefined)).toBe(true);
    const out = Buffer.concat(replies.map((r, i) => r ?? (chunks[i] as Buffer)));
    expect(out.toString()).toBe(big); // the decode worker's count: unchanged, never truncated
  });

  it('keeps its own copy of a held chunk (the message buffer it came in may be reused)', () => {
    const first = Buffer.from(chat.slice(0, 20));
    const rw = new JsonUsageRewriter(() => 2);
    expect(rw.transform(first, false)?.length).toBe(0);
    const original = first.toString();
    first.fill(0);
    const out = rw.transform(Buffer.from(chat.slice(20)), true) as Buffer;
    expect(out.toString().startsWith(original)).toBe(true);
    expect(JSON.parse(out.toString()).usage.prompt_tokens_details.cached_tokens).toBe(2);
  });
});
