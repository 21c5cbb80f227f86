/**
 * The simulated decode worker checks what a real vLLM decode worker needs (real HTTP, port 0):
 * Mooncake fetches remote_bootstrap_addr + "/query" and pulls transfer_id from remote_engine_id; NIXL
 * reads exactly the blocks and engine id the prefill returned. Wrong values fail the request.
 */
import { describe, expect, it } from 'vitest';
import { request } from 'undici';
import { type Simulator } from '../../../src/sim/simulator.js';
import { postJson, simulatorsClosedAfterEach } from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

const PROMPT = 'the quick brown fox '.repeat(10);

async function mooncakePair(dpSize = 1) {
  const p = await sim({ role: 'prefill', kvConnector: 'mooncake', dpSize });
  const d = await sim({ role: 'decode', kvConnector: 'mooncake' });
  return { p, d, addr: `http://127.0.0.1:${p.bootstrapPort!}` };
}

function prefillLeg(p: Simulator, transferId: string, rank?: number) {
  return postJson(
    `${p.url}/v1/completions`,
    {
      prompt: PROMPT,
      max_tokens: 1,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, transfer_id: transferId },
    },
    rank === undefined ? {} : { 'x-data-parallel-rank': String(rank) },
  );
}

function decodeLeg(d: Simulator, kv: Record<string, unknown>) {
  return postJson(`${d.url}/v1/completions`, { prompt: PROMPT, max_tokens: 2, kv_transfer_params: kv });
}

describe('simulated Mooncake bootstrap server', () => {
  it("answers /query like vLLM's MooncakeBootstrapServer: one engine id per DP rank, fresh per start", async () => {
    const { p, addr } = await mooncakePair(2);
    const res = await request(`${addr}/query`);
    const body = (await res.body.json()) as Record<string, { engine_id: string }>;
    expect(Object.keys(body)).toEqual(['0', '1']);
    expect([body['0']!.engine_id, body['1']!.engine_id]).toEqual(p.engineIds);
    const again = await sim({ role: 'prefill', kvConnector: 'mooncake', dpSize: 2 });
    expect(again.engineIds).not.toContain(p.engineIds[0]);
  });

  it('rejects an X-data-parallel-rank outside the DP size with 400, as vLLM does', async () => {
    const { p } = await mooncakePair(2);
    expect((await prefillLeg(p, 'xfer-a', 2)).status).toBe(400);
    expect((await prefillLeg(p, 'xfer-b', 1)).status).toBe(200);
    expect(p.records.map((r) => r.dpRank)).toEqual([undefined, 1]);
  });
});

describe('simulated Mooncake decode worker', () => {
  it('serves a decode leg sent before the prefill leg finishes (the proxy does not wait)', async () => {
    const { p, d, addr } = await mooncakePair(2);
    const decode = decodeLeg(d, {
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_bootstrap_addr: addr,
      remote_engine_id: p.engineIds[1],
      transfer_id: 'xfer-1',
    });
    await d.waitForRequests(1);
    expect((await prefillLeg(p, 'xfer-1', 1)).status).toBe(200);
    const r = await decode;
    expect(r.status).toBe(200);
    expect(d.records[0]).toMatchObject({ outcome: 'ok', cachedTokens: d.records[0]!.promptTokens });
  });

  it.each([
    [
      'the HTTP ip:port as bootstrap address (no scheme, wrong port)',
      (p: Simulator) => ({ remote_bootstrap_addr: p.hostPort }),
      400,
    ],
    ['the HTTP port as bootstrap port', (p: Simulator) => ({ remote_bootstrap_addr: p.url }), 500],
    ['an engine id the bootstrap server does not know', () => ({ remote_engine_id: '10.0.0.1:21001' }), 500],
    ["another DP rank's engine id", (p: Simulator) => ({ remote_engine_id: p.engineIds[0] }), 500],
  ] as const)('fails the request given %s', async (_what, override, status) => {
    const { p, d, addr } = await mooncakePair(2);
    expect((await prefillLeg(p, 'xfer-2', 1)).status).toBe(200);
    const r = await decodeLeg(d, {
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_bootstrap_addr: addr,
      remote_engine_id: p.engineIds[1],
      transfer_id: 'xfer-2',
      ...override(p),
    });
    expect(r.status).toBe(status);
    expect(d.records[0]).toMatchObject({ outcome: 'error', completionTokens: 0 });
  });

  it('fails the decode when the prefill leg with that transfer id failed', async () => {
    const { p, d, addr } = await mooncakePair();
    p.injectFault({ status: 500 }, { path: '/v1/completions' });
    expect((await prefillLeg(p, 'xfer-3')).status).toBe(500);
    const r = await decodeLeg(d, {
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_bootstrap_addr: addr,
      remote_engine_id: p.engineIds[0],
      transfer_id: 'xfer-3',
    });
    expect(r.status).toBe(500);
  });
});

describe('simulated NIXL decode worker', () => {
  it("serves the prefill's params echoed verbatim once, and fails on altered engine id or blocks", async () => {
    const p = await sim({ role: 'prefill', kvConnector: 'nixl' });
    const d = await sim({ role: 'decode', kvConnector: 'nixl' });
    const leg = () =>
      postJson(`${p.url}/v1/completions`, {
        prompt: PROMPT,
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false },
      }).then((r) => r.json.kv_transfer_params as Record<string, unknown>);
    const kv = await leg();
    expect((await decodeLeg(d, { ...kv, remote_engine_id: 'someone-else' })).status).toBe(500);
    expect((await decodeLeg(d, kv)).status).toBe(200);
    expect((await decodeLeg(d, kv)).status).toBe(500); // blocks are read once
    const kv2 = await leg();
    expect((await decodeLeg(d, { ...kv2, remote_block_ids: [999999] })).status).toBe(500);
  });
});
