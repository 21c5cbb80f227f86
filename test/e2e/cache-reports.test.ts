/**
 * End to end through a real Envoy: the router's prefix tree is corrected by what the worker reports.
 *
 * A worker loses its prefix cache behind the router's back (here vLLM's /reset_prefix_cache; in a
 * fleet, traffic from another router replica or a direct client evicting it). The tree still believes
 * the worker holds every prompt the router sent it. The next response's
 * `usage.prompt_tokens_details.cached_tokens` shows the prompt was not there: the router drops that
 * prompt's old picture and everything it sent the worker before, so the decision for an older prompt
 * no longer counts on a cache that is gone. With `--no-cache-reports` the stale belief stays.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startStack, type Stack } from '../support/stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';

const stacks: Stack[] = [];
async function stack(cacheReports: boolean): Promise<Stack> {
  const s = await startStack({
    workers: 1,
    router: { decisionHeader: true, responseBodySample: 1, cacheReports },
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

const OLDER = 'Older document. ' + 'alpha beta gamma delta '.repeat(100);
const NEWER = 'Newer document. ' + 'one two three four five '.repeat(100);

interface Answer {
  /** The decision header's `match=` (the share of the prompt the router believed the worker held). */
  match: number;
  cachedTokens: number;
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
  // vLLM writes prompt_tokens_details only when something was cached: none is a miss.
  expect(body).toMatch(/"prompt_tokens":\d+/);
  const cached = /"cached_tokens":(\d+)/.exec(body);
  const match = /match=([\d.]+)/.exec(res.headers.get('x-vllm-router-decision') ?? '');
  expect(match).not.toBeNull();
  return { match: Number(match![1]), cachedTokens: cached === null ? 0 : Number(cached[1]) };
}

async function reports(s: Stack): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const line of (await metricsText(s.router)).split('\n')) {
    const m = /^vllm_router_cache_reports_total\{.*outcome="(\w+)".*\} (\d+)/.exec(line);
    if (m) out[m[1]!] = Number(m[2]);
  }
  return out;
}

/** Both prompts sent and cached; the worker then loses its cache; the newer prompt comes back first. */
async function afterReset(s: Stack): Promise<void> {
  await complete(s, OLDER, true);
  await complete(s, NEWER, false);
  const again = await complete(s, NEWER, true);
  expect(again.match).toBeGreaterThan(0.9);
  expect(again.cachedTokens).toBeGreaterThan(0); // a real hit: the belief held
  await s.sims[0]!.resetPrefixCache();
  const lost = await complete(s, NEWER, true);
  expect(lost.match).toBeGreaterThan(0.9); // the router still believed it
  expect(lost.cachedTokens).toBe(0); // the worker had lost it
}

describe('the prefix tree checked against the workers cached_tokens', () => {
  it('a worker that lost its cache stops being credited with the prompts it held', async () => {
    const s = await stack(true);
    await afterReset(s);
    expect(await reports(s)).toEqual({ held: 1, stale: 1 });
    const older = await complete(s, OLDER, true);
    expect(older.match).toBe(0); // dropped with the stale prompt: sent to the worker before it
    expect(older.cachedTokens).toBe(0); // and rightly so
  });

  it('keeps the stale belief with --no-cache-reports', async () => {
    const s = await stack(false);
    await afterReset(s);
    expect(await reports(s)).toEqual({ held: 0, stale: 0 });
    const older = await complete(s, OLDER, true);
    expect(older.match).toBeGreaterThan(0.9);
    expect(older.cachedTokens).toBe(0);
  });
});
