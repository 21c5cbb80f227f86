/**
 * End to end through a real Envoy: the router learns how many characters a prompt token is from the
 * usage the workers report, so a model whose tokenizer is far from the default 4 characters per token
 * is measured right without a tokenizer on the router.
 *
 * The simulators tokenize with the fixture tokenizer (vocabulary 512, ~1.8 characters per token); the
 * router has none. After a few streamed responses with `stream_options.include_usage` (and non-streamed
 * ones, whose usage is always there), the decision header's prompt tokens for a new prompt match what
 * the worker then reports, and /metrics shows the ratio. With learning off it stays at 4.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { HfTokenizer } from '../../src/tokenize/hf-tokenizer.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/tokenizer', import.meta.url));
const tokenizer = HfTokenizer.load(FIXTURE);

const stacks: Stack[] = [];
async function stack(learn: boolean): Promise<Stack> {
  const s = await startStack({
    workers: 2,
    // With KV events on, a simulator counts a prompt's tokens with its tokenizer (nobody subscribes).
    sim: { tokenizer, kvEvents: {} },
    router: { decisionHeader: true, responseBodySample: 1, charsPerTokenLearn: learn },
  });
  stacks.push(s);
  return s;
}
afterEach(async () => {
  for (const s of stacks) await expectAllLoadsZero(s.router);
});
afterAll(async () => {
  await Promise.all(stacks.map((s) => s.close()));
});

/** `n` pseudo-random lowercase words (seeded): the fixture's small vocabulary splits them into short tokens. */
function text(seed: number, n: number): string {
  let x = seed + 1;
  const next = () => (x = (x * 1103515245 + 12345) & 0x7fffffff);
  const word = () =>
    Array.from({ length: 3 + (next() % 5) }, () => String.fromCharCode(97 + (next() % 26))).join('');
  return `doc ${seed}: ` + Array.from({ length: n }, word).join(' ');
}

interface Answer {
  promptTokens: number;
  /** The prompt tokens the router counted (the decision header's `uncached=x/N`). */
  routerTokens: number;
}

async function complete(s: Stack, prompt: string, stream: boolean): Promise<Answer> {
  const res = await fetch(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      prompt,
      max_tokens: 2,
      ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
    }),
  });
  expect(res.status).toBe(200);
  const body = await res.text();
  const usage = /"prompt_tokens":(\d+)/.exec(body);
  const header = /uncached=\d+\/(\d+)/.exec(res.headers.get('x-vllm-router-decision') ?? '');
  expect(usage, body).not.toBeNull();
  expect(header).not.toBeNull();
  return { promptTokens: Number(usage![1]), routerTokens: Number(header![1]) };
}

async function learnedRatio(s: Stack): Promise<number | undefined> {
  const line = (await metricsText(s.router))
    .split('\n')
    .find((l) => l.startsWith('vllm_router_chars_per_token{model="sim-model"}'));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('characters per token learned from the workers usage', () => {
  it("counts a new prompt's tokens as the worker does once it has seen a few responses", async () => {
    const s = await stack(true);
    let chars = 0;
    let tokens = 0;
    for (let i = 0; i < 6; i++) {
      const prompt = text(i, 300);
      const a = await complete(s, prompt, i % 2 === 0);
      chars += prompt.length;
      tokens += a.promptTokens;
    }
    const real = chars / tokens;
    expect(real).toBeLessThan(2); // the fixture's small vocabulary: far from the default 4
    expect(await learnedRatio(s)).toBeCloseTo(real, 1);
    const fresh = await complete(s, text(99, 300), true);
    expect(Math.abs(fresh.routerTokens - fresh.promptTokens) / fresh.promptTokens).toBeLessThan(0.1);
  });

  it('keeps the configured ratio with --no-chars-per-token-learn', async () => {
    const s = await stack(false);
    for (let i = 0; i < 6; i++) await complete(s, text(i, 300), true);
    const fresh = await complete(s, text(99, 300), true);
    expect(fresh.routerTokens).toBe(Math.ceil(text(99, 300).length / 4));
    expect(fresh.promptTokens).toBeGreaterThan(2 * fresh.routerTokens); // undercounted
    expect(await learnedRatio(s)).toBeUndefined();
  });
});
