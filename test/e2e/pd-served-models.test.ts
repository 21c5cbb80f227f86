/**
 * End to end through a real Envoy in P/D mode: prefill and decode pools that each mix two base models
 * (with a LoRA adapter and a second served name on one of them), on simulated vLLM workers that answer
 * a model they do not serve with vLLM's 404. Each leg's pool narrows to the workers serving the
 * request's model (workers/served-models.ts, from their /v1/models), so every request's prefill leg
 * and decode leg both land on its model's workers and none fails. A model no worker serves gets the
 * prefill workers' 404, as a client of one vLLM would.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SimulatorOptions } from '../../src/sim/simulator.js';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { adminJson, expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

const LLAMA: SimulatorOptions = {
  model: 'llama',
  aliases: ['llama-chat'],
  lora: { maxLoras: 2, loadMs: 0, modules: ['sql-lora'] },
};
const QWEN: SimulatorOptions = { model: 'qwen' };
const FLEET = [LLAMA, QWEN, LLAMA, QWEN];
const FAMILY: Record<string, string> = {
  llama: 'llama',
  'llama-chat': 'llama',
  'sql-lora': 'llama',
  qwen: 'qwen',
};

let stack: PdStack;
beforeAll(async () => {
  stack = await startPdStack({
    prefill: 4,
    decode: 4,
    prefillSim: (i) => ({ ...FLEET[i]!, strictModels: true }),
    decodeSim: (i) => ({ ...FLEET[i]!, strictModels: true }),
    router: { modelsIntervalMs: 5_000 },
  });
  await waitFor(
    async () =>
      (await adminJson<Array<{ servedModels: unknown }>>(stack.router, '/workers')).body.every(
        (w) => w.servedModels !== null,
      ),
    { timeoutMs: 10_000, message: "every worker's /v1/models read" },
  );
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
});

describe('P/D pools mixing two base models', () => {
  it("every request's prefill and decode legs go to its model's workers", async () => {
    const models = ['sql-lora', 'qwen', 'llama-chat', 'llama'];
    const statuses = await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const model = models[i % models.length]!;
        const res = await fetch(`${stack.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, prompt: `question ${i} for ${model}`, max_tokens: 4 }),
        });
        await res.arrayBuffer();
        return res.status;
      }),
    );
    expect(statuses).toEqual(Array.from({ length: 24 }, () => 200));
    for (const sims of [stack.prefill, stack.decode]) {
      sims.forEach((sim, i) => {
        for (const r of sim.records) {
          const model = (r.body as { model?: string }).model ?? '';
          expect(FAMILY[model], `${sim.role} ${sim.url} got ${model}`).toBe(FLEET[i]!.model);
        }
      });
      // Both workers of each family took part (no narrowing down to one).
      expect(sims.filter((s) => s.records.length > 0)).toHaveLength(4);
    }
  });

  it("a model no worker serves gets vLLM's 404 and its message, as from one vLLM, not a 502", async () => {
    for (const stream of [false, true]) {
      const res = await fetch(`${stack.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'mistral',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 4,
          stream,
        }),
      });
      const body = (await res.json()) as { error: { message: string } };
      expect({ status: res.status, message: body.error.message }).toEqual({
        status: 404,
        message: 'The model `mistral` does not exist.',
      });
    }
  });
});

/**
 * Prefill workers serving llama, decode workers serving llama and qwen (a model colocated on the
 * decode side only). `GET /v1/models` through Envoy lists what a request can be served for, and such
 * a request is served: whole on a decode worker (it prefills the prompt itself, as with
 * --pd-local-prefill-tokens), or, where a decode worker cannot (P2P NCCL), refused with a JSON 404
 * that says why, before any worker is asked.
 */
describe('P/D pools serving different models', () => {
  const decodeSim = (i: number): SimulatorOptions => ({
    model: i === 0 ? 'llama' : 'qwen',
    strictModels: true,
    kvBoth: true,
  });
  const start = async (kvConnector: 'nixl' | 'p2pnccl'): Promise<PdStack> => {
    const s = await startPdStack({
      prefill: 1,
      decode: 2,
      prefillSim: { model: 'llama', strictModels: true },
      decodeSim,
      router: { kvConnector, modelsIntervalMs: 5_000 },
    });
    await waitFor(
      async () =>
        (await adminJson<Array<{ servedModels: unknown }>>(s.router, '/workers')).body.every(
          (w) => w.servedModels !== null,
        ),
      { timeoutMs: 10_000, message: "every worker's /v1/models read" },
    );
    return s;
  };
  const listed = async (s: PdStack): Promise<string[]> => {
    const res = await fetch(`${s.url}/v1/models`);
    expect(res.status).toBe(200);
    return ((await res.json()) as { data: Array<{ id: string }> }).data.map((c) => c.id).sort();
  };
  const chat = (s: PdStack, model: string, stream: boolean) =>
    fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model,
        messages: [{ role: 'user', content: `hi ${model}` }],
        max_tokens: 4,
        stream,
      }),
    });

  it('a model only the decode workers serve is listed and served whole on its decode worker', async () => {
    const s = await start('nixl');
    try {
      expect(await listed(s)).toEqual(['llama', 'qwen']);
      for (const stream of [false, true]) {
        const res = await chat(s, 'qwen', stream);
        const text = await res.text();
        expect(res.status, text).toBe(200);
      }
      expect(s.prefill[0]!.records).toHaveLength(0);
      expect(s.decode[1]!.records.map((r) => (r.body as { model?: string }).model)).toEqual(['qwen', 'qwen']);
      // llama still runs split: a prefill leg, then its decode worker.
      const res = await chat(s, 'llama', false);
      await res.arrayBuffer();
      expect(res.status).toBe(200);
      expect(s.prefill[0]!.records).toHaveLength(1);
      expect(s.decode[0]!.records).toHaveLength(1);
      await expectAllLoadsZero(s.router);
    } finally {
      await s.close();
    }
  });

  it('P2P NCCL: such a model is not listed, and a request for it gets a JSON 404 saying why', async () => {
    const s = await start('p2pnccl');
    try {
      expect(await listed(s)).toEqual(['llama']);
      for (const stream of [false, true]) {
        const res = await chat(s, 'qwen', stream);
        expect(res.headers.get('content-type')).toContain('application/json');
        const body = (await res.json()) as { error: { message: string; code: string } };
        expect(res.status).toBe(404);
        expect(body.error.code).toBe('model_not_found');
        expect(body.error.message).toContain('The model `qwen` is served by decode workers only');
      }
      expect([...s.prefill, ...s.decode].flatMap((x) => x.records)).toHaveLength(0);
      await expectAllLoadsZero(s.router);
    } finally {
      await s.close();
    }
  });
});
