import { describe, expect, it } from 'vitest';
import {
  checkDecodeRequest,
  parseP2pRequestId,
  prefillResponseParams,
  type KvConnector,
} from '../../../src/sim/kv-transfer.js';

const P2P_ID = '___prefill_addr_127.0.0.1:21001___decode_addr_127.0.0.1:22001_0123abcd';
const NIXL_OK = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_engine_id: 'p0',
  remote_block_ids: [1],
};

describe('checkDecodeRequest', () => {
  it.each<{ connector: KvConnector; params?: Record<string, unknown>; id?: string; ok: boolean }>([
    { connector: 'nixl', params: undefined, ok: false },
    { connector: 'nixl', params: NIXL_OK, ok: true },
    { connector: 'nixl', params: { ...NIXL_OK, do_remote_prefill: false }, ok: false },
    { connector: 'nixl', params: { ...NIXL_OK, remote_engine_id: null }, ok: false },
    { connector: 'nixl', params: { ...NIXL_OK, remote_block_ids: null }, ok: false },
    { connector: 'mooncake', params: { do_remote_prefill: true, transfer_id: 'xfer-1' }, ok: true },
    { connector: 'mooncake', params: { do_remote_prefill: true }, ok: false },
    {
      connector: 'moriio',
      params: { do_remote_prefill: true, remote_engine_id: null, transfer_id: 'tx-1' },
      ok: true,
    },
    { connector: 'moriio', params: { do_remote_prefill: false, transfer_id: 'tx-1' }, ok: false },
    { connector: 'p2pnccl', params: undefined, id: P2P_ID, ok: true },
    { connector: 'p2pnccl', params: NIXL_OK, id: 'plain-id', ok: false },
  ])('$connector %o -> ok=$ok', ({ connector, params, id, ok }) => {
    expect(checkDecodeRequest(connector, params, id ?? 'rid').ok).toBe(ok);
  });

  it('returns the p2p peer addresses', () => {
    expect(checkDecodeRequest('p2pnccl', undefined, P2P_ID)).toEqual({
      ok: true,
      peer: { prefillAddr: '127.0.0.1:21001', decodeAddr: '127.0.0.1:22001' },
    });
  });
});

describe('parseP2pRequestId', () => {
  it.each([
    { id: P2P_ID, parsed: { prefillAddr: '127.0.0.1:21001', decodeAddr: '127.0.0.1:22001' } },
    { id: '___prefill_addr_a:1___decode_addr_b:2_ff', parsed: { prefillAddr: 'a:1', decodeAddr: 'b:2' } },
    { id: '___prefill_addr_a:1___decode_addr_b:2_XYZ', parsed: undefined },
    { id: 'abc', parsed: undefined },
  ])('$id', ({ id, parsed }) => {
    expect(parseP2pRequestId(id)).toEqual(parsed);
  });
});

describe('prefillResponseParams', () => {
  const info = { engineId: 'p0', host: '127.0.0.1', port: 8100, blockIds: [3, 4] };
  const nixl = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_engine_id: 'p0',
    remote_block_ids: [3, 4],
    remote_host: '127.0.0.1',
    remote_port: 8100,
    tp_size: 1,
  };
  it.each<{ connector: KvConnector; params?: Record<string, unknown>; expected: unknown }>([
    { connector: 'nixl', params: { do_remote_decode: true, do_remote_prefill: false }, expected: nixl },
    { connector: 'nixl', params: undefined, expected: undefined },
    { connector: 'nixl', params: { do_remote_decode: false }, expected: undefined },
    {
      connector: 'mooncake',
      params: { do_remote_decode: true, transfer_id: 'xfer-9' },
      expected: { ...nixl, transfer_id: 'xfer-9', remote_bootstrap_addr: 'http://127.0.0.1:8100' },
    },
    {
      connector: 'moriio',
      params: { do_remote_decode: true, transfer_id: 'tx-9' },
      expected: { ...nixl, transfer_id: 'tx-9' },
    },
    { connector: 'p2pnccl', params: { do_remote_decode: true }, expected: undefined },
  ])('$connector %o', ({ connector, params, expected }) => {
    expect(prefillResponseParams(connector, params, info)).toEqual(expected);
  });

  it('prefill output is accepted by a decode of the same connector', () => {
    for (const connector of ['nixl', 'mooncake', 'moriio'] as const) {
      const kv = prefillResponseParams(connector, { do_remote_decode: true, transfer_id: 't' }, info);
      expect(checkDecodeRequest(connector, kv, 'rid').ok).toBe(true);
    }
  });
});
