/**
 * The simulated P/D fleet of the P/D benchmark (bench/pd-bench.ts): 2 prefill + 2 decode simulators
 * speaking one KV connector, and the connector variants measured on it.
 *
 * Variants follow the router's dispatch modes (src/pd/pd-dispatcher.ts): NIXL, MoRI-IO READ and P2P
 * NCCL run the legs one after the other (sequential: the decode leg starts when the prefill response is
 * back), Mooncake overlaps them (the decode leg is sent at once and its worker pulls the KV when the
 * prefill is done: the simulator's bootstrap side channel makes it wait), and MoRI-IO WRITE runs them
 * concurrently (chosen by the WRITE registrations, under `--pd-dispatch auto`). The simulator's decode role validates each connector's fields (src/sim/remote-kv-check.ts),
 * so a wrong handover is an error in the results, not a silent success. Caveat: for MoRI-IO WRITE the
 * simulated decode worker does not wait for the pushed KV, so its TTFT leaves out the prefill (a lower
 * bound that real hardware would not reach).
 *
 * Timing: the simulator's default model at `timeScale` (1 in a published run): 5 ms + 0.05 ms per
 * prompt token of prefill on ONE prefill lane per worker (finite prefill capacity, as on a GPU), KV
 * transfer 0.005 ms per prompt token on the decode side, decode steps of 10 ms +2% per extra running
 * sequence.
 */
import type { KvConnector } from '../src/pd/kv-transfer.js';
import type { Simulator, SimulatorOptions } from '../src/sim/simulator.js';

export interface PdVariant {
  /** Row label, e.g. `mooncake`. */
  readonly label: string;
  readonly connector: KvConnector;
  /** How the router runs the two legs for this variant (what the label means). */
  readonly legs: 'sequential' | 'overlapped' | 'concurrent';
  /**
   * Workers join by ZMQ self-registration (vLLM's heartbeat; MoRI-IO with its `transfer_mode`), as
   * MoRI-IO and P2P NCCL fleets do and as the reference router requires for them; otherwise static.
   */
  readonly discovery?: { readonly transferMode?: 'READ' | 'WRITE' };
  /** The reference router runs this variant (with `--kv-connector peerKvConnector` when given). */
  readonly peer: boolean;
  readonly peerKvConnector?: 'nixl' | 'mooncake' | 'moriio';
}

export const PD_VARIANTS: readonly PdVariant[] = [
  { label: 'nixl', connector: 'nixl', legs: 'sequential', peer: true, peerKvConnector: 'nixl' },
  { label: 'mooncake', connector: 'mooncake', legs: 'overlapped', peer: true, peerKvConnector: 'mooncake' },
  {
    label: 'mori-io-read',
    connector: 'moriio',
    legs: 'sequential',
    discovery: { transferMode: 'READ' },
    peer: true,
    peerKvConnector: 'moriio',
  },
  {
    label: 'mori-io-write',
    connector: 'moriio',
    legs: 'concurrent',
    discovery: { transferMode: 'WRITE' },
    peer: true,
    peerKvConnector: 'moriio',
  },
  // The reference router has no `--kv-connector` value for P2P NCCL: its ZMQ discovery is that path.
  { label: 'p2p-nccl', connector: 'p2pnccl', legs: 'sequential', discovery: {}, peer: true },
];

export const PD_PREFILL = 2;
export const PD_DECODE = 2;

/**
 * Simulator options of fleet member `index` (the first PD_PREFILL are prefill, the rest decode).
 * `zmq`: the discovery endpoint the workers register with (variants with `discovery`), heartbeat 1 s.
 */
export function pdSimOptions(
  variant: PdVariant,
  timeScale: number,
  zmq?: string,
): (index: number) => SimulatorOptions {
  const mode = variant.discovery?.transferMode;
  const register =
    variant.discovery && zmq
      ? { zmq, intervalMs: 1000, ...(mode ? { extra: { transfer_mode: mode } } : {}) }
      : undefined;
  return (index) => ({
    role: index < PD_PREFILL ? 'prefill' : 'decode',
    kvConnector: variant.connector,
    timeScale,
    timing: { prefillLanes: 1 },
    // Records hold parsed bodies; the benchmark reads none.
    maxRecords: 0,
    ...(register ? { register } : {}),
  });
}

/** `--prefill` values: Mooncake's carry the instance's bootstrap port (`URL PORT`), as in vLLM. */
export function prefillArgs(sims: readonly Simulator[], connector: KvConnector): string[] {
  return sims
    .filter((s) => s.role === 'prefill')
    .map((s) => (connector === 'mooncake' && s.bootstrapPort ? `${s.url} ${s.bootstrapPort}` : s.url));
}

export function decodeUrls(sims: readonly Simulator[]): string[] {
  return sims.filter((s) => s.role === 'decode').map((s) => s.url);
}

/** The router CLI's P/D flags for a fleet started with pdSimOptions (same `zmq`). */
export function pdRouterArgs(variant: PdVariant, sims: readonly Simulator[], zmq?: string): string[] {
  const workers =
    variant.discovery && zmq
      ? ['--discovery-zmq', zmq]
      : [
          ...prefillArgs(sims, variant.connector).flatMap((p) => ['--prefill', ...p.split(' ')]),
          ...decodeUrls(sims).flatMap((d) => ['--decode', d]),
        ];
  return [
    '--mode',
    'pd',
    ...workers,
    '--kv-connector',
    variant.connector,
    '--prefill-policy',
    'round_robin',
    '--decode-policy',
    'round_robin',
  ];
}
