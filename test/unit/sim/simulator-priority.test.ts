/**
 * The simulator's `--scheduling-policy`: with `priority`, requests waiting for a running slot go by
 * their body's `priority` (lower first), as vLLM's; with the default `fcfs`, a priority other than 0
 * is refused with vLLM's 400.
 */
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import type { Simulator } from '../../../src/sim/simulator.js';
import { waitFor } from '../../support/wait-for.js';
import { getText, postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const start = simulatorsClosedAfterEach();

/** A streamed completion (`maxTokens` tokens); resolves with its text once the response ends. */
function completion(
  s: Simulator,
  prompt: string,
  priority?: number,
  signal?: AbortSignal,
  maxTokens = 2,
): Promise<string> {
  return request(`${s.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'm',
      prompt,
      max_tokens: maxTokens,
      stream: true,
      ...(priority === undefined ? {} : { priority }),
    }),
    ...(signal ? { signal } : {}),
  })
    .then((r) => r.body.text())
    .catch(() => '');
}

const waiting = async (s: Simulator) =>
  Number(/^vllm:num_requests_waiting\{[^}]*\} (\S+)$/m.exec((await getText(`${s.url}/metrics`)).text)?.[1]);

describe('simulator: scheduling policy', () => {
  it('priority: a request with a lower priority starts before the ones that came before it', async () => {
    const s = await start({
      model: 'm',
      schedulingPolicy: 'priority',
      timeScale: 1,
      timing: { overheadMs: 0, prefillMsPerToken: 0, baseItlMs: 1, maxRunningSeqs: 1 },
    });
    const blocker = new AbortController();
    const first = completion(s, 'blocker', 0, blocker.signal, 1_000_000); // decodes until aborted
    await waitFor(() =>
      s.records.some(
        (r) =>
          r.body !== undefined &&
          (r.body as { prompt?: string }).prompt === 'blocker' &&
          r.firstByteMs !== undefined,
      ),
    );
    const finished: string[] = [];
    const all = [
      ['batch-1', 5],
      ['batch-2', 5],
      ['plain', undefined],
      ['interactive', -3],
    ].map(([prompt, p]) =>
      completion(s, prompt as string, p as number | undefined).then(() => finished.push(prompt as string)),
    );
    await waitFor(async () => (await waiting(s)) === 4);
    blocker.abort();
    await first;
    await Promise.all(all);
    expect(finished).toEqual(['interactive', 'plain', 'batch-1', 'batch-2']);
  });

  it('fcfs (the default): a priority other than 0 gets vLLM 400; 0 and none are served', async () => {
    const s = await start({ model: 'm' });
    const refused = await postJson(`${s.url}/v1/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      priority: -1,
    });
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.json)).toContain('Got priority -1 but Priority scheduling is not enabled.');
    const zero = await postJson(`${s.url}/v1/completions`, { model: 'm', prompt: 'hi', priority: 0 });
    expect(zero.status).toBe(200);
    const bad = await postJson(`${s.url}/v1/completions`, { model: 'm', prompt: 'hi', priority: 1.5 });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.json)).toContain('priority must be an integer');
  });
});
