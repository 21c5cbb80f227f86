/**
 * End to end through a real Envoy: a fleet of two base models with LoRA adapters, whose simulated vLLM
 * workers answer like vLLM for a model they do not serve (404 NotFoundError). The router reads each
 * worker's GET /v1/models (discovery/models-poller.ts), so a request for an adapter or a second served
 * name reaches only the workers that serve it (workers/served-models.ts): none gets a 404. Without the
 * lists (the metrics label alone names only the first served name), those names are unknown and half
 * of their requests land on the other model's workers.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SimulatorOptions } from '../../src/sim/simulator.js';
import { postThrough, startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

let stack: Stack;
type Spec = Required<Pick<SimulatorOptions, 'model' | 'lora'>> & Pick<SimulatorOptions, 'aliases'>;
const LLAMA: Spec = {
  model: 'llama',
  aliases: ['llama-chat'],
  lora: { maxLoras: 2, loadMs: 5, modules: ['sql-lora'] },
};
const QWEN: Spec = { model: 'qwen', lora: { maxLoras: 2, loadMs: 5, modules: ['med-lora'] } };
const FLEET = [LLAMA, LLAMA, QWEN, QWEN];

interface WorkerView {
  url: string;
  servedModels: { base: string[]; adapters: Record<string, string> } | null;
}

beforeAll(async () => {
  stack = await startStack({
    workers: 4,
    sim: (i) => ({ ...FLEET[i]!, strictModels: true, timeScale: 1, timing: { baseItlMs: 5, overheadMs: 1 } }),
    router: { policy: 'cache_aware', scrapeIntervalMs: 50, modelsIntervalMs: 5_000, decisionHeader: true },
  });
  await waitFor(
    async () =>
      (await adminJson<WorkerView[]>(stack.router, '/workers')).body.every(
        (w) => Object.keys(w.servedModels?.adapters ?? {}).length > 0,
      ),
    { timeoutMs: 10_000, message: "every worker's /v1/models read" },
  );
});
afterAll(async () => {
  await stack?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(stack.router);
  await Promise.all(stack.sims.map((s) => s.waitForIdle()));
});

async function complete(model: string, prompt: string): Promise<{ status: number; servedBy: string }> {
  const r = await postThrough(stack, { model, prompt, max_tokens: 4 });
  return { status: r.status, servedBy: r.worker };
}

const workersOf = (base: string): string[] =>
  stack.sims.filter((_, i) => FLEET[i]!.model === base).map((s) => s.url);

describe('a fleet of two base models with LoRA adapters', () => {
  it('the router shows what each worker serves, from its /v1/models list', async () => {
    const views = (await adminJson<WorkerView[]>(stack.router, '/workers')).body;
    for (const v of views) {
      const spec = FLEET[stack.sims.findIndex((s) => s.url === v.url)]!;
      expect(v.servedModels?.base).toEqual([spec.model, ...(spec.aliases ?? [])]);
      expect(v.servedModels?.adapters).toEqual(
        Object.fromEntries((spec.lora.modules ?? []).map((m) => [m, spec.model])),
      );
    }
    const text = await (await fetch(`http://127.0.0.1:${stack.router.adminPort}/metrics`)).text();
    expect(text).toMatch(/vllm_router_worker_served_model\{[^}]*model="sql-lora",parent="llama"\} 1/);
    expect(text).toMatch(/vllm_router_models_polls_total\{outcome="listed"\} [1-9]/);
  });

  it.each([
    ['an adapter goes only to the workers of its base model', 'sql-lora', 'llama'],
    ["the other model's adapter", 'med-lora', 'qwen'],
    ['a second served name goes only where it is served', 'llama-chat', 'llama'],
  ])('%s', async (_name, model, base) => {
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) => complete(model, `${'abcdefghijklmnop'[i]} question for ${model}`)),
    );
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(workersOf(base)).toContain(r.servedBy);
    }
  });

  it('a model nobody serves is still answered by a worker (its 404), not refused by the router', async () => {
    const r = await complete('mistral', 'hello');
    expect(r.status).toBe(404);
    expect(stack.sims.map((s) => s.url)).toContain(r.servedBy);
  });
});

describe("the fleet's model list", () => {
  it('GET /v1/models lists every model the fleet serves, answered by the router for the fleet', async () => {
    // Each worker lists only its own models; passed on, the answer would depend on the worker reached.
    const expected = ['llama', 'llama-chat', 'med-lora', 'qwen', 'sql-lora'];
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${stack.url}/v1/models`);
      expect(res.status).toBe(200);
      const body = (await res.json()) as {
        object: string;
        data: Array<{ id: string; object: string; parent: string | null }>;
      };
      expect(body.object).toBe('list');
      expect(body.data.map((m) => m.id).sort()).toEqual(expected);
      expect(body.data.find((m) => m.id === 'sql-lora')?.parent).toBe('llama');
      expect(body.data.every((m) => m.object === 'model')).toBe(true);
    }
    expect(await metricsText(stack.router)).toMatch(
      /vllm_router_requests_total\{route="other",outcome="answered"\} 4/,
    );
  });
});
