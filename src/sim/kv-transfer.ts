/**
 * P/D behaviour of the simulated vLLM per KV connector (pure). See
 * /work/shared/reference/vllm-pd-protocol.md.
 *
 * Prefill side (`prefillResponseParams`): when the request's `kv_transfer_params.do_remote_decode`
 * is true, the JSON response carries `kv_transfer_params` the decode leg must forward:
 * - nixl: `{do_remote_prefill: true, do_remote_decode: false, remote_engine_id, remote_block_ids,
 *   remote_host, remote_port, tp_size: 1}` (what vLLM's NixlConnector returns);
 * - mooncake / moriio: the same shape plus the request's `transfer_id` echoed (mooncake adds
 *   `remote_bootstrap_addr`);
 * - p2pnccl: nothing (the request id carries the peer addresses).
 *
 * Decode side (`checkDecodeRequest`): a decode worker only serves requests whose KV cache comes
 * from a prefill worker:
 * - nixl: `do_remote_prefill === true`, a non-empty string `remote_engine_id`, an array
 *   `remote_block_ids`;
 * - mooncake / moriio: `do_remote_prefill === true` and a string `transfer_id`;
 * - p2pnccl: no params needed, but the request id must be
 *   `___prefill_addr_<addr>___decode_addr_<addr>_<hex>` (P2P NCCL parses the peer from it).
 */

export type KvConnector = 'nixl' | 'mooncake' | 'moriio' | 'p2pnccl';

export const KV_CONNECTORS: readonly KvConnector[] = ['nixl', 'mooncake', 'moriio', 'p2pnccl'];

export interface P2pAddresses {
  readonly prefillAddr: string;
  readonly decodeAddr: string;
}

const P2P_ID = /^___prefill_addr_(.+?)___decode_addr_(.+)_([0-9a-f]+)$/;

/** Parses a P2P NCCL request id; undefined when it does not have that shape. */
export function parseP2pRequestId(requestId: string): P2pAddresses | undefined {
  const m = P2P_ID.exec(requestId);
  if (!m || m[1] === undefined || m[2] === undefined) return undefined;
  return { prefillAddr: m[1], decodeAddr: m[2] };
}

export type DecodeCheck = { ok: true; peer?: P2pAddresses } | { ok: false; reason: string };

export function checkDecodeRequest(
  connector: KvConnector,
  params: Readonly<Record<string, unknown>> | undefined,
  requestId: string,
): DecodeCheck {
  if (connector === 'p2pnccl') {
    const peer = parseP2pRequestId(requestId);
    if (!peer) return { ok: false, reason: 'p2pnccl decode requires a ___prefill_addr_..._ request id' };
    return { ok: true, peer };
  }
  if (!params) return { ok: false, reason: 'decode worker requires kv_transfer_params' };
  if (params.do_remote_prefill !== true) {
    return { ok: false, reason: 'kv_transfer_params.do_remote_prefill must be true' };
  }
  if (connector === 'nixl') {
    if (typeof params.remote_engine_id !== 'string' || params.remote_engine_id === '') {
      return { ok: false, reason: 'kv_transfer_params.remote_engine_id is required' };
    }
    if (!Array.isArray(params.remote_block_ids)) {
      return { ok: false, reason: 'kv_transfer_params.remote_block_ids is required' };
    }
    return { ok: true };
  }
  if (typeof params.transfer_id !== 'string' || params.transfer_id === '') {
    return { ok: false, reason: 'kv_transfer_params.transfer_id is required' };
  }
  return { ok: true };
}

export interface PrefillEngineInfo {
  readonly engineId: string;
  readonly host: string;
  readonly port: number;
  readonly blockIds: readonly number[];
  /** Mooncake: `http://host:bootstrap_port` of the side channel (kv-side-channel.ts). */
  readonly bootstrapAddr?: string;
}

/** The `kv_transfer_params` a prefill worker returns, or undefined when none is due. */
export function prefillResponseParams(
  connector: KvConnector,
  params: Readonly<Record<string, unknown>> | undefined,
  info: PrefillEngineInfo,
): Record<string, unknown> | undefined {
  if (connector === 'p2pnccl' || !params || params.do_remote_decode !== true) return undefined;
  const out: Record<string, unknown> = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_engine_id: info.engineId,
    remote_block_ids: info.blockIds,
    remote_host: info.host,
    remote_port: info.port,
    tp_size: 1,
  };
  if (connector === 'nixl') return out;
  out.transfer_id = params.transfer_id;
  if (connector === 'mooncake')
    out.remote_bootstrap_addr = info.bootstrapAddr ?? `http://${info.host}:${info.port}`;
  return out;
}
