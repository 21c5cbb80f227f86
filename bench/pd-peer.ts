/**
 * The reference router (`vllm-router`, bench/peers.ts) as a P/D peer: a whole proxy in front of the
 * same simulated P/D fleet, started as its `--help` documents P/D mode:
 *
 *   vllm-router --vllm-pd-disaggregation [--kv-connector nixl|mooncake|moriio]
 *     (--prefill URL [BOOTSTRAP_PORT] ... --decode URL ... | --vllm-discovery-address HOST:PORT)
 *     --policy round_robin
 *
 * Mooncake prefill instances carry their bootstrap port, as for this router. MoRI-IO requires ZMQ
 * discovery (version 0.1.17 refuses static MoRI-IO workers), and P2P NCCL has no `--kv-connector`
 * value: both run with the workers' registrations. With discovery `/v1/models` answers 503 ("No
 * prefill servers available": it looks at static workers only), so such a peer is ready when a
 * one-token completion goes through. Listeners on 127.0.0.1 only.
 */
import { freePorts } from './bench-stack.js';
import type { PdVariant } from './pd-fleet.js';
import { spawnPeer, type PeerProcess } from './peers.js';

export type PdPeerWorkers =
  | { readonly prefill: readonly string[]; readonly decode: readonly string[] }
  | { readonly discovery: string };

export function pdPeerArgs(
  variant: Pick<PdVariant, 'peerKvConnector'>,
  port: number,
  metricsPort: number,
  workers: PdPeerWorkers,
): string[] {
  const connector = variant.peerKvConnector ? ['--kv-connector', variant.peerKvConnector] : [];
  const pools =
    'discovery' in workers
      ? ['--vllm-discovery-address', workers.discovery]
      : [
          // `URL PORT` -> `--prefill URL PORT` (two values of one flag, as the CLI takes them).
          ...workers.prefill.flatMap((p) => ['--prefill', ...p.split(' ')]),
          ...workers.decode.flatMap((d) => ['--decode', d]),
        ];
  return [
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--vllm-pd-disaggregation',
    ...connector,
    ...pools,
    '--policy',
    'round_robin',
    '--prometheus-host',
    '127.0.0.1',
    '--prometheus-port',
    String(metricsPort),
    '--log-level',
    'warning',
  ];
}

/** Ready: a one-token completion goes through both pools. */
async function completes(url: string): Promise<boolean> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sim-model', prompt: 'ready?', max_tokens: 1 }),
  }).catch(() => undefined);
  await res?.body?.cancel();
  return res?.status === 200;
}

export async function startPdPeer(variant: PdVariant, workers: PdPeerWorkers): Promise<PeerProcess> {
  const [port, metricsPort] = (await freePorts(2)) as [number, number];
  const args = pdPeerArgs(variant, port, metricsPort, workers);
  return spawnPeer('vllm-router', args, port, 'discovery' in workers ? completes : undefined);
}
