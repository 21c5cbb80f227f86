import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { blockPrompt, getText, postJson, postStream, simulatorsClosedAfterEach } from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

/** Never produces a second token on its own: first token immediately, then a step 10 minutes later. */
const STALL = { timeScale: 1, timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 } };

describe('simulator HTTP', () => {
  it('serves /health, /v1/models and /load', async () => {
    const s = await sim({ model: 'my-model' });
    expect(s.url).toBe(`http://127.0.0.1:${s.port}`);
    expect(s.hostPort).toBe(`127.0.0.1:${s.port}`);
    expect((await getText(`${s.url}/health`)).status).toBe(200);
    const models = JSON.parse((await getText(`${s.url}/v1/models`)).text) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['my-model']);
    expect(JSON.parse((await getText(`${s.url}/load`)).text)).toEqual({ server_load: 0 });
    expect((await getText(`${s.url}/nope`)).status).toBe(404);
    expect(s.records).toHaveLength(0); // only generation requests are recorded
  });

  it('lists every served name and LoRA adapter in /v1/models as vLLM does', async () => {
    const s = await sim({
      model: 'llama',
      aliases: ['llama-chat'],
      lora: { maxLoras: 2, modules: ['sql-lora'] },
    });
    const models = JSON.parse((await getText(`${s.url}/v1/models`)).text) as {
      object: string;
      data: { id: string; parent: string | null }[];
    };
    expect(models.object).toBe('list');
    expect(models.data.map((m) => [m.id, m.parent])).toEqual([
      ['llama', null],
      ['llama-chat', null],
      ['sql-lora', 'llama'],
    ]);
  });

  it('with apiKey, as vllm serve --api-key: /v1 needs the bearer token, /health and /metrics stay open', async () => {
    const s = await sim({ apiKey: 'k1' });
    const models = (headers: Record<string, string>) =>
      request(`${s.url}/v1/models`, { headers }).then(async (r) => ({
        status: r.statusCode,
        body: await r.body.text(),
      }));
    expect(await models({})).toEqual({ status: 401, body: '{"error":"Unauthorized"}' });
    expect((await models({ authorization: 'Bearer nope' })).status).toBe(401);
    expect((await models({ authorization: 'Bearer k1' })).status).toBe(200);
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'hi', max_tokens: 2 });
    expect(r.status).toBe(401);
    expect((await getText(`${s.url}/health`)).status).toBe(200);
    expect((await getText(`${s.url}/metrics`)).status).toBe(200);
  });

  it.each([
    { strict: true, model: 'mistral', status: 404 },
    { strict: true, model: 'llama-chat', status: 200 },
    { strict: true, model: 'sql-lora', status: 200 },
    { strict: false, model: 'mistral', status: 200 },
  ])('strictModels $strict: a request for $model gets $status', async ({ strict, model, status }) => {
    const s = await sim({
      model: 'llama',
      aliases: ['llama-chat'],
      lora: { maxLoras: 2, loadMs: 0, modules: ['sql-lora'] },
      strictModels: strict,
    });
    const r = await postJson(`${s.url}/v1/completions`, { model, prompt: 'hi', max_tokens: 2 });
    expect(r.status).toBe(status);
    if (status === 404) {
      expect(r.json).toEqual({
        error: {
          message: 'The model `mistral` does not exist.',
          type: 'NotFoundError',
          param: null,
          code: 404,
        },
      });
    }
  });

  it('answers a non-streaming completion with usage and records it', async () => {
    const s = await sim({ defaultMaxTokens: 5 });
    const prompt = blockPrompt('a', 2) + 'tail';
    const r = await postJson(`${s.url}/v1/completions`, { model: 'm', prompt }, { 'X-Request-Id': 'req-1' });
    expect(r.status).toBe(200);
    expect(r.headers['x-request-id']).toBe('req-1');
    expect(r.json).toMatchObject({
      id: 'cmpl-req-1',
      object: 'text_completion',
      model: 'm',
      choices: [{ index: 0, finish_reason: 'length' }],
      usage: {
        prompt_tokens: 33,
        completion_tokens: 5,
        total_tokens: 38,
        prompt_tokens_details: null, // vLLM: only set when some tokens were cached
      },
    });
    const rec = s.findRecord('req-1')!;
    expect(rec).toMatchObject({
      path: '/v1/completions',
      outcome: 'ok',
      status: 200,
      promptTokens: 33,
      cachedTokens: 0,
      completionTokens: 5,
      stream: false,
      body: { model: 'm', prompt },
    });
    expect(rec.headers['x-request-id']).toBe('req-1');
    expect(rec.headers['content-type']).toBe('application/json');
    expect(rec.endMs).toBeGreaterThanOrEqual(rec.startMs);
  });

  it('shares no cached block across cache_salt values, as vLLM salts the first block', async () => {
    const s = await sim();
    const shared = blockPrompt('sys', 4);
    const ask = async (salt: string | undefined, q: string) =>
      (
        await postJson(`${s.url}/v1/completions`, {
          prompt: shared + blockPrompt(q, 1),
          ...(salt === undefined ? {} : { cache_salt: salt }),
        })
      ).json.usage as { prompt_tokens_details: { cached_tokens: number } | null };
    await ask('tenant-a', 'q1');
    expect((await ask('tenant-b', 'q2')).prompt_tokens_details).toBeNull();
    expect((await ask(undefined, 'q3')).prompt_tokens_details).toBeNull();
    expect((await ask('tenant-a', 'q4')).prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(64);
    expect((await ask('tenant-b', 'q5')).prompt_tokens_details?.cached_tokens).toBeGreaterThanOrEqual(64);
  });

  it('counts prefix-cache hits across requests', async () => {
    const s = await sim();
    const shared = blockPrompt('sys', 4);
    await postJson(`${s.url}/v1/completions`, { prompt: shared + blockPrompt('q1', 1) });
    const r = await postJson(`${s.url}/v1/completions`, { prompt: shared + blockPrompt('q2', 1) });
    expect(r.json.usage).toMatchObject({ prompt_tokens: 80, prompt_tokens_details: { cached_tokens: 64 } });
    const metrics = (await getText(`${s.url}/metrics`)).text;
    expect(metrics).toContain('vllm:prefix_cache_queries_total{model_name="sim-model"} 160\n');
    expect(metrics).toContain('vllm:prefix_cache_hits_total{model_name="sim-model"} 64\n');
    expect(metrics).toContain('vllm:num_requests_running{model_name="sim-model"} 0\n');
  });

  it('answers chat completions, max_completion_tokens first', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 9,
      max_completion_tokens: 3,
    });
    expect(r.json).toMatchObject({
      object: 'chat.completion',
      model: 'sim-model',
      choices: [
        { index: 0, message: { role: 'assistant', content: ' the quick brown' }, finish_reason: 'length' },
      ],
      usage: { completion_tokens: 3 },
    });
  });

  it('answers one choice per prompt for prompt arrays and token ids', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, {
      prompt: [
        [1, 2, 3, 4],
        [5, 6],
      ],
      max_tokens: 2,
    });
    expect((r.json.choices as unknown[]).length).toBe(2);
    expect(r.json.usage).toMatchObject({ prompt_tokens: 6, completion_tokens: 4 });
  });

  it('answers n choices per prompt (parallel sampling), numbered prompt by prompt', async () => {
    const s = await sim();
    const chat = await postJson(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 2,
      n: 3,
    });
    expect((chat.json.choices as { index: number }[]).map((c) => c.index)).toEqual([0, 1, 2]);
    expect(chat.json.usage).toMatchObject({ completion_tokens: 6 });
    const batch = await postJson(`${s.url}/v1/completions`, { prompt: ['a', 'b'], max_tokens: 2, n: 2 });
    expect((batch.json.choices as unknown[]).length).toBe(4);
    expect(batch.json.usage).toMatchObject({ completion_tokens: 8 });
    const streamed = await postStream(`${s.url}/v1/completions`, {
      prompt: 'x'.repeat(40),
      max_tokens: 2,
      n: 2,
      stream: true,
    });
    const indexes = (streamed.events as { choices?: { index: number }[] }[]).flatMap(
      (e) => e.choices?.map((c) => c.index) ?? [],
    );
    expect(indexes).toEqual([0, 1, 0, 1]);
  });

  it('reads n = "3" as vLLM\'s pydantic model does: three choices', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 2, n: '3' });
    expect((r.json.choices as unknown[]).length).toBe(3);
  });

  it.each([0, -1, 1.5, '1.5', 'x'])('rejects n = %j as vLLM does', async (n) => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'a', max_tokens: 2, n });
    expect(r.status).toBe(400);
    expect(JSON.stringify(r.json)).toContain('n must be at least 1');
  });

  it('streams one chunk per token, then usage, then [DONE]', async () => {
    const s = await sim();
    const r = await postStream(`${s.url}/v1/completions`, {
      prompt: 'x'.repeat(40),
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(r.status).toBe(200);
    expect(r.headers['content-type']).toContain('text/event-stream');
    const ev = r.events as Record<string, unknown>[];
    expect(ev).toHaveLength(6);
    const tokens = ev.slice(0, 4) as { choices: { text: string; finish_reason: string | null }[] }[];
    expect(tokens.map((c) => c.choices[0]!.text).join('')).toBe(' the quick brown fox');
    expect(tokens.map((c) => c.choices[0]!.finish_reason)).toEqual([null, null, null, 'length']);
    expect(ev[4]).toMatchObject({
      choices: [],
      usage: {
        prompt_tokens: 10,
        completion_tokens: 4,
        total_tokens: 14,
        prompt_tokens_details: null, // vLLM: only set when some tokens were cached
      },
    });
    expect(ev[5]).toBe('[DONE]');
    expect(s.records[0]).toMatchObject({ outcome: 'ok', stream: true, completionTokens: 4 });
    expect(s.records[0]!.firstByteMs).toBeDefined();
  });

  it('streams chat with a role chunk and no usage chunk unless asked', async () => {
    const s = await sim();
    const r = await postStream(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
      stream: true,
    });
    const ev = r.events as { object?: string; choices?: { delta: Record<string, unknown> }[] }[];
    expect(ev.map((e) => (typeof e === 'string' ? e : e.choices![0]!.delta))).toEqual([
      { role: 'assistant', content: '' },
      { content: ' the' },
      { content: ' quick' },
      '[DONE]',
    ]);
    expect(ev[0]!.object).toBe('chat.completion.chunk');
  });

  it.each([
    { name: 'bad JSON', path: '/v1/completions', body: '{nope' },
    { name: 'missing prompt', path: '/v1/completions', body: '{"max_tokens":2}' },
    {
      name: 'bad max_tokens',
      path: '/v1/chat/completions',
      body: '{"messages":[{"role":"u","content":"x"}],"max_tokens":-1}',
    },
  ])('answers 400 for $name', async ({ path, body }) => {
    const s = await sim();
    const r = await postJson(`${s.url}${path}`, body);
    expect(r.status).toBe(400);
    expect(r.json).toMatchObject({ error: { type: 'BadRequestError', code: 400 } });
    expect(s.records[0]).toMatchObject({ outcome: 'error', status: 400 });
  });

  it('generates a request id when absent', async () => {
    const s = await sim();
    const r = await postJson(`${s.url}/v1/completions`, { prompt: 'x' });
    expect(typeof r.headers['x-request-id']).toBe('string');
    expect(s.records[0]!.requestId).toBe(r.headers['x-request-id']);
  });

  it('waitForRequests resolves once enough requests arrived', async () => {
    const s = await sim();
    const waiting = s.waitForRequests(2);
    await postJson(`${s.url}/v1/completions`, { prompt: 'a' });
    await postJson(`${s.url}/v1/completions`, { prompt: 'b' });
    await waiting;
    await s.waitForRequests(1);
    expect(s.records).toHaveLength(2);
  });

  it('keeps only the latest maxRecords records', async () => {
    const s = await sim({ maxRecords: 2 });
    for (const id of ['r1', 'r2', 'r3'])
      await postJson(`${s.url}/v1/completions`, { prompt: 'a' }, { 'x-request-id': id });
    expect(s.records.map((r) => r.requestId)).toEqual(['r2', 'r3']);
    await s.waitForRequests(3);
  });

  it('maxRecords 0 keeps no records but still counts requests', async () => {
    const s = await sim({ maxRecords: 0 });
    await postJson(`${s.url}/v1/completions`, { prompt: 'a' });
    await s.waitForRequests(1);
    expect(s.records).toHaveLength(0);
  });

  it('queues beyond maxRunningSeqs and reports running/waiting', async () => {
    const s = await sim({ ...STALL, timing: { ...STALL.timing, maxRunningSeqs: 1 } });
    const ac = new AbortController();
    const body = { prompt: 'x', max_tokens: 5, stream: true };
    const first = request(`${s.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    const second = request(`${s.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    await s.waitForRequests(2);
    expect([s.running(), s.waiting(), s.inFlight()]).toEqual([1, 1, 2]);
    const metrics = (await getText(`${s.url}/metrics`)).text;
    expect(metrics).toContain('vllm:num_requests_running{model_name="sim-model"} 1\n');
    expect(metrics).toContain('vllm:num_requests_waiting{model_name="sim-model"} 1\n');
    expect(JSON.parse((await getText(`${s.url}/load`)).text)).toEqual({ server_load: 2 });
    ac.abort();
    await Promise.allSettled([first, second]);
    await s.waitForIdle();
    expect([s.running(), s.waiting(), s.inFlight()]).toEqual([0, 0, 0]);
    expect(s.records.map((r) => r.outcome)).toEqual(['aborted', 'aborted']);
  });

  it('close() is idempotent and ends in-flight requests', async () => {
    const s = await sim(STALL);
    const pending = request(`${s.url}/v1/completions`, {
      method: 'POST',
      body: JSON.stringify({ prompt: 'x', max_tokens: 3, stream: true }),
    });
    const res = await pending;
    await s.waitForRequests(1);
    await Promise.all([s.close(), s.close()]);
    await expect(res.body.text()).rejects.toThrow();
    expect(s.inFlight()).toBe(0);
    expect(s.records[0]!.outcome).toBe('aborted');
    await expect(s.waitForRequests(5)).rejects.toThrow('closed');
  });
});

describe('simulator: max_model_len', () => {
  const sim = simulatorsClosedAfterEach();

  it('lists it on its /v1/models cards and, when set, refuses longer requests as vLLM does', async () => {
    const s = await sim({ maxModelLen: 100, cache: { charsPerToken: 4 } });
    const models = JSON.parse((await getText(`${s.url}/v1/models`)).text) as {
      data: Array<{ id: string; max_model_len: number }>;
    };
    expect(models.data.map((m) => m.max_model_len)).toEqual([100]);
    expect(
      (await postJson(`${s.url}/v1/completions`, { prompt: 'x'.repeat(360), max_tokens: 10 })).status,
    ).toBe(200);
    const tooLong = await postJson(`${s.url}/v1/completions`, { prompt: 'x'.repeat(404) });
    expect(tooLong.status).toBe(400);
    expect(JSON.stringify(tooLong.json)).toContain('maximum context length is 100 tokens');
    const withOutput = await postJson(`${s.url}/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x'.repeat(360) }],
      max_completion_tokens: 20,
    });
    expect(withOutput.status).toBe(400);
    expect(JSON.stringify(withOutput.json)).toContain('is too large: 20');
    expect(s.inFlight()).toBe(0);
  });
});
