/**
 * Per-connector body rewrites of the two P/D legs (wire formats: shared/reference/vllm-pd-protocol.md).
 *
 * Field by field as vLLM's own proxies build them; the sources checked per connector are listed in
 * docs/pd-connectors.md.
 *
 * Prefill leg: a copy of the request with max_tokens = 1 (max_completion_tokens / max_output_tokens = 1
 * when present), min_tokens and min_completion_tokens removed (vLLM's NIXL proxy: "not supported for
 * P"), stream = false, no stream_options, plus the connector's `kv_transfer_params` asking the prefill
 * worker to keep the KV cache for a remote decode:
 *   nixl      {do_remote_decode: true, do_remote_prefill: false, remote_engine_id/block_ids/host/port: null}
 *   mooncake  {do_remote_decode: true, do_remote_prefill: false, transfer_id: "xfer-<request id>"}
 *   moriio    {remote_dp_size, remote_tp_size (the DECODE instance's, when it registered them),
 *              transfer_id, do_remote_decode: true, do_remote_prefill: false, remote_engine_id/block_ids: null}
 *   p2pnccl   none: the X-Request-Id carries both peers' addresses (a /v1/responses leg's
 *             `request_id` too, as with MoRI-IO: idInBody)
 * Decode leg: the original request plus the `kv_transfer_params` that tell the decode worker where
 * the KV cache comes from:
 *   nixl      sequential ("pull"): the prefill response's params, verbatim; a prefill response without
 *             them (its one token ended the request, or its connector is not configured) is served by
 *             the decode worker without params, which prefills the prompt itself (vLLM's NIXL proxy)
 *   mooncake  {do_remote_decode: false, do_remote_prefill: true, remote_bootstrap_addr:
 *              "http://<prefill host>:<bootstrap port>", remote_engine_id: <engine id of the chosen DP
 *              rank, from the bootstrap server's /query>, transfer_id} (mooncake-bootstrap.ts)
 *   moriio    {do_remote_decode: false, do_remote_prefill: true, remote_engine_id/block_ids: null,
 *              transfer_id}; READ: remote_engine_id, remote_block_ids and transfer_id from the prefill
 *              response; then remote_dp_size / remote_tp_size of the PREFILL instance and, when it has
 *              more than one DP rank, remote_dp_rank
 *   p2pnccl   none
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
  /** Mooncake: the prefill instance's bootstrap address and the chosen DP rank's engine id. */
  readonly bootstrap?: { readonly addr: string; readonly engineId: string; readonly rank: number };
  /** MoRI-IO: the prefill DP rank sent as X-data-parallel-rank (only when its dp_size > 1). */
  readonly dpRank?: number;
}

/** Mooncake: `xfer-<request id>` (vLLM's Mooncake proxy); MoRI-IO: `tx-<uuid hex>`. */
export function newTransferId(connector: KvConnector, requestId?: string): string {
  if (connector === 'mooncake') return `xfer-${requestId ?? randomUUID()}`;
  return `tx-${randomUUID().replace(/-/g, '')}`;
}

/**
 * `___prefill_addr_{P}___decode_addr_{D}_{uuid hex}`: both legs carry it as X-Request-Id (and, where
 * vLLM names the engine request after the body instead, as `request_id`: `idInBody`).
 */
export function pdRequestId(
  prefill: Worker,
  decode: Worker,
  uuidHex = randomUUID().replace(/-/g, ''),
): string {
  return `___prefill_addr_${prefill.kvAddress}___decode_addr_${decode.kvAddress}_${uuidHex}`;
}

/**
 * Whether the legs must also carry the P/D request id as the body's `request_id`: P2P NCCL and
 * MoRI-IO read the peer's address from the engine request id (P2P NCCL also sends and awaits the KV
 * as `<request id>#<layer>`), and vLLM's Responses API names the engine request after the body's
 * `request_id` (serving_responses.py, `resp_<uuid>` by default), never after X-Request-Id as chat,
 * completions and messages do (`_base_request_id`). The response id the client sees is then that
 * request id.
 */
export function idInBody(connector: KvConnector, responses: boolean): boolean {
  return responses && (connector === 'p2pnccl' || connector === 'moriio');
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
    case 'moriio':
      return {
        ...parallelSizes(ctx.decode),
        transfer_id: ctx.transferId,
        ...base,
        remote_engine_id: null,
        remote_block_ids: null,
      };
    case 'p2pnccl':
      return undefined;
  }
}

/**
 * Whether the decode leg's params come from the prefill response (NIXL pull, MoRI-IO READ: sequential
 * legs). Without them there is no KV cache to pull: the decode worker prefills the prompt itself.
 */
export function readsPrefillParams(ctx: LegContext): boolean {
  return ctx.mode === 'sequential' && (ctx.connector === 'nixl' || ctx.connector === 'moriio');
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
      if (!ctx.bootstrap) return { error: 'no bootstrap engine id for the Mooncake prefill instance' };
      return {
        ...base,
        remote_bootstrap_addr: ctx.bootstrap.addr,
        remote_engine_id: ctx.bootstrap.engineId,
        transfer_id: ctx.transferId,
      };
    case 'moriio': {
      const out: Json = {
        ...base,
        remote_engine_id: null,
        remote_block_ids: null,
        transfer_id: ctx.transferId,
      };
      if (ctx.mode === 'sequential') {
        if (!fromPrefill) return { error: 'prefill response carried no kv_transfer_params (MoRI-IO READ)' };
        out.remote_engine_id = fromPrefill.remote_engine_id ?? null;
        out.remote_block_ids = fromPrefill.remote_block_ids ?? null;
        out.transfer_id = fromPrefill.transfer_id ?? ctx.transferId;
      }
      Object.assign(out, parallelSizes(ctx.prefill));
      if (ctx.dpRank !== undefined) out.remote_dp_rank = ctx.dpRank;
      return out;
    }
    case 'p2pnccl':
      return undefined;
  }
}

/** Registered tp/dp sizes of a MoRI-IO instance (`tp_size`/`dp_size` registration fields). */
export function parallelSizes(w: Worker): Json {
  const out: Json = {};
  const tp = w.metadata.tp_size ?? w.metadata.remote_tp_size;
  const dp = w.metadata.dp_size ?? w.metadata.remote_dp_size;
  if (typeof tp === 'number') out.remote_tp_size = tp;
  if (typeof dp === 'number') out.remote_dp_size = dp;
  return out;
}

/**
 * The prefill leg's body: generate one token, no streaming, keep KV for the decode worker. A
 * /v1/responses leg (`responses`) limits `max_output_tokens` (it has no `max_tokens`) and is neither
 * stored nor run in the background: vLLM keeps stored responses in the prefill worker's memory for
 * good, and only the decode worker's answer is the client's response.
 */
export function prefillBody(request: Readonly<Json>, kv: Json | undefined, responses = false): Json {
  const body: Json = responses
    ? { ...request, max_output_tokens: 1, stream: false, store: false, background: false }
    : { ...request, max_tokens: 1, stream: false };
  if ('max_completion_tokens' in request) body.max_completion_tokens = 1;
  if ('max_output_tokens' in request) body.max_output_tokens = 1;
  delete body.min_tokens;
  delete body.min_completion_tokens;
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
