/**
 * A prefill worker killed and restarted on the same ports (new process: new engine ids) while a client
 * keeps sending: no client sees an error (a prefill leg refused by the dead worker is retried on the
 * other one before any decode leg exists), and the restarted worker is back in rotation within a
 * bounded wait (half-open re-admission on a passed health check instead of the 30 s breaker
 * cool-down; Mooncake: its engine ids asked again). The breaker timing itself is checked with a fake
 * clock in test/unit/health/worker-health.test.ts; here the wait is on the event "the restarted
 * worker got a request", bounded by half the breaker's 30 s cool-down: arriving before it proves the
 * half-open path brought the worker back (the 3 s is ~ten 200 ms health rounds; on a starved CI
 * machine Envoy, the router and the client share two cores, so the wall clock is not asserted on).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero } from '../support/router-fixture.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import type { KvConnector } from '../../src/sim/kv-transfer.js';

const BOUND_MS = 15_000;

async function send(url: string, i: number): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      prompt: `restart ${i} `.repeat(6),
      max_tokens: 3,
      stream: i % 2 === 0,
    }),
  });
  await res.text();
  return res.status;
}

describe.each<KvConnector>(['nixl', 'mooncake'])('prefill kill and restart (%s)', (connector) => {
  let s: PdStack;
  let restarted: Simulator | undefined;
  beforeAll(async () => {
    s = await startPdStack({
      prefill: 2,
      decode: 1,
      prefillSim: connector === 'mooncake' ? { dpSize: 2 } : {},
      fixedPrefillPorts: true,
      router: {
        kvConnector: connector,
        prefillRetries: 1,
        healthCheckIntervalMs: 200,
        healthCheckTimeoutMs: 1000,
        cbCooldownMs: 30_000,
      },
    });
  });
  afterAll(async () => {
    await s?.close();
    await restarted?.close();
  });

  it('no client error, and the restarted worker gets traffic again within the bound', async () => {
    const [a, b] = s.prefill as [Simulator, Simulator];
    const statuses: number[] = [];
    let i = 0;
    while (a.records.length === 0 || b.records.length === 0) statuses.push(await send(s.url, i++));

    const { port, bootstrapPort } = a;
    await a.close();
    const servedByB = b.records.length;
    for (let k = 0; k < 10; k++) statuses.push(await send(s.url, i++));
    expect(b.records.length - servedByB).toBe(10); // every request completed through the survivor

    restarted = await startSimulator({
      role: 'prefill',
      kvConnector: connector,
      timeScale: 0,
      port,
      bootstrapPort,
      ...(connector === 'mooncake' ? { dpSize: 2 } : {}),
    });
    expect(restarted.engineIds).not.toEqual(a.engineIds);
    let stop = false;
    const client = (async () => {
      while (!stop) statuses.push(await send(s.url, i++));
    })();
    let bound: NodeJS.Timeout | undefined;
    const back = await Promise.race([
      restarted.waitForRequests(1).then(() => true),
      new Promise<boolean>((resolve) => (bound = setTimeout(() => resolve(false), BOUND_MS))),
    ]);
    clearTimeout(bound);
    stop = true;
    await client;
    expect(back).toBe(true);
    // The client keeps going a little: the restarted worker serves complete requests.
    for (let k = 0; k < 6; k++) statuses.push(await send(s.url, i++));
    expect(statuses.filter((x) => x !== 200)).toEqual([]);
    expect(restarted.records.some((r) => r.outcome === 'ok')).toBe(true);
    expect(s.decode[0]!.records.every((r) => r.outcome === 'ok')).toBe(true);
    await expectAllLoadsZero(s.router);
  });
});
