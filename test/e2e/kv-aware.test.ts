/**
 * Exact prefix routing through a real Envoy: two simulated vLLM workers publish KV-cache events
 * (real ZMQ, tagged-map encoding, int hashes, replay endpoints) and tokenize with the fixture
 * tokenizer (chat template included), exactly as the router does. A worker that evicted a prompt's
 * prefix loses its traffic; the worker that holds it gets it, whatever the router sent before.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Router } from '../../src/router.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { HfTokenizer } from '../../src/tokenize/hf-tokenizer.js';
import { expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/tokenizer', import.meta.url));
const tokenizer = HfTokenizer.load(FIXTURE);
const BLOCKS = 16; // capacity per worker, in 16-token blocks

let sims: Simulator[] = [];
let router: Router;
let envoy: EnvoyHandle;
beforeAll(async () => {
  for (let i = 0; i < 2; i++) {
    sims.push(
      await startSimulator({
        timeScale: 0,
        tokenizer,
        cache: { capacityBlocks: BLOCKS },
        kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0' },
      }),
    );
  }
  router = await startTestRouter({
    workers: sims.map((s) => s.url),
    policy: 'kv_aware',
    decisionHeader: true,
    tokenizer: [`sim-model=${FIXTURE}`],
    kvEventSource: sims.map((s) => `${s.url}=${s.kvEvents!.endpoint}`),
    kvEventReplay: sims.map((s) => `${s.url}=${s.kvEvents!.replayEndpoint!}`),
  });
  envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
});
afterAll(async () => {
  await envoy?.close();
  await router?.close();
  await Promise.all(sims.map((s) => s.close()));
  sims = [];
});

/** A metric's value for a worker (0 when absent). */
async function metric(name: string, labels: string): Promise<number> {
  const text = await metricsText(router);
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}
/** Lookups that fell back to the approximate tree, every reason. */
async function fallbackLookups(): Promise<number> {
  const text = await metricsText(router);
  return text
    .split('\n')
    .filter((l) => l.startsWith('vllm_router_kv_fallback_lookups_total{'))
    .reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}
const indexBlocks = (sim: Simulator): Promise<number> =>
  metric('vllm_router_kv_index_blocks', `worker="${sim.url}"`);

const chat = (topic: string, words: number) => ({
  model: 'sim-model',
  messages: [
    { role: 'system', content: 'You are a helpful assistant. Answer the question using the context below.' },
    {
      role: 'user',
      content: `${topic}: ${'the worker that holds the prefix answers faster '.repeat(words)}`,
    },
  ],
  max_tokens: 2,
});

async function direct(sim: Simulator, body: unknown, path = '/v1/chat/completions'): Promise<void> {
  const res = await fetch(`${sim.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  await res.text();
}

async function viaEnvoy(
  body: unknown,
  path = '/v1/chat/completions',
): Promise<{ worker: string; branch: string }> {
  const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  await res.text();
  const d = res.headers.get('x-vllm-router-decision') ?? '';
  return { worker: /worker=(\S+)/.exec(d)?.[1] ?? '', branch: /branch=(\w+)/.exec(d)?.[1] ?? '' };
}

describe('kv_aware through Envoy', () => {
  it('a worker that evicted a prefix loses its traffic; the worker that holds it gets it', async () => {
    const [a, b] = sims as [Simulator, Simulator];
    const prompt = chat('report', 12); // ~10 full blocks
    const flood = chat('unrelated', 40); // more than the whole cache: evicts everything else
    await waitFor(async () => (await metric('vllm_router_kv_event_replays_total', 'outcome="ok"')) >= 1, {
      message: 'subscriptions connected',
    });

    // Both workers compute the prompt (direct traffic, e.g. from another router replica).
    await direct(a, prompt);
    await direct(b, prompt);
    const held = b.cache.usedBlocks;
    expect(held).toBeGreaterThanOrEqual(8);
    await waitFor(async () => (await indexBlocks(a)) === held && (await indexBlocks(b)) === held, {
      message: 'both workers indexed',
    });
    // How far the index trails each worker is on /metrics (live batches since the subscription).
    expect(await metric('vllm_router_kv_event_lag_seconds_count', `worker="${a.url}"`)).toBeGreaterThan(0);

    // The router itself sends the prompt to one of them (both hold it: the fair tie-break picks).
    const first = await viaEnvoy(prompt);
    expect(first.branch).toBe('exact_hit');
    const holder = first.worker.includes(`:${a.port}`) ? a : b;
    const other = holder === a ? b : a;

    // The holder evicts the prompt under pressure (BlockRemoved events): its traffic moves.
    await direct(holder, flood);
    await waitFor(async () => (await indexBlocks(holder)) === holder.cache.usedBlocks, {
      message: 'eviction indexed',
    });
    const after = await viaEnvoy(prompt);
    expect(after).toEqual({ worker: expect.stringContaining(`:${other.port}`), branch: 'exact_hit' });
    // The worker that received it found it cached (its usage reports the cached tokens).
    const last = other.records[other.records.length - 1]!;
    expect(last.cachedTokens).toBeGreaterThanOrEqual(held * 16 - 16);
    await expectAllLoadsZero(router);
  });

  it('an Anthropic Messages request is matched on the exact tokens of the chat conversation it stands for', async () => {
    const [, b] = sims as [Simulator, Simulator];
    const convo = chat('anthropic', 12);
    // Worker b computed the conversation as a chat request (direct traffic).
    await direct(b, convo);
    await waitFor(async () => (await indexBlocks(b)) === b.cache.usedBlocks, { message: 'b indexed' });
    const [system, user] = convo.messages as unknown as [{ content: string }, { content: string }];
    const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        max_tokens: 2,
        system: [
          { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.1.7; cch=5eed;' },
          { type: 'text', text: system.content },
        ],
        messages: [{ role: 'user', content: [{ type: 'text', text: user.content }] }],
      }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const d = res.headers.get('x-vllm-router-decision') ?? '';
    expect(/branch=(\w+)/.exec(d)?.[1]).toBe('exact_hit');
    expect(/worker=([^;\s]+)/.exec(d)?.[1]).toBe(b.url);
    // And b found it cached: the same prompt tokens, as vLLM renders the conversation either way.
    const last = b.records[b.records.length - 1]!;
    expect(last.path).toBe('/v1/messages');
    expect(last.cachedTokens).toBeGreaterThanOrEqual(b.records[b.records.length - 2]!.promptTokens - 16);
    await expectAllLoadsZero(router);
  });

  it('a batched completions prompt is matched prompt by prompt, on the worker holding them', async () => {
    const [, b] = sims as [Simulator, Simulator];
    // ~90 tokens each: together well within a worker's 16 blocks.
    const prompts = ['the first of two prompts ', 'a second prompt, unlike the first '].map((p) =>
      p.repeat(6),
    );
    // Worker b computed each prompt on its own (direct traffic).
    for (const prompt of prompts)
      await direct(b, { model: 'sim-model', prompt, max_tokens: 1 }, '/v1/completions');
    await waitFor(async () => (await indexBlocks(b)) === b.cache.usedBlocks, { message: 'b indexed' });
    const fallbacks = await fallbackLookups();
    // vLLM runs a batch as one engine request per prompt: each prompt's own prefix counts.
    const routed = await viaEnvoy({ model: 'sim-model', prompt: prompts, max_tokens: 1 }, '/v1/completions');
    expect(routed).toEqual({ worker: expect.stringContaining(`:${b.port}`), branch: 'exact_hit' });
    // b found both prompts cached, all but each one's last partial block.
    const last = b.records[b.records.length - 1]!;
    expect(last.cachedTokens).toBeGreaterThanOrEqual(last.promptTokens - 2 * 16);
    expect(last.cachedTokens).toBeGreaterThan(0);
    expect(await fallbackLookups()).toBe(fallbacks); // answered exactly, not by the approximate tree
    await expectAllLoadsZero(router);
  });

  it("an exact hit counts as a router cache hit on /metrics (the dashboard's hit rate), not as a miss", async () => {
    const [, b] = sims as [Simulator, Simulator];
    const convo = chat('dashboard', 12);
    await direct(b, convo); // b computed it (direct traffic)
    await waitFor(async () => (await indexBlocks(b)) === b.cache.usedBlocks, { message: 'b indexed' });
    const hits = await metric('vllm_router_cache_hits_total', 'role="regular"');
    const misses = await metric('vllm_router_cache_misses_total', 'role="regular"');
    expect(await viaEnvoy(convo)).toEqual({
      worker: expect.stringContaining(`:${b.port}`),
      branch: 'exact_hit',
    });
    expect(await metric('vllm_router_cache_hits_total', 'role="regular"')).toBe(hits + 1);
    expect(await metric('vllm_router_cache_misses_total', 'role="regular"')).toBe(misses);
    await expectAllLoadsZero(router);
  });

  it('a request the router cannot tokenize falls back to the approximate tree (counted)', async () => {
    const before = await metric('vllm_router_kv_fallback_lookups_total', 'reason="multimodal"');
    const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }],
        max_tokens: 1,
      }),
    });
    await res.text();
    expect(res.status).toBe(200);
    expect(await metric('vllm_router_kv_fallback_lookups_total', 'reason="multimodal"')).toBe(before + 1);
    await expectAllLoadsZero(router);
  });
});

describe('kv_aware through Envoy, restarted on a long-running fleet', () => {
  it('a restarted router whose replay no longer reaches a long-cached system prompt still routes it to the worker holding it', async () => {
    // vLLM keeps its last `buffer_steps` batches for replay (here 2): a router started after more than
    // that never sees the system prompt's BlockStored, and every prompt extending it is dropped from
    // its index (`unknown_parent`) for as long as the worker keeps it.
    const fleet: Simulator[] = [];
    let envoyOf: EnvoyHandle | undefined;
    let routerOf: Router | undefined;
    const start = async (): Promise<void> => {
      routerOf = await startTestRouter({
        workers: fleet.map((s) => s.url),
        policy: 'kv_aware',
        decisionHeader: true,
        prefixHomeMargin: 0, // the reference rule: a prompt nobody holds goes to the least loaded
        tokenizer: [`sim-model=${FIXTURE}`],
        kvEventSource: fleet.map((s) => `${s.url}=${s.kvEvents!.endpoint}`),
        kvEventReplay: fleet.map((s) => `${s.url}=${s.kvEvents!.replayEndpoint!}`),
      });
      envoyOf = await startEnvoy({ routers: [{ host: '127.0.0.1', port: routerOf.grpcPort }] });
    };
    const stop = async (): Promise<void> => {
      await envoyOf?.close();
      await routerOf?.close();
      envoyOf = undefined;
      routerOf = undefined;
    };
    const send = async (body: unknown): Promise<{ res: Response; worker: string; branch: string }> => {
      const res = await fetch(`http://127.0.0.1:${envoyOf!.listenerPort}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
      const d = res.headers.get('x-vllm-router-decision') ?? '';
      return {
        res,
        worker: /worker=([^;\s]+)/.exec(d)?.[1] ?? '',
        branch: /branch=(\w+)/.exec(d)?.[1] ?? '',
      };
    };
    const routerMetric = async (name: string, labels: string): Promise<number> => {
      const text = await metricsText(routerOf!);
      const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
      return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    };
    const system = 'You are the support assistant of the river harbor. Policies follow. '.repeat(20);
    const ask = (q: string, stream = false) => ({
      model: 'sim-model',
      messages: [
        { role: 'system', content: system },
        { role: 'user', content: q },
      ],
      max_tokens: 2,
      ...(stream ? { stream: true } : {}),
    });
    try {
      for (let i = 0; i < 2; i++) {
        fleet.push(
          await startSimulator({
            timeScale: 0,
            tokenizer,
            cache: { capacityBlocks: 512 },
            kvEvents: { replayEndpoint: 'tcp://127.0.0.1:0', bufferSteps: 2 },
          }),
        );
      }
      // The first router puts the system prompt on a worker (nobody holds it: the least loaded).
      await start();
      const first = await send(ask('When does the harbor open?'));
      await first.res.text();
      const holder = fleet.find((s) => s.url === first.worker)!;
      const other = fleet.find((s) => s !== holder)!;
      expect(holder).toBeDefined();
      await expectAllLoadsZero(routerOf!);
      await stop();
      // Long-running fleet: the holder's later traffic pushes that BlockStored out of its replay buffer.
      for (const topic of ['tides', 'ferries', 'storms']) await direct(holder, chat(topic, 4));

      // The router restarts: the holder's replay is partial, the system prompt invisible to it.
      await start();
      await waitFor(
        async () =>
          (await routerMetric(
            'vllm_router_kv_event_replays_total',
            `worker="${holder.url}",outcome="partial"`,
          )) >= 1,
        { message: "the holder's replay ends partial" },
      );
      // Its first question goes where the first router sent it (the same rule on the same fleet), and is
      // held open there: the holder is now busier than the other worker.
      const hold = holder.hold({ afterChunks: 1 });
      const second = await send(ask('Where do the ferries leave from?', true));
      expect(second.worker).toBe(holder.url);
      await hold.reached();
      expect(holder.records[holder.records.length - 1]!.cachedTokens).toBeGreaterThan(100); // it holds it
      await waitFor(
        async () =>
          (await routerMetric('vllm_router_kv_events_dropped_total', `reason="unknown_parent"`)) > 0,
        { message: 'the continuation dropped as unknown_parent' },
      );

      // The next question still goes to the holder, not to the idle worker that would recompute it.
      const fallbacks = await routerMetric(
        'vllm_router_kv_fallback_lookups_total',
        'reason="incomplete_index"',
      );
      const third = await send(ask('Is there a storm warning today?'));
      await third.res.text();
      expect({ worker: third.worker, branch: third.branch }).toEqual({
        worker: holder.url,
        branch: 'exact_hit',
      });
      expect(other.records.length).toBe(0);
      expect(holder.records[holder.records.length - 1]!.cachedTokens).toBeGreaterThan(100);
      expect(
        await routerMetric('vllm_router_kv_fallback_lookups_total', 'reason="incomplete_index"'),
      ).toBeGreaterThan(fallbacks);
      hold.release();
      await second.res.text();
      await expectAllLoadsZero(routerOf!);
    } finally {
      await stop();
      await Promise.all(fleet.map((s) => s.close()));
    }
  });
});
