/**
 * The simulator serves LoRA adapters as vLLM with --max-loras does, and reports them on /metrics as
 * vLLM does; the router's own parser (load/metrics-parse.ts) reads the page.
 */
import { request } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { parseLoadFigures } from '../../../src/load/metrics-parse.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { waitFor } from '../../support/wait-for.js';
import { getText } from './sim-test-client.js';

/** A streaming request for `model` that decodes until the test aborts it. */
function hold(s: Simulator, model: string): { ac: AbortController; done: Promise<unknown> } {
  const ac = new AbortController();
  const done = request(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'hello', max_tokens: 100, stream: true }),
    signal: ac.signal,
  })
    .then((r) => r.body.text())
    .catch(() => undefined);
  return { ac, done };
}

const figures = async (s: Simulator) => parseLoadFigures((await getText(`${s.url}/metrics`)).text);

describe('simulator: LoRA adapters (vLLM --max-loras)', () => {
  let s: Simulator | undefined;
  afterEach(async () => {
    await s?.close();
    s = undefined;
  });

  it('runs one adapter at a time with max_loras 1: the other waits, the base model does not; /metrics says so', async () => {
    s = await startSimulator({
      model: 'base',
      lora: { maxLoras: 1, loadMs: 0 },
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 },
    });
    const sim = s;
    const idle = await figures(sim);
    expect(idle.lora).toEqual({ maxLora: 1, running: [], waiting: [] });
    expect(idle.modelName).toBe('base');

    const sql = hold(sim, 'sql');
    await waitFor(async () => (await figures(sim)).running === 1);
    const chat = hold(sim, 'chat');
    const base = hold(sim, 'base');
    await waitFor(async () => {
      const f = await figures(sim);
      return f.running === 2 && f.waiting === 1; // sql and base run, chat waits for the slot
    });
    expect((await figures(sim)).lora).toEqual({ maxLora: 1, running: ['sql'], waiting: ['chat'] });

    sql.ac.abort();
    await waitFor(async () => (await figures(sim)).lora?.running.join() === 'chat');
    // The page keeps every combination seen; the parser reads the latest one.
    const page = (await getText(`${sim.url}/metrics`)).text;
    expect(page.match(/^vllm:lora_requests_info\{/gm)?.length).toBeGreaterThanOrEqual(3);
    expect((await figures(sim)).lora).toEqual({ maxLora: 1, running: ['chat'], waiting: [] });
    expect(sim.loraLoads).toBe(2);

    chat.ac.abort();
    base.ac.abort();
    await Promise.all([sql.done, chat.done, base.done]);
    await sim.waitForIdle();
    // Back to no adapter at all: that combination was the first one on the page (creation order, as
    // prometheus_client keeps it), so only its value tells that it is current, and the parser reads it.
    await waitFor(async () => (await figures(sim)).lora?.running.length === 0);
    const lines = (await getText(`${sim.url}/metrics`)).text.match(/^vllm:lora_requests_info\{.*$/gm) ?? [];
    expect(lines[0]).toContain('running_lora_adapters="",waiting_lora_adapters=""');
    expect(lines.length).toBeGreaterThanOrEqual(3);
    expect((await figures(sim)).lora).toEqual({ maxLora: 1, running: [], waiting: [] });
  });

  it('without lora every model name is the base model: nothing waits, no LoRA metric', async () => {
    s = await startSimulator({
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 },
    });
    const sim = s;
    const a = hold(sim, 'sql');
    const b = hold(sim, 'chat');
    await waitFor(async () => (await figures(sim)).running === 2);
    expect((await figures(sim)).lora).toBeUndefined();
    a.ac.abort();
    b.ac.abort();
    await Promise.all([a.done, b.done]);
    await sim.waitForIdle();
  });

  it('a second served name is the base model, not an adapter: it takes no slot', async () => {
    s = await startSimulator({
      model: 'base',
      aliases: ['base-chat'],
      lora: { maxLoras: 1, loadMs: 0 },
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 600_000 },
    });
    const sim = s;
    const alias = hold(sim, 'base-chat');
    const sql = hold(sim, 'sql');
    await waitFor(async () => (await figures(sim)).running === 2);
    expect((await figures(sim)).lora).toEqual({ maxLora: 1, running: ['sql'], waiting: [] });
    alias.ac.abort();
    sql.ac.abort();
    await Promise.all([alias.done, sql.done]);
    await sim.waitForIdle();
  });
});
