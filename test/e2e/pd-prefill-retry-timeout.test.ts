/**
 * envoy/envoy.yaml's message_timeout (90 s) is chosen so that "the router's own prefill timeout
 * fires first and the client gets the router's JSON error rather than Envoy's" (docs/deploy-envoy.md).
 * But the router retries a timed-out prefill leg (--prefill-retries, default 1) with a fresh
 * --prefill-timeout-ms (60 s) each: up to 120 s of prefill inside one ext_proc reply. Scaled down here
 * (4 s prefill timeout, 7 s message_timeout), with both prefill workers stuck: the timeout bounds the
 * prefill phase, retries included.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { defaultConfig } from '../../src/config.js';

describe('sequential P/D: a stuck prefill leg and its retry vs the ext_proc message_timeout', () => {
  let s: PdStack;
  let envoy: EnvoyHandle;
  const d = defaultConfig();
  // As shipped (message_timeout 90 s / prefill timeout 60 s = 1.5), message_timeout lies between one
  // prefill timeout and two (a retry with a fresh timeout of its own): 4 s and 7 s here, so the
  // router's error has 3 s to reach Envoy first even on a loaded 2-core machine.
  const prefillTimeoutMs = 4000;
  const messageTimeout = '7s';
  beforeAll(async () => {
    s = await startPdStack({
      prefill: 2,
      decode: 1,
      router: { prefillTimeoutMs, prefillRetries: d.prefillRetries },
    });
    envoy = await startEnvoy({
      routers: [{ host: '127.0.0.1', port: s.router.grpcPort }],
      messageTimeout,
    });
  });
  afterAll(async () => {
    await envoy?.close();
    await s?.close();
  });

  it("the client gets the router's JSON prefill error, not Envoy's message-timeout reply", async () => {
    expect(d.prefillRetries).toBeGreaterThanOrEqual(1);
    const holds = s.prefill.map((p) => p.hold({ count: 5 }));
    try {
      const r = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', prompt: 'stuck prefill', max_tokens: 2 }),
      });
      const text = await r.text();
      expect(`${r.status} ${text.slice(0, 200)}`).toMatch(/^502 \{"error"/);
    } finally {
      holds.forEach((h) => h.release());
    }
  });
});
