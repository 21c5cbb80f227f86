/**
 * Vision chats through a real Envoy 1.40 with the default policy: each conversation is about one
 * large inline image, and its turns are short questions. vLLM spends one prompt token per 28 x 28
 * block of the image (a 2800 x 2800 screenshot: 10,000 tokens), prefilled once and cached; the text
 * around it is a few dozen tokens. The routing text weighs the image as those tokens
 * (request/media-tokens.ts), so the cost model prices a turn's cached image as the prefill it saves
 * and keeps each conversation on the worker that holds its image while the fleet is busy with the
 * others; counted as the few characters of its key, the image was worth nothing and turns followed
 * the momentary load. The simulators give the image the same placeholder tokens (sim-tokenizer.ts).
 * Every load is back to 0 after the test.
 */
import { describe, expect, it } from 'vitest';
import {
  decidedWorker,
  expectFollowUpsCached,
  movedFollowUps,
  sessionStack,
  type SessionTurn,
} from '../support/session-stack.js';
import { metricsText } from '../support/router-fixture.js';
import { pngDataUrl } from '../support/image-data-url.js';

const stack = sessionStack();

const SESSIONS = 8;
const TURNS = 4;

async function ask(messages: unknown[], question: string): Promise<SessionTurn> {
  const res = await fetch(`${stack().url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages, max_tokens: 6 }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
  messages.push({ role: 'assistant', content: body.choices[0]?.message.content ?? '' });
  return { worker: decidedWorker(res), marker: question };
}

/** One conversation about its own screenshot: TURNS short questions, one after the other. */
async function session(s: number): Promise<SessionTurn[]> {
  const image = pngDataUrl(2800, 2800, `screenshot ${s}`);
  const messages: unknown[] = [];
  const turns: SessionTurn[] = [];
  for (let t = 0; t < TURNS; t++) {
    const question = `Session ${s}, question ${t}: what does the dialog in the corner say?`;
    messages.push({
      role: 'user',
      content:
        t === 0
          ? [
              { type: 'image_url', image_url: { url: image } },
              { type: 'text', text: question },
            ]
          : question,
    });
    turns.push(await ask(messages, question));
  }
  return turns;
}

describe('vision chats: an image weighs the tokens vLLM spends on it', () => {
  it('keeps each conversation on the worker that holds its image, with the image cached', async () => {
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, (_, s) => session(s)));
    for (const turns of sessions) expect(turns[0]!.worker).not.toBe('');
    expect(movedFollowUps(sessions)).toEqual([]);
    // The conversations used the fleet (the first turns spread), and every follow-up found its
    // image cached where it ran: the simulator's own report, over 90% of the prompt.
    expect(new Set(sessions.map((t) => t[0]!.worker)).size).toBeGreaterThanOrEqual(3);
    // Every request carried its chat's screenshot, sized from its header: 10,000 tokens each.
    const metrics = await metricsText(stack().router);
    expect(metrics).toContain(`vllm_router_media_parts_total{size="read"} ${SESSIONS * TURNS}`);
    expect(metrics).toContain(`vllm_router_media_tokens_total ${SESSIONS * TURNS * 10_000}`);
    expectFollowUpsCached(stack(), sessions, 10_000);
  });
});
