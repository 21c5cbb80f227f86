/**
 * The simulator's OpenAI Responses API (POST /v1/responses, GET /v1/responses/{id}, .../cancel) as vLLM
 * serves it: one chat generation path, vLLM's response and event shapes, the per-process store behind
 * previous_response_id, and the P/D roles.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import OpenAI from 'openai';
import { type Simulator } from '../../../src/sim/simulator.js';
import { outputText } from '../../../src/sim/openai-format.js';
import {
  readUntilCut,
  blockPrompt,
  postJson,
  simulatorsClosedAfterEach,
  NIXL_PREFILL,
} from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

interface Usage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

interface ResponseBody {
  id: string;
  object: string;
  status: string;
  output: Array<{ id: string; content: Array<{ text: string }> }>;
  usage: Usage;
  previous_response_id: string | null;
  store: boolean;
  kv_transfer_params?: Record<string, unknown>;
}

async function respond(s: Simulator, body: Record<string, unknown>): Promise<ResponseBody> {
  const r = await postJson(`${s.url}/v1/responses`, { model: 'sim-model', ...body });
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return r.json as unknown as ResponseBody;
}

async function get(url: string, method = 'GET'): Promise<{ status: number; json: unknown }> {
  const res = await request(url, { method });
  return { status: res.statusCode, json: await res.body.json() };
}

interface NamedEvent {
  event: string;
  data: Record<string, unknown>;
}

/** Splits a named-event SSE body (`event: <type>\ndata: <json>`) into its events. */
function namedEvents(text: string): NamedEvent[] {
  return text
    .split('\n\n')
    .filter((block) => block !== '')
    .map((block) => {
      const [eventLine, dataLine, ...rest] = block.split('\n');
      expect(rest).toEqual([]);
      expect(eventLine).toMatch(/^event: /);
      expect(dataLine).toMatch(/^data: /);
      return {
        event: eventLine!.slice('event: '.length),
        data: JSON.parse(dataLine!.slice('data: '.length)) as Record<string, unknown>,
      };
    });
}

async function postEvents(
  url: string,
  body: unknown,
): Promise<{ status: number; contentType: unknown; events: NamedEvent[] }> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.body.text();
  expect(text).not.toContain('[DONE]');
  return { status: res.statusCode, contentType: res.headers['content-type'], events: namedEvents(text) };
}

const NOT_FOUND = (id: string) => ({
  error: { message: `Response with id '${id}' not found.`, type: 'NotFoundError', param: null, code: 404 },
});

describe('simulator /v1/responses', () => {
  it('answers a non-streamed request with vLLM response object, recorded like a chat request', async () => {
    const s = await sim({ model: 'my-model' });
    const r = await postJson(`${s.url}/v1/responses`, { input: 'Say hi.', max_output_tokens: 3 });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toBe('application/json');
    const body = r.json as unknown as ResponseBody & Record<string, unknown>;
    expect(body).toMatchObject({
      object: 'response',
      model: 'my-model',
      status: 'completed',
      previous_response_id: null,
      store: true,
      output: [
        {
          type: 'message',
          role: 'assistant',
          status: 'completed',
          content: [{ type: 'output_text', text: outputText(3), annotations: [] }],
        },
      ],
    });
    expect(body.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(body.output[0]!.id).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(body.created_at).toBeTypeOf('number');
    expect(body.kv_transfer_params).toBeUndefined();
    const prompt = Math.ceil('<|user|>\nSay hi.\n'.length / 4);
    expect(body.usage).toEqual({
      input_tokens: prompt,
      input_tokens_details: { cached_tokens: 0 },
      output_tokens: 3,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: prompt + 3,
    });
    expect(s.records).toHaveLength(1);
    expect(s.records[0]).toMatchObject({
      path: '/v1/responses',
      responseId: body.id,
      outcome: 'ok',
      status: 200,
      promptTokens: prompt,
      completionTokens: 3,
      stream: false,
    });
    expect(s.inFlight()).toBe(0);
    expect(s.hasResponse(body.id)).toBe(true);
  });

  it('honours request_id as the response id', async () => {
    const s = await sim();
    const body = await respond(s, { input: 'x', request_id: 'resp_fixed-1' });
    expect(body.id).toBe('resp_fixed-1');
    expect(s.findRecord(s.records[0]!.requestId)?.responseId).toBe('resp_fixed-1');
    expect((await get(`${s.url}/v1/responses/resp_fixed-1`)).status).toBe(200);
  });

  it("streams vLLM's named events in order, numbered from 0, deltas adding up to the completed text", async () => {
    const s = await sim();
    const r = await postEvents(`${s.url}/v1/responses`, {
      input: blockPrompt('stream', 2),
      instructions: 'Be brief.',
      max_output_tokens: 4,
      stream: true,
      request_id: 'resp_stream',
    });
    expect(r.status).toBe(200);
    expect(r.contentType).toBe('text/event-stream; charset=utf-8');
    const types = r.events.map((e) => e.event);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(4).fill('response.output_text.delta'),
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(r.events.map((e) => e.data.type)).toEqual(types);
    expect(r.events.map((e) => e.data.sequence_number)).toEqual(r.events.map((_e, i) => i));

    const created = r.events[0]!.data.response;
    expect(created).toMatchObject({
      id: 'resp_stream',
      object: 'response',
      status: 'in_progress',
      output: [],
    });
    const added = r.events[2]!.data as { item: { id: string } };
    const deltas = r.events.filter((e) => e.event === 'response.output_text.delta').map((e) => e.data);
    for (const d of deltas) {
      expect(d).toMatchObject({ item_id: added.item.id, output_index: 0, content_index: 0 });
    }
    const text = deltas.map((d) => d.delta).join('');
    expect(text).toBe(outputText(4));
    expect(r.events[8]!.data).toMatchObject({ item_id: added.item.id, text });

    const completed = r.events.at(-1)!.data.response as ResponseBody;
    expect(completed).toMatchObject({
      id: 'resp_stream',
      status: 'completed',
      instructions: 'Be brief.',
      output: [{ id: added.item.id, content: [{ type: 'output_text', text }] }],
    });
    const prompt = s.records[0]!.promptTokens;
    expect(completed.usage).toMatchObject({
      input_tokens: prompt,
      output_tokens: 4,
      total_tokens: prompt + 4,
    });
    expect(s.records[0]).toMatchObject({ path: '/v1/responses', stream: true, outcome: 'ok' });
    expect(s.records[0]!.firstByteMs).toBeDefined();
    // The stored response is the completed one.
    expect((await get(`${s.url}/v1/responses/resp_stream`)).json).toEqual(completed);
  });

  it('is what the OpenAI SDK reads: create, stream and retrieve', async () => {
    const s = await sim();
    const client = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const first = await client.responses.create({ model: 'sim-model', input: 'Hello', max_output_tokens: 2 });
    expect(first.output_text).toBe(outputText(2));
    const stream = await client.responses.create({
      model: 'sim-model',
      input: 'Go on',
      previous_response_id: first.id,
      max_output_tokens: 3,
      stream: true,
    });
    let text = '';
    let done: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      if (event.type === 'response.output_text.delta') text += event.delta;
      if (event.type === 'response.completed') done = event.response;
    }
    expect(text).toBe(outputText(3));
    expect(done?.previous_response_id).toBe(first.id);
    const again = await client.responses.retrieve(done!.id);
    expect(again.output_text).toBe(text);
  });

  it('a 3-link previous_response_id chain reuses each earlier turn as a cached prefix', async () => {
    const s = await sim();
    const one = await respond(s, { input: blockPrompt('turn1', 4), instructions: 'Be brief.' });
    const two = await respond(s, { input: blockPrompt('turn2', 2), previous_response_id: one.id });
    const three = await respond(s, { input: 'Thanks!', previous_response_id: two.id, max_output_tokens: 2 });
    expect(one.usage.input_tokens_details.cached_tokens).toBe(0);
    expect(two.previous_response_id).toBe(one.id);
    expect(three.previous_response_id).toBe(two.id);
    // The previous turn's prompt is the new prompt's prefix: its full 16-token blocks are cached.
    for (const [prev, next] of [
      [one, two],
      [two, three],
    ] as const) {
      expect(next.usage.input_tokens).toBeGreaterThan(prev.usage.input_tokens + prev.usage.output_tokens);
      expect(next.usage.input_tokens_details.cached_tokens).toBe(
        Math.floor(prev.usage.input_tokens / 16) * 16,
      );
      expect(next.usage.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    }

    // Turn 3's prompt is the whole conversation, as the same conversation sent as chat renders it.
    const fresh = await sim();
    const chat = await postJson(`${fresh.url}/v1/chat/completions`, {
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: blockPrompt('turn1', 4) },
        { role: 'assistant', content: one.output[0]!.content[0]!.text },
        { role: 'user', content: blockPrompt('turn2', 2) },
        { role: 'assistant', content: two.output[0]!.content[0]!.text },
        { role: 'user', content: 'Thanks!' },
      ],
      max_tokens: 2,
    });
    expect((chat.json.usage as { prompt_tokens: number }).prompt_tokens).toBe(three.usage.input_tokens);
  });

  it('new instructions replace the stored ones, so the follow-up starts a new prefix', async () => {
    const s = await sim();
    const one = await respond(s, { input: blockPrompt('q', 4), instructions: 'Old rules.' });
    const two = await respond(s, { input: 'Next', instructions: 'New rules!', previous_response_id: one.id });
    expect(two.usage.input_tokens_details.cached_tokens).toBe(0);
    const chat = await postJson(`${(await sim()).url}/v1/chat/completions`, {
      messages: [
        { role: 'system', content: 'New rules!' },
        { role: 'user', content: blockPrompt('q', 4) },
        { role: 'assistant', content: one.output[0]!.content[0]!.text },
        { role: 'user', content: 'Next' },
      ],
    });
    expect((chat.json.usage as { prompt_tokens: number }).prompt_tokens).toBe(two.usage.input_tokens);
  });

  it('the same conversation as chat and as responses has the same prompt and cache blocks', async () => {
    const conversation = {
      chat: [
        { role: 'system', content: 'You call tools.' },
        { role: 'user', content: [{ type: 'text', text: blockPrompt('tools', 3) }] },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
        },
        { role: 'tool', tool_call_id: 'c1', content: 'result' },
        { role: 'user', content: 'Summarise.' },
      ],
      responses: {
        instructions: 'You call tools.',
        input: [
          { role: 'user', content: [{ type: 'input_text', text: blockPrompt('tools', 3) }] },
          { type: 'function_call', call_id: 'c1', name: 'f', arguments: '{"a":1}' },
          { type: 'function_call_output', call_id: 'c1', output: 'result' },
          { role: 'user', content: 'Summarise.' },
        ],
      },
    };
    // Text mode (default) and token mode (KV events on: the cache keys on the tokenizer's ids).
    for (const opts of [{}, { kvEvents: {} }] as const) {
      const s = await sim(opts);
      const chat = await postJson(`${s.url}/v1/chat/completions`, {
        messages: conversation.chat,
        max_tokens: 1,
      });
      const chatUsage = chat.json.usage as { prompt_tokens: number };
      const resp = await respond(s, { ...conversation.responses, max_output_tokens: 1 });
      expect(resp.usage.input_tokens).toBe(chatUsage.prompt_tokens);
      // Sent after the chat request, every full block of the prompt is a cache hit.
      expect(resp.usage.input_tokens_details.cached_tokens).toBe(
        Math.floor(resp.usage.input_tokens / 16) * 16,
      );
      expect(resp.usage.input_tokens_details.cached_tokens).toBeGreaterThan(0);
    }
  });

  it("an unknown previous_response_id is vLLM's 404, recorded as an error", async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/responses`, { input: 'x', previous_response_id: 'resp_nope' });
    expect(r.status).toBe(404);
    expect(r.json).toEqual(NOT_FOUND('resp_nope'));
    expect(s.records[0]).toMatchObject({ path: '/v1/responses', outcome: 'error', status: 404 });
    expect(s.running()).toBe(0);
    expect(s.inFlight()).toBe(0);
  });

  it('store: false is not kept: a follow-up or GET to it is 404', async () => {
    const s = await sim();
    const body = await respond(s, { input: 'x', store: false });
    expect(body.store).toBe(false);
    expect(s.hasResponse(body.id)).toBe(false);
    const r = await postJson(`${s.url}/v1/responses`, { input: 'y', previous_response_id: body.id });
    expect(r.status).toBe(404);
    expect(r.json).toEqual(NOT_FOUND(body.id));
    expect((await get(`${s.url}/v1/responses/${body.id}`)).status).toBe(404);
  });

  it('the store is per process: another (or a restarted) simulator does not know the response', async () => {
    const a = await sim();
    const b = await sim();
    const body = await respond(a, { input: 'x' });
    const r = await postJson(`${b.url}/v1/responses`, { input: 'y', previous_response_id: body.id });
    expect(r.status).toBe(404);
    expect((await get(`${b.url}/v1/responses/${body.id}`)).json).toEqual(NOT_FOUND(body.id));
  });

  it('keeps at most maxStoredResponses, dropping the oldest', async () => {
    const s = await sim({ maxStoredResponses: 2 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await respond(s, { input: `q${i}` })).id);
    expect(ids.map((id) => s.hasResponse(id))).toEqual([false, true, true]);
  });

  it('GET /v1/responses/{id} and cancel answer from the store and are recorded as lookups', async () => {
    const s = await sim();
    const body = await respond(s, { input: 'x' });
    const got = await get(`${s.url}/v1/responses/${body.id}`);
    expect(got).toEqual({ status: 200, json: body });
    expect(await get(`${s.url}/v1/responses/${body.id}/cancel`, 'POST')).toEqual({
      status: 400,
      json: {
        error: {
          message: 'Cannot cancel a synchronous response.',
          type: 'BadRequestError',
          param: null,
          code: 400,
        },
      },
    });
    expect(await get(`${s.url}/v1/responses/resp_gone/cancel`, 'POST')).toEqual({
      status: 404,
      json: NOT_FOUND('resp_gone'),
    });
    expect((await get(`${s.url}/v1/responses/resp_gone`)).status).toBe(404);
    expect((await get(`${s.url}/v1/responses/${body.id}`, 'DELETE')).status).toBe(405);
    expect((await get(`${s.url}/v1/responses`)).status).toBe(405);
    expect(s.responseLookups.map((l) => [l.method, l.path, l.responseId, l.status])).toEqual([
      ['GET', `/v1/responses/${body.id}`, body.id, 200],
      ['POST', `/v1/responses/${body.id}/cancel`, body.id, 400],
      ['POST', '/v1/responses/resp_gone/cancel', 'resp_gone', 404],
      ['GET', '/v1/responses/resp_gone', 'resp_gone', 404],
      ['DELETE', `/v1/responses/${body.id}`, body.id, 405],
    ]);
    expect(s.records).toHaveLength(1); // only the generation request
  });

  it.each([
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens must be a positive integer'],
    [{ input: 'x', max_output_tokens: 2.5 }, 'max_output_tokens must be a positive integer'],
    [{}, 'input is required'],
    [{ input: { role: 'user' } }, 'input must be a string or an array of input items'],
    [{ input: [] }, 'input must not be empty'],
  ])('rejects %j with 400', async (body, message) => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/responses`, body);
    expect(r.status).toBe(400);
    expect(r.json).toEqual({ error: { message, type: 'BadRequestError', param: null, code: 400 } });
  });

  it('faults apply to /v1/responses: by its path, and by default as to every generation endpoint', async () => {
    const s = await sim();
    s.injectFault({ status: 503, message: 'by path' }, { path: '/v1/responses' });
    s.injectFault({ status: 500, message: 'default' });
    const byPath = await postJson(`${s.url}/v1/responses`, { input: 'x' });
    const byDefault = await postJson(`${s.url}/v1/responses`, { input: 'x' });
    expect([byPath.status, byDefault.status]).toEqual([503, 500]);
    expect((await postJson(`${s.url}/v1/responses`, { input: 'x' })).status).toBe(200);
    expect(s.records.map((r) => r.outcome)).toEqual(['error', 'error', 'ok']);
  });

  it('a hold stops a stream after response.created, counted in flight until released', async () => {
    const s = await sim();
    const hold = s.hold({ path: '/v1/responses', afterChunks: 1 });
    const done = postEvents(`${s.url}/v1/responses`, { input: 'x', stream: true, max_output_tokens: 2 });
    await hold.reached();
    expect(s.inFlight()).toBe(1);
    expect((await get(`${s.url}/load`)).json).toEqual({ server_load: 1 });
    hold.release();
    const r = await done;
    expect(r.events.at(-1)!.event).toBe('response.completed');
    await s.waitForIdle();
    expect(s.inFlight()).toBe(0);
  });

  it('a stream cut by an injected reset after n events ends as reset, stores nothing', async () => {
    const s = await sim();
    s.injectFault({ resetAfterChunks: 3 }, { path: '/v1/responses' });
    const res = await request(`${s.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ input: 'x', stream: true, request_id: 'resp_cut' }),
    });
    expect(res.statusCode).toBe(200);
    const { received, cut } = await readUntilCut(res.body);
    expect(cut).toBe(true);
    expect(namedEvents(received).map((e) => e.event)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
    ]);
    await s.waitForIdle();
    expect(s.records[0]!.outcome).toBe('reset');
    expect(s.hasResponse('resp_cut')).toBe(false);
  });
});

describe('simulator /v1/responses P/D roles', () => {
  const INPUT = blockPrompt('pd', 3);

  it('a decode worker rejects a responses request without kv_transfer_params as it rejects chat', async () => {
    const d = await sim({ role: 'decode' });
    const chat = await postJson(`${d.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: INPUT }],
    });
    const resp = await postJson(`${d.url}/v1/responses`, { input: INPUT });
    expect(chat.status).toBe(400);
    expect(resp.status).toBe(chat.status);
    expect(resp.json).toEqual(chat.json);
    expect(d.records.map((r) => [r.path, r.outcome])).toEqual([
      ['/v1/chat/completions', 'error'],
      ['/v1/responses', 'error'],
    ]);
    expect(d.running()).toBe(0);
  });

  it('nixl round trip: the prefill leg returns kv_transfer_params, the decode leg serves and stores the answer', async () => {
    const p = await sim({ role: 'prefill' });
    const d = await sim({ role: 'decode' });
    const pre = await respond(p, {
      input: INPUT,
      max_output_tokens: 1,
      stream: false,
      store: false,
      request_id: 'resp_pd',
      kv_transfer_params: NIXL_PREFILL,
    });
    expect(pre.kv_transfer_params).toMatchObject({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: p.engineIds[0],
      remote_port: p.bootstrapPort,
    });
    expect(pre.usage.output_tokens).toBe(1);
    expect(p.hasResponse('resp_pd')).toBe(false);

    const r = await postEvents(`${d.url}/v1/responses`, {
      input: INPUT,
      max_output_tokens: 3,
      stream: true,
      request_id: 'resp_pd',
      kv_transfer_params: pre.kv_transfer_params,
    });
    expect(r.status).toBe(200);
    const completed = r.events.at(-1)!.data.response as ResponseBody;
    expect(completed.usage.input_tokens).toBe(pre.usage.input_tokens);
    // The decode worker got the whole prompt's KV cache from the prefill worker.
    expect(completed.usage.input_tokens_details.cached_tokens).toBe(pre.usage.input_tokens);
    expect(completed.output[0]!.content[0]!.text).toBe(outputText(3));
    expect(d.hasResponse('resp_pd')).toBe(true);
    // A follow-up can only continue on the decode worker that stored the turn.
    const next = await postJson(`${p.url}/v1/responses`, { input: 'more', previous_response_id: 'resp_pd' });
    expect(next.status).toBe(404);
  });
});
