/**
 * End to end through a real Envoy, in P/D mode: an RL weight update's control calls reach the prefill
 * and the decode workers alike, and a paused engine of either role gets no leg while another of its
 * role runs (the router's own prefill legs included). Ends with every load back to 0.
 */
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import type { Simulator } from '../../src/sim/simulator.js';

let s: PdStack;
beforeAll(async () => {
  s = await startPdStack({ prefill: 2, decode: 2 });
});
afterAll(async () => {
  await s?.close();
});
afterEach(async () => {
  for (const sim of [...s.prefill, ...s.decode]) sim.resume();
  await expectAllLoadsZero(s.router);
});

async function control(
  path: string,
): Promise<{ status: number; body: { workers: Array<{ url: string; roles: string[] }> } }> {
  const r = await request(`${s.url}${path}`, { method: 'POST' });
  return { status: r.statusCode, body: JSON.parse(await r.body.text()) };
}

async function chat(q: string): Promise<void> {
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content: `${q} `.repeat(40) }],
      max_tokens: 3,
    }),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
}

const byUrl = (sims: readonly Simulator[]) =>
  sims.map((x) => `worker_url=${encodeURIComponent(x.url)}`).join('&');

describe('fleet control in P/D mode', () => {
  it('a pause reaches every prefill and decode worker, with its role', async () => {
    const paused = await control('/pause?mode=keep');
    expect(paused.status).toBe(200);
    const roles = Object.fromEntries(paused.body.workers.map((w) => [w.url, w.roles]));
    for (const p of s.prefill) expect(roles[p.url]).toEqual(['prefill']);
    for (const d of s.decode) expect(roles[d.url]).toEqual(['decode']);
    expect([...s.prefill, ...s.decode].every((x) => x.paused)).toBe(true);
    expect((await control('/resume')).status).toBe(200);
    expect([...s.prefill, ...s.decode].some((x) => x.paused)).toBe(false);
  });

  it('one prefill and one decode engine paused: every leg goes to the others', async () => {
    const [p0, p1] = s.prefill as [Simulator, Simulator];
    const [d0, d1] = s.decode as [Simulator, Simulator];
    const before = {
      p0: p0.records.length,
      d0: d0.records.length,
      p1: p1.records.length,
      d1: d1.records.length,
    };
    expect((await control(`/pause?mode=keep&${byUrl([p0, d0])}`)).status).toBe(200);
    for (let i = 0; i < 6; i++) await chat(`rollout ${i}`);
    expect([p0.records.length, d0.records.length]).toEqual([before.p0, before.d0]);
    expect(p1.records.length - before.p1).toBe(6);
    expect(d1.records.length - before.d1).toBe(6);
    expect([p0.requestsWhilePaused, d0.requestsWhilePaused]).toEqual([0, 0]);
    expect((await control(`/resume?${byUrl([p0, d0])}`)).status).toBe(200);
  });
});
