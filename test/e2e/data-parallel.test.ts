/**
 * Data-parallel vLLM servers (`vllm serve --data-parallel-size 4`: four engines, each with its own KV
 * cache and queue, behind one API server) through a real Envoy 1.40, with
 * `--intra-node-data-parallel-size 4`: the router schedules every engine as a worker of its own and
 * pins each request to it with `X-data-parallel-rank` (workers/data-parallel.ts).
 *
 * - Chat sessions sent concurrently stay, turn after turn, on the one engine that holds their
 *   conversation, and the sessions spread over the engines: vLLM's own balancer, which reads only the
 *   engines' queues, never gets to choose (left to it, concurrent turns land on whichever engine is
 *   least busy and recompute their history there).
 * - An engine kept busy by traffic the router never saw is avoided: the router reads each engine's
 *   series (`engine="<rank>"`) on the server's one /metrics page.
 * - In P/D, prefill legs and decodes on data-parallel servers are pinned to their engines the same way,
 *   and a prompt's prefill legs stay on the engine that cached it.
 * Every load is back to 0 after each test.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Router } from '../../src/router.js';
import { startDpSimulator, type DpSimulator } from '../../src/sim/dp-server.js';
import type { Simulator } from '../../src/sim/simulator.js';
import { adminJson, expectAllLoadsZero, metricsText, startTestRouter } from '../support/router-fixture.js';
import { directLoad } from '../support/direct-load.js';
import { waitFor } from '../support/wait-for.js';

const RANKS = 4;
let servers: DpSimulator[] = [];
let router: Router;
let envoy: EnvoyHandle;
let url: string;

beforeAll(async () => {
  for (let i = 0; i < 2; i++) {
    servers.push(
      await startDpSimulator({
        id: `dp${i}`,
        dataParallelSize: RANKS,
        timeScale: 1,
        timing: { baseItlMs: 5, overheadMs: 1 },
      }),
    );
  }
  router = await startTestRouter({
    workers: servers.map((s) => s.url),
    intraNodeDataParallelSize: RANKS,
    decisionHeader: true,
    scrapeIntervalMs: 50,
    // A scrape gap of over a second on a starved machine must not turn routing back to in-flight counts.
    loadStaleMs: 60_000,
  });
  envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  url = `http://127.0.0.1:${envoy.listenerPort}`;
});
afterAll(async () => {
  await envoy?.close();
  await router?.close();
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
});
afterEach(async () => {
  await expectAllLoadsZero(router);
  await Promise.all(servers.flatMap((s) => s.ranks.map((r) => r.waitForIdle())));
});

const engines = (): Simulator[] => servers.flatMap((s) => [...s.ranks]);

/** The engine that served the request whose last message holds `marker`, with its record. */
function servedWith(marker: string) {
  for (const sim of engines()) {
    for (const r of sim.records) {
      const messages = (r.body as { messages?: Array<{ content: unknown }> }).messages ?? [];
      if (JSON.stringify(messages.at(-1)?.content ?? '').includes(marker)) return { sim, record: r };
    }
  }
  return undefined;
}

async function chat(
  messages: Array<{ role: string; content: string }>,
  maxTokens = 4,
): Promise<{ text: string; decision: string }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', messages, max_tokens: maxTokens }),
  });
  expect(res.status).toBe(200);
  const body = (await res.json()) as { choices: Array<{ message: { content: string } }> };
  return {
    text: body.choices[0]?.message.content ?? '',
    decision: res.headers.get('x-vllm-router-decision') ?? '',
  };
}

describe('data-parallel ranks scheduled by the router (--intra-node-data-parallel-size)', () => {
  it('lists every rank as a worker of its own', async () => {
    const { body } = await adminJson<Array<{ url: string; key?: string; dpRank?: number }>>(
      router,
      '/workers',
    );
    expect(body.map((w) => w.key).sort()).toEqual(
      servers.flatMap((s) => Array.from({ length: RANKS }, (_, r) => `${s.url}@${r}`)).sort(),
    );
    expect(body.every((w) => w.dpRank !== undefined && w.key === `${w.url}@${w.dpRank}`)).toBe(true);
  });

  it('keeps each concurrent chat session on the engine holding its conversation, and spreads the sessions', async () => {
    const sessions = Array.from({ length: 8 }, (_, s) => s);
    const context = (s: number): string =>
      `Session ${s} shares this design document with the assistant. `.repeat(40) + `(document ${s})`;
    const history = new Map<number, Array<{ role: string; content: string }>>(
      sessions.map((s) => [s, [{ role: 'system', content: context(s) }]]),
    );
    const served = new Map<number, Simulator[]>();
    const cachedShare: number[] = [];
    for (let turn = 0; turn < 4; turn++) {
      // Every session's turn at once: the engines' queues differ while they run.
      await Promise.all(
        sessions.map(async (s) => {
          const marker = `session ${s} turn ${turn}`;
          const messages = history.get(s)!;
          messages.push({ role: 'user', content: `${marker}: what does the document say next?` });
          const { text, decision } = await chat(messages);
          expect(decision).toMatch(/worker=http:\/\/127\.0\.0\.1:\d+@[0-3];/);
          messages.push({ role: 'assistant', content: text });
          const hit = servedWith(marker);
          expect(hit, marker).toBeDefined();
          served.set(s, [...(served.get(s) ?? []), hit!.sim]);
          if (turn > 0) cachedShare.push(hit!.record.cachedTokens / hit!.record.promptTokens);
        }),
      );
    }
    for (const s of sessions) {
      const [first, ...rest] = served.get(s)!;
      expect(
        rest.map((sim) => sim.id),
        `session ${s}`,
      ).toEqual(rest.map(() => first!.id));
    }
    // Later turns find their history cached on their engine.
    expect(Math.min(...cachedShare)).toBeGreaterThan(0.5);
    // The sessions spread over the engines (8 sessions, 8 engines; a pile-up would use one or two).
    expect(new Set(sessions.map((s) => served.get(s)![0]!.id)).size).toBeGreaterThanOrEqual(4);
    // Every request was pinned by the router; the servers' own balancer placed none.
    for (const server of servers) {
      expect(server.balanced.reduce((a, b) => a + b, 0)).toBe(0);
      expect(server.badRank).toBe(0);
    }
    expect(servers.flatMap((s) => s.pinned).reduce((a, b) => a + b, 0)).toBe(sessions.length * 4);
  });

  it("replaces a client's own rank header with the engine it chose", async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      // Out of range for these servers: passed on, vLLM would refuse it (400).
      headers: { 'content-type': 'application/json', 'x-data-parallel-rank': '9' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'a client that names its own rank' }],
        max_tokens: 2,
      }),
    });
    expect(res.status).toBe(200);
    await res.json();
    const key = /worker=(\S+?);/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '';
    const [server, rank] = [key.slice(0, key.lastIndexOf('@')), Number(key.slice(key.lastIndexOf('@') + 1))];
    const engine = servers.find((s) => s.url === server)!.ranks[rank]!;
    expect(engine.records.some((r) => JSON.stringify(r.body).includes('names its own rank'))).toBe(true);
    expect(servers.every((s) => s.badRank === 0)).toBe(true);
  });

  it('avoids an engine kept busy by traffic the router never saw (its own engine series)', async () => {
    const server = servers[0]!;
    const busyKey = `${server.url}@1`;
    const direct = await directLoad(server.ranks[1]!, 6);
    try {
      await waitFor(
        async () => {
          const { body } = await adminJson<
            Array<{ key?: string; loadSample: { running?: number } | null; routingLoad: { source: string } }>
          >(router, '/workers');
          const w = body.find((x) => x.key === busyKey);
          return (w?.loadSample?.running ?? 0) >= 6 && w?.routingLoad.source === 'scraped';
        },
        { timeoutMs: 10_000, message: "a scrape showing engine 1's direct load" },
      );
      const routed: string[] = [];
      for (let i = 0; i < 10; i++) {
        const { decision } = await chat([
          { role: 'user', content: `fresh question ${i}: what is ${i} + ${i}?` },
        ]);
        routed.push(/worker=(\S+?);/.exec(decision)?.[1] ?? '');
      }
      expect(routed).not.toContain(busyKey);
      expect(routed.every((k) => /@[0-3]$/.test(k))).toBe(true);
      // Its series on /metrics is the engine's own, apart from its siblings'.
      const metrics = await metricsText(router);
      expect(metrics).toMatch(
        new RegExp(`vllm_router_worker_scraped_running\\{[^}]*worker="${busyKey}"[^}]*\\} ([6-9]|\\d\\d)`),
      );
      // ... which do not carry the busy engine's load (a page summed over engines would give each 6+).
      for (const rank of [0, 2, 3]) {
        const m = new RegExp(
          `vllm_router_worker_scraped_running\\{[^}]*worker="${server.url}@${rank}"[^}]*\\} (\\d+)`,
        ).exec(metrics);
        expect(Number(m?.[1]), `engine ${rank}`).toBeLessThan(6);
      }
    } finally {
      direct.abort();
    }
    await waitFor(() => server.ranks[1]!.inFlight() === 0, {
      timeoutMs: 10_000,
      message: 'direct load aborted',
    });
  });
});

describe('P/D: data-parallel prefill and decode servers', () => {
  let prefill: DpSimulator;
  let decode: DpSimulator;
  let pdRouter: Router;
  let pdEnvoy: EnvoyHandle;
  beforeAll(async () => {
    prefill = await startDpSimulator({
      id: 'p',
      dataParallelSize: 2,
      role: 'prefill',
      kvConnector: 'nixl',
      timeScale: 0,
    });
    decode = await startDpSimulator({
      id: 'd',
      dataParallelSize: 2,
      role: 'decode',
      kvConnector: 'nixl',
      timeScale: 0,
    });
    pdRouter = await startTestRouter({
      mode: 'pd',
      prefill: [prefill.url],
      decode: [decode.url],
      kvConnector: 'nixl',
      intraNodeDataParallelSize: 2,
    });
    pdEnvoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: pdRouter.grpcPort }] });
  });
  afterAll(async () => {
    await pdEnvoy?.close();
    await pdRouter?.close();
    await decode?.close();
    await prefill?.close();
  });

  it("pins every prefill leg and every decode to an engine; a prompt's prefills stay on the engine that cached it", async () => {
    const { body } = await adminJson<Array<{ role: string; key?: string }>>(pdRouter, '/workers');
    expect(body.map((w) => `${w.role} ${w.key}`).sort()).toEqual(
      [
        `decode ${decode.url}@0`,
        `decode ${decode.url}@1`,
        `prefill ${prefill.url}@0`,
        `prefill ${prefill.url}@1`,
      ].sort(),
    );
    const documents = [0, 1, 2].map((d) => `Document ${d} for the prefill engines. `.repeat(40));
    for (let round = 0; round < 2; round++) {
      for (const [d, doc] of documents.entries()) {
        const res = await fetch(`http://127.0.0.1:${pdEnvoy.listenerPort}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'sim-model',
            messages: [
              { role: 'system', content: doc },
              { role: 'user', content: `document ${d}, question ${round}` },
            ],
            max_tokens: 3,
          }),
        });
        expect(res.status).toBe(200);
        await res.json();
      }
    }
    for (const server of [prefill, decode]) {
      expect(server.pinned.reduce((a, b) => a + b, 0)).toBe(6);
      expect(server.balanced.reduce((a, b) => a + b, 0)).toBe(0);
    }
    // Each document's second prefill leg ran on the engine that computed its first, and found it cached.
    for (const d of [0, 1, 2]) {
      const legs = prefill.ranks.flatMap((sim) =>
        sim.records
          .filter((r) => JSON.stringify(r.body).includes(`document ${d}, question`))
          .map((r) => ({ engine: sim.id, cached: r.cachedTokens / r.promptTokens })),
      );
      expect(legs).toHaveLength(2);
      expect(legs[1]!.engine, `document ${d}`).toBe(legs[0]!.engine);
      expect(legs[1]!.cached).toBeGreaterThan(0.5);
    }
    await expectAllLoadsZero(pdRouter);
  });
});
