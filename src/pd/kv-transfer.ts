/**
 * Per-connector body rewrites of the two P/D legs (wire formats: shared/reference/vllm-pd-protocol.md).
 *
 * Prefill leg: a copy of the request with max_tokens = 1 (max_completion_tokens = 1 when present,
 * min_tokens clamped to <= 1), stream = false, no stream_options, plus the connector's
 * `kv_transfer_params` asking the prefill worker to keep the KV cache for a remote decode.
 * Decode leg: the original request plus the `kv_transfer_params` that tell the decode worker where
 * the KV cache comes from:
 *   nixl      sequential ("pull"): the prefill response's params, verbatim (required)
 *   mooncake  {do_remote_prefill, transfer_id, remote_bootstrap_addr, remote_engine_id}
 *   moriio    READ: the prefill response's params (+ transfer_id); WRITE (concurrent): transfer_id and
 *             nulls, the prefill pushes into the decode worker
 *   p2pnccl   none: the X-Request-Id carries both peers' addresses
 * Pure functions: the caller supplies ids.
 */
import { randomUUID } from 'node:crypto';
import type { Worker } from '../workers/worker.js';

export type KvConnector = 'nixl' | 'mooncake' | 'moriio' | 'p2pnccl';
export type PdDispatchMode = 'sequential' | 'concurrent' | 'sidecar';

export type Json = Record<string, unknown>;

export interface LegContext {
  readonly connector: KvConnector;
  readonly mode: PdDispatchMode;
  readonly prefill: Worker;
  readonly decode: Worker;
  /** Mooncake / MoRI-IO transfer id (unused by nixl and p2pnccl). */
  readonly transferId: string;
}

export function newTransferId(connector: KvConnector): string {
  const hex = randomUUID().replace(/-/g, '');
  return connector === 'mooncake' ? `xfer-${hex}` : `tx-${hex}`;
}

/** `___prefill_addr_{P}___decode_addr_{D}_{uuid hex}`: both legs carry it as X-Request-Id. */
export function pdRequestId(
  prefill: Worker,
  decode: Worker,
  uuidHex = randomUUID().replace(/-/g, ''),
): string {
  return `___prefill_addr_${prefill.kvAddress}___decode_addr_${decode.kvAddress}_${uuidHex}`;
}

export function prefillKvParams(ctx: LegContext): Json | undefined {
  const base = { do_remote_decode: true, do_remote_prefill: false };
  switch (ctx.connector) {
    case 'nixl':
      return {
        ...base,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      };
    case 'mooncake':
      return { ...base, transfer_id: ctx.transferId };
    case 'moriio': {
      const out: Json = {
        ...base,
        remote_engine_id: null,
        remote_block_ids: null,
        transfer_id: ctx.transferId,
      };
      if (ctx.mode === 'concurrent') Object.assign(out, parallelSizes(ctx.decode));
      return out;
    }
    case 'p2pnccl':
      return undefined;
  }
}

/**
 * Decode-leg params. `fromPrefill` is the prefill response's `kv_transfer_params` (sequential mode);
 * returns an error string when the connector needs it and it is missing.
 */
export function decodeKvParams(
  ctx: LegContext,
  fromPrefill: Json | undefined,
): Json | undefined | { error: string } {
  const base = { do_remote_decode: false, do_remote_prefill: true };
  switch (ctx.connector) {
    case 'nixl':
      if (ctx.mode === 'sequential') {
        return fromPrefill ?? { error: 'prefill response carried no kv_transfer_params (NIXL)' };
      }
      return { ...base, remote_engine_id: null, remote_block_ids: null, transfer_id: ctx.transferId };
    case 'mooncake':
      return {
        ...base,
        transfer_id: ctx.transferId,
        remote_bootstrap_addr:
          (fromPrefill?.remote_bootstrap_addr as string | undefined) ?? ctx.prefill.endpoint,
        remote_engine_id: (fromPrefill?.remote_engine_id as string | undefined) ?? ctx.prefill.kvAddress,
      };
    case 'moriio':
      if (ctx.mode === 'sequential' && fromPrefill)
        return { ...fromPrefill, ...base, transfer_id: ctx.transferId };
      return {
        ...base,
        remote_engine_id: null,
        remote_block_ids: null,
        transfer_id: ctx.transferId,
        ...parallelSizes(ctx.prefill),
      };
    case 'p2pnccl':
      return undefined;
  }
}

function parallelSizes(w: Worker): Json {
  const out: Json = {};
  const tp = w.metadata.tp_size ?? w.metadata.remote_tp_size;
  const dp = w.metadata.dp_size ?? w.metadata.remote_dp_size;
  if (typeof tp === 'number') out.remote_tp_size = tp;
  if (typeof dp === 'number') out.remote_dp_size = dp;
  return out;
}

/** The prefill leg's body: generate one token, no streaming, keep KV for the decode worker. */
export function prefillBody(request: Readonly<Json>, kv: Json | undefined): Json {
  const body: Json = { ...request, max_tokens: 1, stream: false };
  if ('max_completion_tokens' in request) body.max_completion_tokens = 1;
  if ('max_output_tokens' in request) body.max_output_tokens = 1;
  if (typeof request.min_tokens === 'number' && request.min_tokens > 1) body.min_tokens = 1;
  delete body.stream_options;
  if (kv) body.kv_transfer_params = kv;
  else delete body.kv_transfer_params;
  return body;
}

/** The decode leg's body: the original request plus the decode-side params. */
export function decodeBody(request: Readonly<Json>, kv: Json | undefined): Json {
  const body: Json = { ...request };
  if (kv) body.kv_transfer_params = kv;
  else delete body.kv_transfer_params;
  return body;
}
