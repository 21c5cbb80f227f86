import { describe, expect, it } from 'vitest';
import {
  decodeBody,
  decodeKvParams,
  newTransferId,
  pdRequestId,
  prefillBody,
  prefillKvParams,
  type KvConnector,
  type LegContext,
  type PdDispatchMode,
} from '../../../src/pd/kv-transfer.js';
import { Worker } from '../../../src/workers/worker.js';

const P = new Worker({
  role: 'prefill',
  url: 'http://10.0.0.1:8000',
  endpoint: '10.0.0.1:8000',
  zmqAddress: '10.0.0.1:21001',
  generation: 1,
});
const D = new Worker({
  role: 'decode',
  url: 'http://10.0.0.2:8000',
  endpoint: '10.0.0.2:8000',
  generation: 2,
  metadata: { tp_size: 2 },
});
const ctx = (connector: KvConnector, mode: PdDispatchMode = 'sequential'): LegContext => ({
  connector,
  mode,
  prefill: P,
  decode: D,
  transferId: 'tx-1',
});

describe('P/D request id', () => {
  it('names both peers by their KV address (zmq address, else host:port) and ends in a uuid hex', () => {
    expect(pdRequestId(P, D, 'abc123')).toBe(
      '___prefill_addr_10.0.0.1:21001___decode_addr_10.0.0.2:8000_abc123',
    );
    expect(pdRequestId(P, D)).toMatch(
      /^___prefill_addr_10\.0\.0\.1:21001___decode_addr_10\.0\.0\.2:8000_[0-9a-f]{32}$/,
    );
  });
  it('makes connector-specific transfer ids: Mooncake xfer-<request id> (vLLM proxy), MoRI-IO tx-<hex>', () => {
    expect(newTransferId('mooncake', 'req-1')).toBe('xfer-req-1');
    expect(newTransferId('mooncake')).toMatch(/^xfer-[0-9a-f-]{36}$/);
    expect(newTransferId('moriio')).toMatch(/^tx-[0-9a-f]{32}$/);
  });
});

describe('prefill leg body', () => {
  const request = {
    model: 'm',
    prompt: 'p',
    max_tokens: 100,
    max_completion_tokens: 100,
    min_tokens: 5,
    stream: true,
    stream_options: { include_usage: true },
    temperature: 0.7,
  };
  it('asks for one token, no stream, no stream_options, keeps other fields', () => {
    const b = prefillBody(request, { do_remote_decode: true });
    expect(b).toEqual({
      model: 'm',
      prompt: 'p',
      max_tokens: 1,
      max_completion_tokens: 1,
      stream: false,
      temperature: 0.7,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(request.max_tokens).toBe(100); // the original is not mutated
  });
  it('limits a /v1/responses leg by max_output_tokens, and keeps it out of the response store', () => {
    const responses = { model: 'm', input: 'x', max_output_tokens: 50, stream: true, background: true };
    expect(prefillBody(responses, { do_remote_decode: true }, true)).toEqual({
      model: 'm',
      input: 'x',
      max_output_tokens: 1,
      stream: false,
      store: false,
      background: false,
      kv_transfer_params: { do_remote_decode: true },
    });
    expect(prefillBody({ model: 'm', input: 'x' }, undefined, true)).toMatchObject({ max_output_tokens: 1 });
  });
  it('adds max_tokens even when the client sent none, and no kv params for P2P NCCL', () => {
    expect(prefillBody({ model: 'm', messages: [] }, undefined)).toEqual({
      model: 'm',
      messages: [],
      max_tokens: 1,
      stream: false,
    });
  });

  it.each<[KvConnector, PdDispatchMode, Record<string, unknown> | undefined]>([
    [
      'nixl',
      'sequential',
      {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    ],
    ['mooncake', 'sequential', { do_remote_decode: true, do_remote_prefill: false, transfer_id: 'tx-1' }],
    [
      'moriio',
      'sequential',
      {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        transfer_id: 'tx-1',
        remote_tp_size: 2,
      },
    ],
    [
      'moriio',
      'concurrent',
      {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        transfer_id: 'tx-1',
        remote_tp_size: 2,
      },
    ],
    ['p2pnccl', 'sequential', undefined],
  ])('%s %s prefill kv_transfer_params', (connector, mode, expected) => {
    expect(prefillKvParams(ctx(connector, mode))).toEqual(expected);
  });
});

describe('decode leg body', () => {
  const fromPrefill = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_engine_id: 'e',
    remote_block_ids: [1, 2],
    remote_host: 'h',
    remote_port: 1,
  };
  it('NIXL sequential forwards the prefill response params verbatim', () => {
    expect(decodeKvParams(ctx('nixl'), fromPrefill)).toBe(fromPrefill);
  });
  it('NIXL sequential without prefill params is an error', () => {
    expect(decodeKvParams(ctx('nixl'), undefined)).toEqual({
      error: expect.stringContaining('no kv_transfer_params'),
    });
  });
  it("Mooncake names the transfer, the bootstrap server (http://host:bootstrap_port) and the rank's engine id", () => {
    const withBootstrap: LegContext = {
      ...ctx('mooncake', 'concurrent'),
      transferId: 'xfer-r1',
      bootstrap: { addr: 'http://10.0.0.1:8998', engineId: 'engine-rank-1', rank: 1 },
    };
    // Whatever the prefill response says: vLLM's Mooncake proxy never waits for it.
    expect(decodeKvParams(withBootstrap, { remote_bootstrap_addr: 'b:1', remote_engine_id: 'x' })).toEqual({
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_bootstrap_addr: 'http://10.0.0.1:8998',
      remote_engine_id: 'engine-rank-1',
      transfer_id: 'xfer-r1',
    });
    expect(decodeKvParams(ctx('mooncake'), undefined)).toEqual({
      error: expect.stringContaining('bootstrap'),
    });
  });
  it('MoRI-IO READ takes engine id, blocks and transfer id from the prefill response, sizes and rank of the prefill', () => {
    const P2 = new Worker({ ...P, role: 'prefill', metadata: { tp_size: 4, dp_size: 2 } });
    const c: LegContext = { ...ctx('moriio'), prefill: P2, dpRank: 1 };
    expect(
      decodeKvParams(c, {
        remote_engine_id: 'e',
        remote_block_ids: [1],
        transfer_id: 'tx-p',
        remote_host: 'h',
      }),
    ).toEqual({
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_engine_id: 'e',
      remote_block_ids: [1],
      transfer_id: 'tx-p',
      remote_tp_size: 4,
      remote_dp_size: 2,
      remote_dp_rank: 1,
    });
    expect(decodeKvParams(ctx('moriio'), undefined)).toEqual({ error: expect.stringContaining('MoRI') });
  });
  it('MoRI-IO WRITE (concurrent) sends the transfer id and nulls', () => {
    expect(decodeKvParams(ctx('moriio', 'concurrent'), undefined)).toEqual({
      do_remote_decode: false,
      do_remote_prefill: true,
      remote_engine_id: null,
      remote_block_ids: null,
      transfer_id: 'tx-1',
    });
  });
  it('P2P NCCL needs no params', () => {
    expect(decodeKvParams(ctx('p2pnccl'), undefined)).toBeUndefined();
  });
  it('keeps the original request and drops client-supplied kv params when none are due', () => {
    const req = { model: 'm', prompt: 'p', stream: true, kv_transfer_params: { evil: true } };
    expect(decodeBody(req, undefined)).toEqual({ model: 'm', prompt: 'p', stream: true });
    expect(decodeBody(req, { a: 1 })).toEqual({
      model: 'm',
      prompt: 'p',
      stream: true,
      kv_transfer_params: { a: 1 },
    });
  });
});
