import { afterEach, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

let stack: Stack | undefined;
afterEach(async () => {
  if (stack) await expectAllLoadsZero(stack.router);
  await stack?.close();
  stack = undefined;
});

async function complete(url: string): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'hi', max_tokens: 2 }),
  });
  await res.arrayBuffer();
  return res.status;
}

describe('health wiring through Envoy', () => {
  it('active checks keep an unhealthy worker out; /workers and metrics show it', async () => {
    stack = await startStack({
      workers: 2,
      router: { policy: 'round_robin', healthCheckIntervalMs: 20, healthCheckTimeoutMs: 1000 },
    });
    const [a, b] = stack.sims;
    b!.injectFault({ status: 503 }, { path: '/health', count: 1_000_000 });
    await waitFor(() => stack!.router.workers().some((w) => w.url === b!.url && !w.healthy));
    const before = b!.records.length;
    for (let i = 0; i < 6; i++) expect(await complete(stack.url)).toBe(200);
    expect(b!.records.length).toBe(before);
    expect(a!.records.length).toBeGreaterThanOrEqual(6);
    const { body } = await adminJson<Array<{ url: string; health: unknown; healthy: boolean }>>(
      stack.router,
      '/workers',
    );
    expect(body.find((w) => w.url === b!.url)).toMatchObject({
      healthy: false,
      health: { active: 'unhealthy', breaker: 'closed' },
    });
    const text = await metricsText(stack.router);
    expect(text).toMatch(/vllm_router_cb_state\{[^}]*\} 0/);
    expect(text).toMatch(new RegExp(`vllm_router_worker_health\\{[^}]*worker="${b!.url}"[^}]*\\} 0`));
  });

  it('connect failures (Envoy local reply, no response headers for ext_proc) open the breaker', async () => {
    stack = await startStack({
      workers: 2,
      router: { policy: 'round_robin', cbFailureThreshold: 3, cbCooldownMs: 60_000 },
    });
    const [a, b] = stack.sims;
    await b!.close(); // health checks are off in tests: only passive outcomes can notice
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) statuses.push(await complete(stack.url));
    const down = () => stack!.router.workers().find((w) => w.url === b!.url)!;
    await waitFor(() => !down().healthy, { message: 'breaker open' });
    const failed = statuses.filter((s) => s !== 200).length;
    expect(failed).toBe(3);
    const { body } = await adminJson<Array<{ url: string; health: unknown }>>(stack.router, '/workers');
    expect(body.find((w) => w.url === b!.url)).toMatchObject({
      health: { active: 'healthy', breaker: 'open' },
    });
    expect(await metricsText(stack.router)).toMatch(
      new RegExp(`vllm_router_cb_state\\{[^}]*worker="${b!.url}"[^}]*\\} 1`),
    );
    for (let i = 0; i < 4; i++) expect(await complete(stack.url)).toBe(200);
    expect(a!.records.length).toBeGreaterThanOrEqual(13);
  });

  it('5xx responses open the breaker', async () => {
    stack = await startStack({ workers: 2, router: { policy: 'round_robin', cbFailureThreshold: 2 } });
    const [, b] = stack.sims;
    b!.injectFault({ status: 500 }, { count: 1000 });
    const statuses: number[] = [];
    for (let i = 0; i < 10; i++) statuses.push(await complete(stack.url));
    expect(statuses.filter((s) => s === 500)).toHaveLength(2);
    await waitFor(() => !stack!.router.workers().find((w) => w.url === b!.url)!.healthy);
  });
});
