/**
 * End to end through a real Envoy: vLLM's runtime LoRA endpoints (`VLLM_ALLOW_RUNTIME_LORA_UPDATING`)
 * sent to the gateway load the adapter on every worker, so its requests then succeed wherever the
 * router sends them: on both regular workers, and in P/D mode on the prefill worker (its leg) and the
 * decode worker alike. Passed on as before, the load reached one worker: the other regular worker
 * answered the adapter's requests with 404, and in P/D mode every prefill leg did.
 * The workers are strict about models (a model they do not serve is vLLM's 404). Every test ends with
 * every load back to 0. A worker that joins after the load gets the adapter from the router, and so
 * does a static worker whose process restarted at its URL (down for the health checks, then back: a
 * new vLLM process has lost the adapters loaded at run time, while its registration is the same),
 * also when no health check saw it down (its metrics show a later process start time).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { adminJson, expectAllLoadsZero } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import type { Router } from '../../src/router.js';
import { startSimulator } from '../../src/sim/simulator.js';
import { freePorts } from '../support/free-ports.js';

const LORA_SIM = { model: 'base', strictModels: true, lora: { maxLoras: 2 } };

let stack: Stack | PdStack | undefined;
afterEach(async () => {
  if (stack) {
    await expectAllLoadsZero(stack.router);
    await stack.close();
  }
  stack = undefined;
});

async function post(url: string, path: string, body: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

const chat = (url: string, i: number) =>
  post(url, '/v1/chat/completions', {
    model: 'sql',
    messages: [{ role: 'user', content: `question ${i}` }],
    max_tokens: 2,
  });

/** Waits until the router's model lists show the adapter on `n` workers (routing then knows it). */
async function listedOn(router: Router, n: number): Promise<void> {
  await waitFor(
    async () =>
      (
        await adminJson<Array<{ servedModels: { adapters: Record<string, string> } | null }>>(
          router,
          '/workers',
        )
      ).body.filter((w) => w.servedModels?.adapters.sql === 'base').length === n,
    { timeoutMs: 10_000, message: `the adapter listed on ${n} workers` },
  );
}

describe('runtime LoRA adapters through the gateway', () => {
  it('regular mode: the load reaches both workers and the adapter is served on both', async () => {
    const s = await startStack({
      workers: 2,
      sim: LORA_SIM,
      router: { policy: 'round_robin', modelsIntervalMs: 60_000, decisionHeader: true },
    });
    stack = s;
    const loaded = await post(s.url, '/v1/load_lora_adapter', {
      lora_name: 'sql',
      lora_path: '/adapters/sql',
    });
    expect(loaded.status, JSON.stringify(loaded.json)).toBe(200);
    expect(
      (loaded.json as { workers: Array<{ url: string; status: number }> }).workers.map((w) => w.status),
    ).toEqual([200, 200]);
    await listedOn(s.router, 2); // read again at once, not at the next round a minute later
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await chat(s.url, i)).status);
    expect(statuses).toEqual(Array(6).fill(200));
    expect(
      s.sims.map((x) => x.records.filter((r) => (r.body as { model?: string }).model === 'sql').length),
    ).toEqual([3, 3]);

    // A worker that joins afterwards gets the adapter too, and serves its requests.
    const late = await startSimulator({ timeScale: 0, ...LORA_SIM });
    try {
      const reg = await fetch(`http://127.0.0.1:${s.router.adminPort}/workers`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ role: 'regular', url: late.url }),
      });
      expect(reg.status).toBe(200);
      await listedOn(s.router, 3);
      for (let i = 0; i < 6; i++) expect((await chat(s.url, 10 + i)).status).toBe(200);
      expect(late.records.filter((r) => r.outcome === 'ok').length).toBe(2);
      expect(
        (
          await fetch(
            `http://127.0.0.1:${s.router.adminPort}/workers?role=regular&url=${encodeURIComponent(late.url)}`,
            {
              method: 'DELETE',
            },
          )
        ).status,
      ).toBe(200);
      await waitFor(() => s.router.workers().length === 2, { message: 'the late worker gone' });
    } finally {
      await late.close();
    }

    const unloaded = await post(s.url, '/v1/unload_lora_adapter', { lora_name: 'sql' });
    expect(unloaded.status).toBe(200);
    await listedOn(s.router, 0);
  });

  it('P/D mode: the load reaches the prefill and the decode worker; the prefill legs succeed', async () => {
    const s = await startPdStack({
      prefillSim: LORA_SIM,
      decodeSim: LORA_SIM,
      router: { modelsIntervalMs: 60_000 },
    });
    stack = s;
    const loaded = await post(s.url, '/v1/load_lora_adapter', {
      lora_name: 'sql',
      lora_path: '/adapters/sql',
    });
    expect(loaded.status, JSON.stringify(loaded.json)).toBe(200);
    const roles = (loaded.json as { workers: Array<{ roles: string[] }> }).workers.map((w) => w.roles);
    expect(roles.flat().sort()).toEqual(['decode', 'prefill']);
    await listedOn(s.router, 2);
    for (let i = 0; i < 3; i++) expect((await chat(s.url, i)).status).toBe(200);
    const legs = [...s.prefill, ...s.decode].map(
      (x) =>
        x.records.filter((r) => (r.body as { model?: string }).model === 'sql' && r.outcome === 'ok').length,
    );
    expect(legs).toEqual([3, 3]);
  });

  it('a static worker that restarts gets the adapter back and serves its requests again', async () => {
    const ports = await freePorts(2);
    const s = await startStack({
      workers: 2,
      sim: (i) => ({ ...LORA_SIM, port: ports[i]! }),
      router: {
        policy: 'round_robin',
        modelsIntervalMs: 60_000,
        healthCheckIntervalMs: 50,
        healthFailureThreshold: 1,
        healthSuccessThreshold: 1,
      },
    });
    stack = s;
    const loaded = await post(s.url, '/v1/load_lora_adapter', {
      lora_name: 'sql',
      lora_path: '/adapters/sql',
    });
    expect(loaded.status, JSON.stringify(loaded.json)).toBe(200);
    await listedOn(s.router, 2);

    // b's vLLM process restarts (a crash, an OOM kill, `docker restart`): down, then up at its URL.
    const b = s.sims[1]!;
    const healthy = () => s.router.workers().find((w) => w.url === b.url)?.healthy;
    await b.close();
    await waitFor(() => healthy() === false, { timeoutMs: 10_000, message: 'b seen down' });
    const restarted = await startSimulator({ timeScale: 0, ...LORA_SIM, port: ports[1]! });
    s.sims[1] = restarted;
    expect(restarted.url).toBe(b.url);
    await waitFor(() => healthy() === true, { timeoutMs: 10_000, message: 'b seen up again' });

    // The router loads the adapter it remembers on the restarted process.
    const serves = () => (restarted as unknown as { serves(m: string): boolean }).serves('sql');
    await waitFor(serves, { timeoutMs: 10_000, message: 'the restarted worker never got the adapter back' });
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await chat(s.url, 20 + i)).status);
    expect(statuses).toEqual(Array(6).fill(200));
    expect(restarted.records.filter((r) => (r.body as { model?: string }).model === 'sql').length).toBe(3);
  });

  it('a static worker restarted between two health checks gets the adapter back (its later process start time)', async () => {
    const ports = await freePorts(2);
    const s = await startStack({
      workers: 2,
      sim: (i) => ({ ...LORA_SIM, port: ports[i]! }),
      router: {
        policy: 'round_robin',
        modelsIntervalMs: 60_000,
        scrapeIntervalMs: 20,
        healthCheckIntervalMs: 60_000, // never sees it down: the restart falls between two checks
      },
    });
    stack = s;
    const loaded = await post(s.url, '/v1/load_lora_adapter', {
      lora_name: 'sql',
      lora_path: '/adapters/sql',
    });
    expect(loaded.status, JSON.stringify(loaded.json)).toBe(200);
    await listedOn(s.router, 2);

    const b = s.sims[1]!;
    await b.close();
    const restarted = await startSimulator({ timeScale: 0, ...LORA_SIM, port: ports[1]! });
    s.sims[1] = restarted;
    expect(restarted.url).toBe(b.url);
    const serves = () => (restarted as unknown as { serves(m: string): boolean }).serves('sql');
    await waitFor(serves, { timeoutMs: 10_000, message: 'the restarted worker never got the adapter back' });
    await listedOn(s.router, 2);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await chat(s.url, 40 + i)).status);
    expect(statuses).toEqual(Array(6).fill(200));
  });
});
