/**
 * Coding-agent sessions through a real Envoy 1.40 with the default policy. Each agent brings its own
 * tools (MCP servers differ per user: here ~8,000 tokens of function definitions each), opens with the
 * same short request as the others, and every turn adds a tool call and its result. vLLM's chat
 * template renders the tools into the prompt's opening system block, so an agent's prompt is mostly
 * its tools, prefilled once and cached where it ran. The routing text carries the tools and the tool
 * calls (request/prompt-text.ts), so the cost model prices a turn's cached tools as the prefill they
 * save and keeps each agent on its worker while the fleet is busy with the others; without them every
 * agent looked like the same few dozen tokens, and turns followed the momentary load. The simulators
 * render the tools the same way (sim-tokenizer.ts). Every load is back to 0 after the test.
 */
import { describe, expect, it } from 'vitest';
import {
  decidedWorker,
  expectFollowUpsCached,
  movedFollowUps,
  sessionStack,
  type SessionTurn,
} from '../support/session-stack.js';

const stack = sessionStack();

const SESSIONS = 8;
const TURNS = 4;
/** Tools per agent, and the characters of each one's description (~8,000 tokens of tools in all). */
const TOOLS = 40;
const DESCRIPTION_CHARS = 760;

/** Agent `s`'s own tools: names and descriptions no other agent shares. */
function agentTools(s: number): unknown[] {
  return Array.from({ length: TOOLS }, (_, k) => {
    const words = Array.from({ length: 200 }, (_, w) => `s${s}t${k}w${w}`).join(' ');
    return {
      type: 'function',
      function: {
        name: `agent${s}_tool${k}`,
        description: words.slice(0, DESCRIPTION_CHARS),
        parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
      },
    };
  });
}

async function ask(tools: unknown[], messages: unknown[], marker: string): Promise<SessionTurn> {
  const res = await fetch(`${stack().url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages, tools, max_tokens: 6 }),
  });
  expect(res.status).toBe(200);
  await res.json();
  return { worker: decidedWorker(res), marker };
}

/** One agent: the shared opening request, then a tool call and its result per turn. */
async function session(s: number): Promise<SessionTurn[]> {
  const tools = agentTools(s);
  const messages: unknown[] = [
    {
      role: 'system',
      content: 'You are a coding agent. Use the tools to inspect and change the repository.',
    },
    { role: 'user', content: 'The CI run failed. Find the failing test and fix it.' },
  ];
  const turns: SessionTurn[] = [];
  for (let t = 0; t < TURNS; t++) {
    if (t > 0) {
      const id = `call_${s}_${t}`;
      const marker = `agent ${s}, result ${t}:`;
      messages.push(
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id,
              type: 'function',
              function: {
                name: `agent${s}_tool${t}`,
                arguments: JSON.stringify({ path: `src/file${t}.ts` }),
              },
            },
          ],
        },
        { role: 'tool', tool_call_id: id, content: `${marker} export const value${t} = ${t};` },
      );
      turns.push(await ask(tools, messages, marker));
    } else turns.push(await ask(tools, messages, `agent ${s}, opening`));
  }
  return turns;
}

describe('coding agents: tools weigh the tokens the chat template renders them into', () => {
  it('keeps each agent on the worker that holds its tools, with the tools cached', async () => {
    const sessions = await Promise.all(Array.from({ length: SESSIONS }, (_, s) => session(s)));
    for (const turns of sessions) expect(turns[0]!.worker).not.toBe('');
    expect(movedFollowUps(sessions)).toEqual([]);
    // The agents used the fleet (the opening requests spread, though their messages are the same),
    // and every follow-up found its tools cached where it ran: the simulator's own report.
    expect(new Set(sessions.map((t) => t[0]!.worker)).size).toBeGreaterThanOrEqual(3);
    expectFollowUpsCached(stack(), sessions, 8_000);
  });
});
