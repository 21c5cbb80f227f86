/**
 * End to end through a real Envoy: selective disaggregation (`--pd-local-prefill-tokens`). A request
 * whose prompt is short goes whole to a decode worker (started as vLLM's `kv_both`, so it prefills a
 * request without KV-transfer parameters itself): no prefill leg, no transfer. A long prompt still
 * gets its prefill leg, and so does a short question carrying an agent's tools (the template renders
 * them into the prompt). The metric counts the local ones. Ends with every load back to 0.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';

let s: PdStack;
beforeAll(async () => {
  s = await startPdStack({ decodeSim: { kvBoth: true }, router: { pdLocalPrefillTokens: 64 } });
});
afterAll(async () => {
  await s?.close();
});
afterEach(async () => {
  await expectAllLoadsZero(s.router);
});

async function chat(content: string, stream: boolean, tools?: unknown[], n?: number): Promise<string> {
  const res = await fetch(`${s.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      messages: [{ role: 'user', content }],
      tools,
      max_tokens: 3,
      stream,
      n,
    }),
  });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return text;
}

const local = async (reason = 'short_prompt') =>
  Number(
    new RegExp(`^vllm_router_pd_local_prefills_total\\{reason="${reason}"\\} (\\S+)$`, 'm').exec(
      await metricsText(s.router),
    )?.[1] ?? 0,
  );

describe('--pd-local-prefill-tokens', () => {
  it.each([false, true])('serves a short prompt on the decode worker alone (stream: %s)', async (stream) => {
    const before = { prefill: s.prefill[0]!.records.length, local: await local() };
    await chat('What time is it?', stream);
    expect(s.prefill[0]!.records.length).toBe(before.prefill); // no prefill leg
    const decoded = s.decode[0]!.records.at(-1)!;
    expect((decoded.body as { kv_transfer_params?: unknown }).kv_transfer_params).toBeUndefined();
    expect(decoded.promptTokens).toBeGreaterThan(0);
    expect(await local()).toBe(before.local + 1);
  });

  it('still disaggregates a long prompt', async () => {
    const before = { prefill: s.prefill[0]!.records.length, local: await local() };
    await chat('Summarise this report for the board. '.repeat(40), false);
    expect(s.prefill[0]!.records.length).toBe(before.prefill + 1);
    const decoded = s.decode[0]!.records.at(-1)!;
    expect((decoded.body as { kv_transfer_params?: unknown }).kv_transfer_params).toBeDefined();
    expect(await local()).toBe(before.local);
  });

  it("counts a request's tools: a short question with an agent's tools is a long prompt", async () => {
    // The chat template renders the tools into the prompt (~500 tokens here): too long to prefill on
    // the decode worker, though the question alone would be.
    const tools = Array.from({ length: 8 }, (_, k) => ({
      type: 'function',
      function: { name: `tool${k}`, description: 'Reads one file of the repository. '.repeat(7) },
    }));
    const before = { prefill: s.prefill[0]!.records.length, local: await local() };
    await chat('What time is it?', false, tools);
    expect(s.prefill[0]!.records.length).toBe(before.prefill + 1);
    const decoded = s.decode[0]!.records.at(-1)!;
    expect((decoded.body as { kv_transfer_params?: unknown }).kv_transfer_params).toBeDefined();
    expect(decoded.promptTokens).toBeGreaterThan(400);
    expect(await local()).toBe(before.local);
  });
});

describe('parallel sampling in P/D mode', () => {
  it('serves a long prompt with n > 1 on the decode worker alone: its children share one prefill there', async () => {
    // vLLM's connectors carry one child's KV cache per request: a prefill leg would hold the other
    // children's blocks on the prefill worker until its timeout.
    const before = { prefill: s.prefill[0]!.records.length, local: await local('parallel_sampling') };
    const text = await chat('Summarise this report for the board. '.repeat(40), false, undefined, 3);
    expect((JSON.parse(text) as { choices: unknown[] }).choices).toHaveLength(3);
    expect(s.prefill[0]!.records.length).toBe(before.prefill); // no prefill leg
    const decoded = s.decode[0]!.records.at(-1)!;
    expect((decoded.body as { kv_transfer_params?: unknown }).kv_transfer_params).toBeUndefined();
    expect(decoded.promptTokens).toBeGreaterThan(64);
    expect(await local('parallel_sampling')).toBe(before.local + 1);
  });
});
