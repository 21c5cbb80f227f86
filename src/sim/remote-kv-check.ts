/**
 * What a simulated decode worker does with the decode leg's `kv_transfer_params` before it can
 * generate, the way a real vLLM decode worker would, so a router that sends wrong values fails the
 * request as it would against vLLM (kv_load_failure_policy "fail", vLLM's default):
 *
 * - mooncake: `remote_bootstrap_addr` must be `http://host:port`; the worker requests
 *   `remote_bootstrap_addr + "/query"` (as MooncakeConnector's decode side does) and needs
 *   `remote_engine_id` among the engine ids there; then it pulls the KV of `transfer_id` from that engine
 *   (side channel `/sim/pull`), which waits for the prefill leg to finish and fails for a transfer held
 *   by another engine (another DP rank) or a prefill leg that failed.
 * - nixl: the worker reads `remote_block_ids` of `remote_engine_id` from `remote_host:remote_port`
 *   (the prefill's side channel, `/sim/nixl/read`), which only grants the exact engine id and blocks the
 *   prefill returned: the decode leg must echo the prefill response's params.
 * - moriio / p2pnccl: nothing beyond the synchronous checks of kv-transfer.ts.
 *
 * Returns undefined when the KV is in place, or the error the decode request fails with.
 */
import { request } from 'undici';
import type { KvConnector } from './kv-transfer.js';

export interface RemoteKvFailure {
  readonly status: number;
  readonly reason: string;
}

export async function fetchRemoteKv(
  connector: KvConnector,
  params: Readonly<Record<string, unknown>> | undefined,
  signal: AbortSignal,
): Promise<RemoteKvFailure | undefined> {
  if (!params) return undefined;
  try {
    if (connector === 'mooncake') return await mooncake(params, signal);
    if (connector === 'nixl') return await nixl(params, signal);
    return undefined;
  } catch (err) {
    if (signal.aborted) return { status: 499, reason: 'client went away' };
    return { status: 500, reason: `KV transfer failed: ${(err as Error).message}` };
  }
}

async function mooncake(p: Readonly<Record<string, unknown>>, signal: AbortSignal) {
  const addr = p.remote_bootstrap_addr;
  const engineId = p.remote_engine_id;
  const transferId = p.transfer_id;
  if (typeof addr !== 'string' || !/^http:\/\/[^/]+:[0-9]+$/.test(addr)) {
    return fail(
      400,
      `kv_transfer_params.remote_bootstrap_addr must be http://host:port, got ${JSON.stringify(addr)}`,
    );
  }
  if (typeof engineId !== 'string' || typeof transferId !== 'string') {
    return fail(400, 'kv_transfer_params.remote_engine_id and transfer_id are required');
  }
  const q = await request(`${addr}/query`, { method: 'GET', signal });
  const data = (await q.body.json()) as Record<string, { engine_id?: unknown }>;
  if (q.statusCode !== 200) return fail(500, `bootstrap server ${addr} answered ${q.statusCode}`);
  if (!Object.values(data).some((e) => e?.engine_id === engineId)) {
    return fail(500, `KV transfer failed: engine ${engineId} is unknown to the bootstrap server ${addr}`);
  }
  const pull = await request(
    `${addr}/sim/pull?transfer_id=${encodeURIComponent(transferId)}&engine_id=${encodeURIComponent(engineId)}`,
    { method: 'GET', signal },
  );
  const text = await pull.body.text();
  if (pull.statusCode !== 200) return fail(500, `KV transfer failed: ${pull.statusCode} ${text}`);
  return undefined;
}

async function nixl(p: Readonly<Record<string, unknown>>, signal: AbortSignal) {
  const { remote_host: host, remote_port: port } = p;
  if (typeof host !== 'string' || typeof port !== 'number') {
    return fail(400, 'kv_transfer_params.remote_host and remote_port are required');
  }
  const res = await request(`http://${host.includes(':') ? `[${host}]` : host}:${port}/sim/nixl/read`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ remote_engine_id: p.remote_engine_id, remote_block_ids: p.remote_block_ids }),
    signal,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) return fail(500, `KV transfer failed: NIXL read ${res.statusCode} ${text}`);
  return undefined;
}

function fail(status: number, reason: string): RemoteKvFailure {
  return { status, reason };
}
