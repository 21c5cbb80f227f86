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
