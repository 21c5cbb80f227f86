/**
 * The simulator's runtime LoRA endpoints (vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING): load and
 * unload change what it serves and lists, with vLLM's answers.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { Simulator } from '../../../src/sim/simulator.js';
import { getText, postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

const listed = async (url: string): Promise<string[]> =>
  (JSON.parse((await getText(`${url}/v1/models`)).text) as { data: Array<{ id: string }> }).data.map(
    (m) => m.id,
  );

/** POSTs JSON and reads the answer as text (vLLM answers a load with a plain-text line). */
async function post(s: Simulator, path: string, body: unknown): Promise<{ status: number; text: string }> {
  const r = await request(`${s.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, text: await r.body.text() };
}

describe('simulator: runtime LoRA adapters', () => {
  it('load, load again, unload, unload again: as vLLM answers them', async () => {
    const s = await start({ model: 'base', strictModels: true, lora: { maxLoras: 2 } });
    const load = (name: string) =>
      post(s, '/v1/load_lora_adapter', { lora_name: name, lora_path: `/a/${name}` });
    const unload = (name: string) => post(s, '/v1/unload_lora_adapter', { lora_name: name });
    expect((await postJson(`${s.url}/v1/completions`, { model: 'sql', prompt: 'x' })).status).toBe(404);
    expect(await load('sql')).toEqual({
      status: 200,
      text: "Success: LoRA adapter 'sql' added successfully.",
    });
    expect(await listed(s.url)).toEqual(['base', 'sql']);
    expect((await postJson(`${s.url}/v1/completions`, { model: 'sql', prompt: 'x' })).status).toBe(200);
    const again = await load('sql');
    expect(again.status).toBe(400);
    expect(again.text).toContain('has already been loaded');
    expect((await unload('sql')).status).toBe(200);
    expect(await listed(s.url)).toEqual(['base']);
    const gone = await unload('sql');
    expect(gone.status).toBe(404);
    expect(gone.text).toContain('cannot be found');
    expect((await post(s, '/v1/load_lora_adapter', { lora_name: 'x' })).status).toBe(400);
  });

  it('without LoRA the endpoints do not exist (404)', async () => {
    const s = await start();
    expect((await post(s, '/v1/load_lora_adapter', { lora_name: 'a', lora_path: '/a' })).status).toBe(404);
  });
});
