/**
 * vLLM's Anthropic Messages API (`POST /v1/messages`, what Claude Code and the Anthropic SDKs speak)
 * through a real Envoy 1.40, with the official Anthropic SDK. The router reads the conversation as the
 * chat messages vLLM turns it into (request/anthropic-messages.ts), so the default cache-aware policy
 * keeps each coding session on the worker holding its conversation, although Claude Code opens every
 * request's system prompt with a billing header whose hash changes per request (vLLM leaves it out of
 * the prompt; so does the router's routing text). Errors come back in Anthropic's shape; in P/D mode
 * the prefill leg is a one-token /v1/messages request. Every load is back to 0 after each test.
 */
import Anthropic from '@anthropic-ai/sdk';
import { randomBytes } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import type { Simulator } from '../../src/sim/simulator.js';

const MODEL = 'sim-model';
const SYSTEM = 'You are an interactive coding agent working in a large TypeScript repository. '.repeat(30);
const TOOLS: Anthropic.Tool[] = [
  {
    name: 'read_file',
    description: 'Reads a file',
    input_schema: { type: 'object', properties: { path: { type: 'string' } } },
  },
];

/** A system prompt as Claude Code sends it: a billing header with a per-request hash first. */
function system(): Anthropic.TextBlockParam[] {
  return [
    {
      type: 'text',
      text: `x-anthropic-billing-header: cc_version=2.1.7; cch=${randomBytes(4).toString('hex')};`,
    },
    { type: 'text', text: SYSTEM },
  ];
}

/** Some file content unique to one session (~400 tokens). */
function file(session: number): string {
  let out = '';
  for (let i = 0; i < 24; i++) out += `export const s${session}_${i} = ${i * 7919};`.padEnd(64, ' ');
  return out;
}

/** The simulator that served the request whose last message holds `marker`, with its record. */
function servedWith(sims: readonly Simulator[], marker: string) {
  for (const sim of sims) {
    for (const r of sim.records) {
      const messages = (r.body as { messages?: Array<{ content: unknown }> }).messages ?? [];
      if (JSON.stringify(messages.at(-1)?.content ?? '').includes(marker)) return { sim, record: r };
    }
  }
  return undefined;
}

describe('Anthropic Messages API: one router, cache-aware by default', () => {
  let stack: Stack;
  let anthropic: Anthropic;
  beforeAll(async () => {
    stack = await startStack({ workers: 4, router: { decisionHeader: true } });
    anthropic = new Anthropic({ baseURL: stack.url, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => stack.close());
  afterEach(async () => expectAllLoadsZero(stack.router));

  it("keeps each coding session on the worker holding its conversation, whatever the billing header's hash", async () => {
    // Three sessions over four workers: sent in turn, a rotation could not keep one on its worker.
    const sessions = [0, 1, 2];
    const history = new Map<number, Anthropic.MessageParam[]>();
    const workers = new Map<number, string[]>();
    const misses: string[] = [];
    for (let turn = 0; turn < 4; turn++) {
      for (const s of sessions) {
        const question = `session ${s} turn ${turn}: what does this export?`;
        const messages = history.get(s) ?? [];
        if (turn === 0)
          messages.push({ role: 'user', content: [{ type: 'text', text: `${file(s)}\n${question}` }] });
        else if (turn === 1) {
          // The agent called a tool; its result comes back in the next user message.
          messages.push({
            role: 'assistant',
            content: [{ type: 'tool_use', id: `toolu_${s}`, name: 'read_file', input: { path: `s${s}.ts` } }],
          });
          messages.push({
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: `toolu_${s}`, content: 'ok' },
              { type: 'text', text: question },
            ],
          });
        } else messages.push({ role: 'user', content: question });
        const { data: stream, response } = await anthropic.messages
          .create({ model: MODEL, max_tokens: 4, stream: true, system: system(), tools: TOOLS, messages })
          .withResponse();
        let text = '';
        for await (const event of stream) {
          if (event.type === 'content_block_delta' && event.delta.type === 'text_delta')
            text += event.delta.text;
        }
        expect(text.length).toBeGreaterThan(0);
        messages.push({ role: 'assistant', content: text });
        history.set(s, messages);
        const decision = response.headers.get('x-vllm-router-decision') ?? '';
        const worker = /worker=([^;\s]+)/.exec(decision)?.[1] ?? '';
        // From its second turn on, the router knows where the session's conversation is cached.
        if (turn > 0) expect(decision).toContain('branch=cache_hit');
        workers.set(s, [...(workers.get(s) ?? []), worker]);
        const served = servedWith(stack.sims, question);
        expect(served?.sim.url).toBe(worker);
        const { promptTokens, cachedTokens } = served!.record;
        if (turn > 0 && cachedTokens < promptTokens / 2) {
          misses.push(`session ${s} turn ${turn}: ${cachedTokens}/${promptTokens} cached on ${worker}`);
        }
      }
    }
    for (const s of sessions) expect(new Set(workers.get(s)).size, `session ${s}: ${workers.get(s)}`).toBe(1);
    expect(misses).toEqual([]);
  });

  it("answers the router's own errors in Anthropic's shape, which the SDK reads", async () => {
    const err = await anthropic.messages
      .create({ model: MODEL, max_tokens: 4, messages: [] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    const e = err as InstanceType<typeof Anthropic.BadRequestError>;
    expect(e.status).toBe(400);
    expect(e.error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', code: 'invalid_messages' },
    });
    // The router never reached a worker for it.
    expect(
      stack.sims.flatMap((s) => s.records.filter((r) => r.path === '/v1/messages' && r.status === 400)),
    ).toEqual([]);
  });

  it('a JSON answer passes through unchanged', async () => {
    const message = await anthropic.messages.create({
      model: MODEL,
      max_tokens: 3,
      system: system(),
      messages: [{ role: 'user', content: 'hello' }],
    });
    expect(message).toMatchObject({ type: 'message', role: 'assistant', stop_reason: 'max_tokens' });
    expect(message.usage.output_tokens).toBe(3);
  });
});

describe('Anthropic Messages API: P/D', () => {
  let s: PdStack;
  beforeAll(async () => {
    s = await startPdStack({ prefill: 2, decode: 2 });
  });
  afterAll(async () => s.close());
  afterEach(async () => expectAllLoadsZero(s.router));

  it('runs a one-token, unstreamed /v1/messages prefill leg, then streams from the decode worker', async () => {
    const anthropic = new Anthropic({ baseURL: s.url, apiKey: 'unused', maxRetries: 0 });
    const stream = anthropic.messages.stream({
      model: MODEL,
      max_tokens: 5,
      system: system(),
      messages: [{ role: 'user', content: 'disaggregate me' }],
    });
    const final = await stream.finalMessage();
    expect(final.usage.output_tokens).toBe(5);
    const legs = s.prefill.flatMap((p) => p.records.filter((r) => r.path === '/v1/messages'));
    expect(legs).toHaveLength(1);
    expect(legs[0]!.body).toMatchObject({ max_tokens: 1, stream: false });
    expect((legs[0]!.body as { kv_transfer_params?: unknown }).kv_transfer_params).toBeDefined();
    const decoded = s.decode.flatMap((d) => d.records.filter((r) => r.path === '/v1/messages'));
    expect(decoded).toHaveLength(1);
    expect(decoded[0]).toMatchObject({ outcome: 'ok', stream: true, cachedTokens: legs[0]!.promptTokens });
  });
});
