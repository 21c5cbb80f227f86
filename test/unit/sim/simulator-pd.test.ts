import { describe, expect, it } from 'vitest';
import {
  blockPrompt,
  NIXL_PREFILL,
  postJson,
  postStream,
  simulatorsClosedAfterEach,
} from './sim-test-client.js';

const sim = simulatorsClosedAfterEach();

const PROMPT = blockPrompt('pd', 3) + 'question?'; // 48 + 3 = 51 tokens

describe('simulator P/D roles', () => {
  it('prefill (nixl) returns kv_transfer_params', async () => {
    const p = await sim({ role: 'prefill', id: 'p0' });
    const r = await postJson(`${p.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 1,
      stream: false,
      kv_transfer_params: NIXL_PREFILL,
    });
    expect(r.status).toBe(200);
    expect(r.json.kv_transfer_params).toEqual({
      do_remote_prefill: true,
      do_remote_decode: false,
      // The engine id of its (only) DP rank and the NIXL side channel, as vLLM's NixlConnector returns.
      remote_engine_id: p.engineIds[0],
      remote_block_ids: [0, 1, 2, 3],
      remote_host: '127.0.0.1',
      remote_port: p.bootstrapPort,
      tp_size: 1,
    });
    expect(r.json.usage).toMatchObject({ prompt_tokens: 51, completion_tokens: 1 });
  });

  it('prefill without do_remote_decode answers a plain completion', async () => {
    const p = await sim({ role: 'prefill' });
    const r = await postJson(`${p.url}/v1/completions`, { prompt: 'x', max_tokens: 1 });
    expect(r.status).toBe(200);
    expect(r.json.kv_transfer_params).toBeUndefined();
  });

  it('decode (nixl) rejects a request without valid kv_transfer_params', async () => {
    const d = await sim({ role: 'decode' });
    for (const kv of [undefined, { do_remote_prefill: true }, { ...NIXL_PREFILL }]) {
      const r = await postJson(`${d.url}/v1/completions`, { prompt: PROMPT, kv_transfer_params: kv });
      expect(r.status).toBe(400);
      expect(r.json).toMatchObject({ error: { code: 400 } });
    }
    expect(d.records.map((x) => x.outcome)).toEqual(['error', 'error', 'error']);
    expect(d.running()).toBe(0);
  });

  it('nixl round trip: the prefill response unlocks the decode, which reports every prompt token cached', async () => {
    const p = await sim({ role: 'prefill' });
    const d = await sim({ role: 'decode' });
    const pre = await postJson(`${p.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 1,
      kv_transfer_params: NIXL_PREFILL,
    });
    const r = await postStream(`${d.url}/v1/completions`, {
      prompt: PROMPT,
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
      kv_transfer_params: pre.json.kv_transfer_params,
    });
    expect(r.status).toBe(200);
    expect(r.events.at(-2)).toMatchObject({
      usage: { prompt_tokens: 51, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 51 } },
    });
    expect(d.records[0]).toMatchObject({ outcome: 'ok', promptTokens: 51, cachedTokens: 51 });
  });

  it.each(['mooncake', 'moriio'] as const)(
    '%s: prefill echoes transfer_id; decode requires it',
    async (kvConnector) => {
      const p = await sim({ role: 'prefill', kvConnector });
      const d = await sim({ role: 'decode', kvConnector });
      const pre = await postJson(`${p.url}/v1/completions`, {
        prompt: PROMPT,
        max_tokens: 1,
        kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, transfer_id: 'xfer-42' },
      });
      expect(pre.json.kv_transfer_params).toMatchObject({ do_remote_prefill: true, transfer_id: 'xfer-42' });
      const bad = await postJson(`${d.url}/v1/completions`, {
        prompt: PROMPT,
        kv_transfer_params: { do_remote_prefill: true },
      });
      expect(bad.status).toBe(400);
      const ok = await postJson(`${d.url}/v1/completions`, {
        prompt: PROMPT,
        kv_transfer_params: pre.json.kv_transfer_params,
      });
      expect(ok.status).toBe(200);
    },
  );

  it('p2pnccl decode requires the address-carrying request id and records the peers', async () => {
    const d = await sim({ role: 'decode', kvConnector: 'p2pnccl' });
    const bad = await postJson(`${d.url}/v1/chat/completions`, { messages: [{ role: 'u', content: 'x' }] });
    expect(bad.status).toBe(400);
    const id = `___prefill_addr_127.0.0.1:21001___decode_addr_${d.hostPort}_0a1b2c`;
    const ok = await postJson(
      `${d.url}/v1/chat/completions`,
      { messages: [{ role: 'u', content: 'x' }] },
      { 'x-request-id': id },
    );
    expect(ok.status).toBe(200);
    expect(d.findRecord(id)!.p2p).toEqual({ prefillAddr: '127.0.0.1:21001', decodeAddr: d.hostPort });
  });

  it('p2pnccl decode of a /v1/responses request reads the peers from its body request_id, as vLLM names it', async () => {
    const d = await sim({ role: 'decode', kvConnector: 'p2pnccl' });
    const id = `___prefill_addr_127.0.0.1:21001___decode_addr_${d.hostPort}_0a1b2c`;
    const header = await postJson(`${d.url}/v1/responses`, { input: 'x' }, { 'x-request-id': id });
    expect(header.status).toBe(400);
    const ok = await postJson(`${d.url}/v1/responses`, { input: 'x', request_id: id });
    expect(ok.status).toBe(200);
    expect(ok.json.id).toBe(id);
    expect(d.records.at(-1)!.p2p).toEqual({ prefillAddr: '127.0.0.1:21001', decodeAddr: d.hostPort });
  });

  it('a regular worker ignores kv_transfer_params requirements', async () => {
    const w = await sim();
    const r = await postJson(`${w.url}/v1/completions`, { prompt: 'x' });
    expect(r.status).toBe(200);
    expect(r.json.kv_transfer_params).toBeUndefined();
  });
});
