/**
 * vLLM's Responses API through a real Envoy 1.40, with the official openai client. vLLM keeps stored
 * responses in the memory of the process that made them (the simulator does the same), so a
 * conversation chained by `previous_response_id` works only if every turn reaches the worker that
 * holds the previous one. The router uses round robin here, the policy that would scatter the turns:
 * what keeps them together is the response affinity (routing/response-affinity.ts), also across two
 * router replicas that share nothing, and in P/D mode.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startStack, type Stack } from '../support/stack.js';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';
import { startEnvoy } from '../../src/envoy/envoy-process.js';
import type { Simulator } from '../../src/sim/simulator.js';
import type { Router } from '../../src/router.js';
import { waitFor } from '../support/wait-for.js';

const MODEL = 'sim-model';
const SYSTEM = 'You answer questions about the fleet. '.repeat(40);

/** The simulators whose records show a generation named `id` (the response id is its request_id). */
function servedBy(sims: readonly Simulator[], id: string): Simulator[] {
  return sims.filter((s) =>
    s.records.some((r) => (r.body as { request_id?: unknown } | undefined)?.request_id === id),
  );
}

/** `turns` chained turns, each through the next client in `clients` (cycling). */
async function converse(clients: readonly OpenAI[], turns: number) {
  const responses = [];
  let previous: string | undefined;
  for (let t = 0; t < turns; t++) {
    const r = await clients[t % clients.length]!.responses.create({
      model: MODEL,
      instructions: SYSTEM,
      input: `question ${t}: how busy is worker ${t}?`,
      max_output_tokens: 4,
      ...(previous !== undefined ? { previous_response_id: previous } : {}),
    });
    expect(r.status).toBe('completed');
    responses.push(r);
    previous = r.id;
  }
  return responses;
}

describe('Responses API: one router', () => {
  let stack: Stack;
  let openai: OpenAI;
  beforeAll(async () => {
    stack = await startStack({ workers: 3, router: { policy: 'round_robin' } });
    openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => stack.close());
  afterEach(async () => expectAllLoadsZero(stack.router));

  it('keeps a chained conversation on the worker holding it, which reuses its prefix', async () => {
    const turns = await converse([openai], 6);
    const holder = servedBy(stack.sims, turns[0]!.id);
    expect(holder).toHaveLength(1);
    for (const t of turns) expect(servedBy(stack.sims, t.id)).toEqual(holder);
    // Each turn's prompt is the stored conversation plus the new question: the worker holds the rest.
    const last = turns.at(-1)!;
    expect(last.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(last.usage!.input_tokens_details.cached_tokens).toBeGreaterThan(last.usage!.input_tokens / 2);
    // Reading a stored response back reaches its holder too.
    const again = await openai.responses.retrieve(last.id);
    expect(again.id).toBe(last.id);
    // Round robin still spreads what is not a follow-up.
    const fresh = await Promise.all(
      [0, 1, 2].map((i) =>
        openai.responses.create({ model: MODEL, input: `fresh ${i}`, max_output_tokens: 2 }),
      ),
    );
    expect(new Set(fresh.map((r) => servedBy(stack.sims, r.id)[0]))).toHaveProperty('size', 3);
  });

  it('streams a follow-up from the holder, events in order', async () => {
    const [first] = await converse([openai], 1);
    const stream = await openai.responses.create({
      model: MODEL,
      input: 'and now stream it',
      max_output_tokens: 5,
      previous_response_id: first!.id,
      stream: true,
    });
    const types: string[] = [];
    let text = '';
    let completedId = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') completedId = event.response.id;
    }
    expect(types[0]).toBe('response.created');
    expect(types.at(-1)).toBe('response.completed');
    expect(types.filter((t) => t === 'response.output_text.delta')).toHaveLength(5);
    expect(text.length).toBeGreaterThan(0);
    expect(servedBy(stack.sims, completedId)).toEqual(servedBy(stack.sims, first!.id));
  });

  it('serves a request that names no model, as vLLM serves it (with its own model)', async () => {
    // vLLM's ResponsesRequest (and its chat and completions requests) take `model: str | None`.
    const res = await fetch(`${stack.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'which model are you?', max_output_tokens: 2 }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    expect(((await res.json()) as { status: string }).status).toBe('completed');
  });

  it("serves a tool's output given as content parts (text and image), as vLLM does", async () => {
    // The OpenAI SDK's FunctionCallOutput.output is `str | ResponseFunctionCallOutputItemListParam`:
    // a tool that returns an image (a screenshot, an agent's view_image) sends it as parts.
    const r = await openai.responses.create({
      model: MODEL,
      max_output_tokens: 2,
      input: [
        { role: 'user', content: 'what does the screen show?' },
        { type: 'function_call', call_id: 'c1', name: 'screenshot', arguments: '{}' },
        {
          type: 'function_call_output',
          call_id: 'c1',
          output: [
            { type: 'input_text', text: 'the screen:' },
            { type: 'input_image', image_url: 'https://example.com/screen.png', detail: 'auto' },
          ],
        },
      ],
    });
    expect(r.status).toBe('completed');
  });

  it("keeps the client's own request_id, and answers a malformed input with a JSON 400", async () => {
    const own = `client-${Date.now()}`;
    const res = await fetch(`${stack.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 'mine', max_output_tokens: 2, request_id: own }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { id: string }).id).toBe(own);
    const bad = await fetch(`${stack.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, input: 42 }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { code: string } }).error.code).toBe('invalid_input');
  });
});

describe('Responses API: two router replicas that share nothing', () => {
  let stack: Stack;
  let second: { router: Router; close(): Promise<void>; url: string };
  beforeAll(async () => {
    stack = await startStack({ workers: 3, router: { policy: 'round_robin' } });
    const router = await startTestRouter({ workers: stack.sims.map((s) => s.url), policy: 'round_robin' });
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    second = {
      router,
      url: `http://127.0.0.1:${envoy.listenerPort}`,
      close: async () => {
        await envoy.close();
        await router.close();
      },
    };
  });
  afterAll(async () => {
    await second.close();
    await stack.close();
  });
  afterEach(async () => {
    await expectAllLoadsZero(stack.router);
    await expectAllLoadsZero(second.router);
  });

  it('agree on every turn, each replica routing every other one', async () => {
    const clients = [stack.url, second.url].map(
      (url) => new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 }),
    );
    const turns = await converse(clients, 6);
    const holder = servedBy(stack.sims, turns[0]!.id);
    expect(holder).toHaveLength(1);
    for (const t of turns) expect(servedBy(stack.sims, t.id)).toEqual(holder);
    // A request counts as processed once its ext_proc stream has ended, after the client's answer.
    const processed = (r: Router) => r.workers().reduce((n, w) => n + w.processed, 0);
    await waitFor(() => processed(stack.router) + processed(second.router) === 6);
    expect([processed(stack.router), processed(second.router)]).toEqual([3, 3]);
  });
});

describe('Responses API: P/D', () => {
  let s: PdStack;
  beforeAll(async () => {
    // Decode workers in vLLM's kv_both role (NIXL's usual one): they serve a follow-up whole.
    s = await startPdStack({ prefill: 2, decode: 2, decodeSim: { kvBoth: true } });
  });
  afterAll(async () => s.close());
  afterEach(async () => expectAllLoadsZero(s.router));

  it('runs a one-token, unstored prefill leg, then serves follow-ups from the decode worker alone', async () => {
    const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const first = await openai.responses.create({
      model: MODEL,
      input: 'disaggregated',
      max_output_tokens: 6,
    });
    expect(first.status).toBe('completed');
    const legs = s.prefill.flatMap((p) => p.records.filter((r) => r.path === '/v1/responses'));
    expect(legs).toHaveLength(1);
    expect(legs[0]!.body).toMatchObject({ max_output_tokens: 1, stream: false, store: false });
    const holder = servedBy(s.decode, first.id);
    expect(holder).toHaveLength(1);
    const next = await openai.responses.create({
      model: MODEL,
      input: 'and again',
      max_output_tokens: 3,
      previous_response_id: first.id,
    });
    expect(next.status).toBe('completed');
    expect(servedBy(s.decode, next.id)).toEqual(holder);
    // The follow-up ran on the decode worker alone: no second prefill leg.
    expect(s.prefill.flatMap((p) => p.records.filter((r) => r.path === '/v1/responses'))).toHaveLength(1);
  });

  it("reports the prefill worker's cached input tokens, not the decode worker's, streamed or not", async () => {
    const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const input = 'A long shared preamble for the cache. '.repeat(30);
    // The two legs of the latest request.
    const lastLegs = () => {
      const d = s.decode.flatMap((x) => x.records).reduce((a, b) => (b.startMs > a.startMs ? b : a));
      const p = s.prefill.flatMap((x) => x.records).find((r) => r.requestId === d.requestId)!;
      return { d, p };
    };
    const whole = await openai.responses.create({ model: MODEL, input, max_output_tokens: 3 });
    const wholeLeg = lastLegs();
    const streamed = await openai.responses.create({
      model: MODEL,
      input,
      max_output_tokens: 3,
      stream: true,
    });
    let usage: OpenAI.Responses.ResponseUsage | undefined;
    for await (const e of streamed) if (e.type === 'response.completed') usage = e.response.usage;
    const streamedLeg = lastLegs();
    for (const [u, { d, p }] of [
      [whole.usage, wholeLeg],
      [usage, streamedLeg],
    ] as const) {
      expect(d.cachedTokens).toBe(d.promptTokens); // the decode worker claims the whole prompt
      expect(u?.input_tokens).toBe(d.promptTokens);
      expect(u?.input_tokens_details.cached_tokens).toBe(p.cachedTokens);
    }
  });
});

describe('Responses API: P/D with MoRI-IO', () => {
  let s: PdStack;
  beforeAll(async () => {
    // MoRI-IO reads the peers from the engine request id, which vLLM's Responses API takes from the
    // body's `request_id`: the response id the client sees is the P/D request id.
    s = await startPdStack({
      prefill: 2,
      decode: 2,
      decodeSim: { kvBoth: true },
      router: { kvConnector: 'moriio' },
    });
  });
  afterAll(async () => s.close());
  afterEach(async () => expectAllLoadsZero(s.router));

  it('a conversation chained by previous_response_id stays on the decode worker holding it', async () => {
    const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const first = await openai.responses.create({
      model: MODEL,
      input: 'disaggregated',
      max_output_tokens: 4,
    });
    expect(first.id).toMatch(/^___prefill_addr_/);
    const holder = servedBy(s.decode, first.id);
    expect(holder).toHaveLength(1);
    let previous = first.id;
    for (let turn = 0; turn < 3; turn++) {
      const next = await openai.responses.create({
        model: MODEL,
        input: `turn ${turn}`,
        max_output_tokens: 3,
        previous_response_id: previous,
      });
      expect(next.status).toBe('completed');
      expect(servedBy(s.decode, next.id)).toEqual(holder);
      previous = next.id;
    }
    expect((await openai.responses.retrieve(first.id)).id).toBe(first.id);
  });
});
