/**
 * End to end through a real Envoy 1.40: OpenAI clients -> Envoy -> (ext_proc) router -> simulated
 * vLLM workers. Load must rise and fall exactly with the life of each response, whatever ends it.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startSimulator } from '../../src/sim/simulator.js';

let stack: Stack;
let openai: OpenAI;

beforeAll(async () => {
  stack = await startStack({
    workers: 2,
    // No pacing: a stream is kept in flight by a simulator hold (released by the test), not by time.
    router: { policy: 'round_robin' },
  });
  openai = new OpenAI({ baseURL: `${stack.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
afterAll(async () => {
  const proc = stack.envoy.process;
  await stack.close();
  expect(proc.exitCode !== null || proc.signalCode !== null).toBe(true);
});
afterEach(async () => {
  for (const s of stack.sims) s.clearFaults();
  await expectAllLoadsZero(stack.router);
});

const totalLoad = () => stack.router.workers().reduce((n, w) => n + w.load, 0);

/** Holds the next stream on every worker (round robin picks one) after `afterChunks` SSE events. */
function holdNextStream(afterChunks: number): { release(): void } {
  const holds = stack.sims.map((s) => s.hold({ afterChunks }));
  return { release: () => holds.forEach((h) => h.release()) };
}

describe('regular routing through Envoy', () => {
  it('serves a non-streaming completion (openai client) and releases the load', async () => {
    const before = stack.router.workers().reduce((n, w) => n + w.processed, 0);
    const res = await openai.completions.create({ model: 'sim-model', prompt: 'Hello there', max_tokens: 3 });
    expect(res.choices[0]?.text.length).toBeGreaterThan(0);
    expect(res.usage?.completion_tokens).toBe(3);
    await waitFor(() => totalLoad() === 0);
    expect(stack.router.workers().reduce((n, w) => n + w.processed, 0)).toBe(before + 1);
  });

  it('holds the load from response headers until the last streamed chunk (openai client, chat)', async () => {
    // The role chunk and 5 of the 6 token chunks go out; the last token and [DONE] wait for release.
    const HELD = 6;
    const hold = holdNextStream(HELD);
    const stream = await openai.chat.completions.create({
      model: 'sim-model',
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 6,
      stream: true,
    });
    const loadsWhileStreaming: number[] = [];
    let chunks = 0;
    try {
      for await (const chunk of stream) {
        chunks += 1;
        if (!chunk.choices[0]?.finish_reason) loadsWhileStreaming.push(totalLoad());
        if (chunks === HELD) hold.release();
      }
    } finally {
      hold.release();
    }
    expect(chunks).toBeGreaterThanOrEqual(6);
    expect(loadsWhileStreaming.length).toBeGreaterThan(0);
    expect(new Set(loadsWhileStreaming)).toEqual(new Set([1]));
    await waitFor(() => totalLoad() === 0);
  });

  it('releases the load when the client aborts mid-stream', async () => {
    const hold = holdNextStream(2);
    const stream = await openai.completions.create({
      model: 'sim-model',
      prompt: 'abort me',
      max_tokens: 50,
      stream: true,
    });
    let seen = 0;
    try {
      for await (const _chunk of stream) {
        if (++seen === 2) {
          expect(totalLoad()).toBe(1);
          stream.controller.abort();
          break;
        }
      }
    } finally {
      hold.release();
    }
    await waitFor(() => totalLoad() === 0);
    await waitFor(() => stack.sims.every((s) => s.inFlight() === 0));
    const text = await metricsText(stack.router);
    expect(text).toMatch(/vllm_router_requests_total\{route="completions",outcome="cancelled"\} [1-9]/);
  });

  it('releases the load when the worker resets the connection mid-stream', async () => {
    for (const s of stack.sims) s.injectFault({ resetAfterChunks: 2 });
    // Held after the first event until the client has the response headers: the reset then comes
    // mid-stream, not before Envoy forwarded the headers (which would be a 502 instead).
    const hold = holdNextStream(1);
    try {
      const stream = await openai.completions.create({
        model: 'sim-model',
        prompt: 'reset me',
        max_tokens: 20,
        stream: true,
      });
      hold.release();
      await expect(
        (async () => {
          for await (const _c of stream) {
            /* drain until the reset surfaces */
          }
        })(),
      ).rejects.toThrow();
    } finally {
      hold.release();
    }
    await waitFor(() => totalLoad() === 0);
  });

  it('releases the load when the worker answers 500, and the client sees the 500', async () => {
    for (const s of stack.sims) s.injectFault({ status: 500, message: 'boom' });
    const res = await fetch(`${stack.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-model', prompt: 'fail', max_tokens: 2 }),
    });
    expect(res.status).toBe(500);
    await res.text();
    await waitFor(() => totalLoad() === 0);
  });

  it('answers a malformed body with a JSON 400 and takes no load', async () => {
    const res = await fetch(`${stack.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model": "sim-model", "messages": [',
    });
    expect(res.status).toBe(400);
    expect(res.headers.get('content-type')).toContain('application/json');
    const body = (await res.json()) as { error: { code: string; message: string; type: string } };
    expect(body.error.code).toBe('invalid_json');
    expect(totalLoad()).toBe(0);
  });

  it('ignores a client-supplied x-gateway-destination-endpoint', async () => {
    const rogue = await startSimulator({ timeScale: 0 });
    try {
      for (let i = 0; i < 4; i++) {
        const res = await fetch(`${stack.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-gateway-destination-endpoint': rogue.hostPort },
          body: JSON.stringify({ model: 'sim-model', prompt: `steer ${i}`, max_tokens: 1 }),
        });
        expect(res.status).toBe(200);
        await res.text();
      }
      expect(rogue.records.length).toBe(0);
    } finally {
      await rogue.close();
    }
  });

  it('routes body-less requests such as GET /v1/models', async () => {
    const res = await fetch(`${stack.url}/v1/models`);
    expect(res.status).toBe(200);
    const body = (await res.json()) as { data: Array<{ id: string }> };
    expect(body.data[0]?.id).toBe('sim-model');
  });
});

describe('a worker that is down', () => {
  it('gets a 503 from Envoy itself and the router releases the load', async () => {
    const dead = await startStack({ workers: 1, router: { policy: 'round_robin' } });
    try {
      await dead.sims[0]?.close();
      const res = await fetch(`${dead.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: 'anyone?', max_tokens: 1 }),
      });
      expect(res.status).toBe(503);
      await res.text();
      await expectAllLoadsZero(dead.router);
    } finally {
      await dead.close();
    }
  });
});
