/**
 * Every KV connector end to end through a real Envoy, against simulated decode workers that VALIDATE
 * what a real vLLM decode worker needs (src/sim/remote-kv-check.ts): Mooncake fetches
 * remote_bootstrap_addr + "/query" and pulls transfer_id from remote_engine_id, NIXL reads exactly the
 * blocks the prefill returned, P2P NCCL parses the peers from the request id. A wrong field fails the
 * request, as vLLM would.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { adminJson, expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import type { Config } from '../../src/config.js';
import type { SimulatorOptions } from '../../src/sim/simulator.js';
import type { RequestRecord } from '../../src/sim/simulator.js';

type Kv = Record<string, unknown>;
const kvOf = (r: RequestRecord): Kv => (r.body as { kv_transfer_params?: Kv }).kv_transfer_params ?? {};

async function send(url: string, i: number): Promise<{ status: number; text: string }> {
  const stream = i % 2 === 0;
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      model: 'sim-model',
      prompt: `connector check ${i} `.repeat(8),
      max_tokens: 4,
      stream,
    }),
  });
  return { status: res.status, text: await res.text() };
}

interface Case {
  name: string;
  router: Partial<Config>;
  prefillSim?: SimulatorOptions;
  check(
    s: PdStack,
    decodes: RequestRecord[],
    prefillOf: (id: string) => [PdStack['prefill'][number], RequestRecord],
  ): void;
}

const CASES: Case[] = [
  {
    name: 'NIXL (sequential, params echoed)',
    router: { kvConnector: 'nixl' },
    check(_s, decodes, prefillOf) {
      for (const d of decodes) {
        const [p, pr] = prefillOf(d.requestId);
        expect(kvOf(d)).toMatchObject({
          do_remote_prefill: true,
          remote_engine_id: p.engineIds[pr.dpRank ?? 0],
          remote_port: p.bootstrapPort,
        });
      }
    },
  },
  {
    name: 'Mooncake (bootstrap engine ids, DP ranks, overlapped legs)',
    router: { kvConnector: 'mooncake' },
    prefillSim: { dpSize: 2 },
    check(_s, decodes, prefillOf) {
      const ranks = new Set<number>();
      for (const d of decodes) {
        const [p, pr] = prefillOf(d.requestId);
        ranks.add(pr.dpRank!);
        expect(pr.headers['x-data-parallel-rank']).toBe(String(pr.dpRank));
        expect(kvOf(pr)).toEqual({
          do_remote_decode: true,
          do_remote_prefill: false,
          transfer_id: `xfer-${d.requestId}`,
        });
        expect(kvOf(d)).toEqual({
          do_remote_decode: false,
          do_remote_prefill: true,
          remote_bootstrap_addr: `http://127.0.0.1:${p.bootstrapPort}`,
          remote_engine_id: p.engineIds[pr.dpRank!],
          transfer_id: `xfer-${d.requestId}`,
        });
      }
      expect([...ranks].sort()).toEqual([0, 1]);
    },
  },
  {
    name: 'MoRI-IO READ (sequential)',
    router: { kvConnector: 'moriio' },
    check(_s, decodes, prefillOf) {
      for (const d of decodes) {
        const [, pr] = prefillOf(d.requestId);
        expect(kvOf(d)).toMatchObject({ do_remote_prefill: true, transfer_id: kvOf(pr).transfer_id });
        expect(d.requestId).toMatch(/^___prefill_addr_/);
      }
    },
  },
  {
    name: 'MoRI-IO WRITE (concurrent)',
    router: { kvConnector: 'moriio', pdDispatch: 'concurrent' },
    check(_s, decodes, prefillOf) {
      for (const d of decodes) {
        const [, pr] = prefillOf(d.requestId);
        expect(kvOf(d)).toEqual({
          do_remote_decode: false,
          do_remote_prefill: true,
          remote_engine_id: null,
          remote_block_ids: null,
          transfer_id: kvOf(pr).transfer_id,
        });
      }
    },
  },
  {
    name: 'P2P NCCL (peers in the request id)',
    router: { kvConnector: 'p2pnccl' },
    check(s, decodes, prefillOf) {
      for (const d of decodes) {
        const [p] = prefillOf(d.requestId);
        expect(d.p2p).toEqual({
          prefillAddr: p.hostPort,
          decodeAddr: expect.stringMatching(/^127\.0\.0\.1:/),
        });
        expect(s.decode.some((x) => x.hostPort === d.p2p!.decodeAddr)).toBe(true);
      }
    },
  },
];

describe.each(CASES)('P/D through Envoy with validating workers: $name', (c) => {
  let s: PdStack;
  beforeAll(async () => {
    s = await startPdStack({
      prefill: 2,
      decode: 2,
      prefillSim: c.prefillSim,
      router: { prefillPolicy: 'round_robin', decodePolicy: 'round_robin', ...c.router },
    });
  });
  afterAll(async () => s?.close());

  it('serves every request, streamed or not, and the decode workers accept every KV handover', async () => {
    const results = [];
    for (let i = 0; i < 8; i++) results.push(await send(s.url, i));
    expect(results.map((r) => r.status)).toEqual(Array(8).fill(200));
    for (const [i, r] of results.entries()) if (i % 2 === 0) expect(r.text).toContain('[DONE]');
    const decodes = s.decode.flatMap((d) => d.records);
    expect(decodes).toHaveLength(8);
    expect(decodes.map((d) => d.outcome)).toEqual(Array(8).fill('ok'));
    const prefillOf = (id: string): [PdStack['prefill'][number], RequestRecord] => {
      for (const p of s.prefill) {
        const r = p.findRecord(id);
        if (r) return [p, r];
      }
      throw new Error(`no prefill leg with request id ${id}`);
    };
    c.check(s, decodes, prefillOf);
    await expectAllLoadsZero(s.router);
  });
});

describe('Mooncake: a prefill instance whose bootstrap server does not answer', () => {
  let s: PdStack;
  let deaf: string;
  beforeAll(async () => {
    s = await startPdStack({ prefill: 2, decode: 1, router: { kvConnector: 'mooncake' } });
    // Re-register the second prefill through the admin API with a bootstrap port nobody listens on.
    deaf = s.prefill[1]!.url;
    await fetch(
      `http://127.0.0.1:${s.router.adminPort}/workers?role=prefill&url=${encodeURIComponent(deaf)}`,
      {
        method: 'DELETE',
      },
    );
    const reg = await fetch(`http://127.0.0.1:${s.router.adminPort}/workers`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ role: 'prefill', url: deaf, bootstrapPort: 1, permanent: true }),
    });
    expect(reg.status).toBe(200);
  });
  afterAll(async () => s?.close());

  it('is not selected, shows as unreachable in /workers and in the metrics', async () => {
    for (let i = 0; i < 6; i++) expect((await send(s.url, i)).status).toBe(200);
    expect(s.prefill[1]!.records).toHaveLength(0);
    expect(s.prefill[0]!.records).toHaveLength(6);
    const workers = await adminJson<
      Array<{ role: string; url: string; bootstrap?: { state: string; addr: string } }>
    >(s.router, '/workers');
    const view = workers.body.find((w) => w.role === 'prefill' && w.url === deaf)!;
    expect(view.bootstrap).toMatchObject({
      state: expect.stringMatching(/^(unreachable|pending)$/),
      addr: 'http://127.0.0.1:1',
    });
    const text = await metricsText(s.router);
    expect(text).toMatch(
      new RegExp(`vllm_router_pd_bootstrap_ready\\{role="prefill",worker="${deaf}",generation="\\d+"\\} 0`),
    );
    expect(text).toMatch(/vllm_router_pd_bootstrap_queries_total\{outcome="error"\} [1-9]/);
    await expectAllLoadsZero(s.router);
  });
});

describe('P2P NCCL: /v1/responses and parallel sampling through Envoy', () => {
  let s: PdStack;
  beforeAll(async () => {
    s = await startPdStack({ prefill: 1, decode: 1, router: { kvConnector: 'p2pnccl' } });
  });
  afterAll(async () => s?.close());

  it('both legs carry the P/D request id where vLLM names the engine request: the body', async () => {
    for (const stream of [false, true]) {
      const res = await fetch(`${s.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-model', input: 'connector check '.repeat(8), stream }),
      });
      expect(res.status).toBe(200);
      await res.text();
    }
    const decodes = s.decode[0]!.records;
    expect(decodes.map((d) => d.outcome)).toEqual(['ok', 'ok']);
    for (const d of decodes) {
      expect(d.responseId).toMatch(/^___prefill_addr_/);
      expect(d.p2p).toEqual({ prefillAddr: s.prefill[0]!.hostPort, decodeAddr: s.decode[0]!.hostPort });
      const pr = s.prefill[0]!.findRecord(d.requestId)!;
      expect(pr.responseId).toBe(d.responseId);
    }
    await expectAllLoadsZero(s.router);
  });

  it('splits parallel sampling into both legs: a P2P NCCL decode worker cannot prefill a request itself', async () => {
    const before = s.decode[0]!.records.length;
    const res = await fetch(`${s.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: 'connector check '.repeat(8) }],
        n: 2,
        max_tokens: 3,
      }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { choices: unknown[] }).choices).toHaveLength(2);
    const [d] = s.decode[0]!.records.slice(before);
    expect(d!.p2p).toEqual({ prefillAddr: s.prefill[0]!.hostPort, decodeAddr: s.decode[0]!.hostPort });
    expect(s.prefill[0]!.findRecord(d!.requestId)).toBeDefined();
    await expectAllLoadsZero(s.router);
  });
});
