/**
 * Peers in the routing benchmark: the reference router (PyPI `vllm-router`) and the SGLang gateway
 * (PyPI `smg`), run as whole proxies in front of the same simulators on the same workloads as this
 * router, so the tables show all three.
 *
 * Setup: `scripts/install-peers.sh` installs pinned versions into the git-ignored `.venv-peers` (pip;
 * a few seconds when already installed). Optional by design: in CI (`CI` set), with `BENCH_PEERS=0`, or
 * when the install fails, the peers are skipped with a printed note and the benchmark runs without
 * them. A peer whose binary is missing after the install is skipped the same way.
 *
 * Flags (from each tool's `--help`): both take `--host --port --worker-urls ... --policy
 * <cache_aware|round_robin> --prometheus-host --prometheus-port --log-level`; smg runs as
 * `smg launch ...`. Both run with their own defaults otherwise (cache_aware: threshold 0.3, balance
 * abs 64 / rel 1.5, as this router's reference modes). Every listener is on 127.0.0.1. A peer is ready
 * when `GET /health` answers 200 and `GET /v1/models` lists a model (smg discovers the workers' models
 * after it starts and answers 404 model_not_found until then); 60 s budget. close() sends SIGTERM, then
 * SIGKILL after 5 s.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { freePorts, superviseChild } from './bench-stack.js';
import { ROOT } from './report-doc.js';
import { startCluster, type SimulatorCluster } from '../src/sim/cluster.js';
import type { Simulator, SimulatorOptions } from '../src/sim/simulator.js';

export type PeerName = 'vllm-router' | 'smg';
export type PeerPolicy = 'cache_aware' | 'round_robin';

export interface PeerVariant {
  /** Cell label, e.g. `vllm-router cache_aware`. */
  readonly label: string;
  readonly peer: PeerName;
  readonly policy: PeerPolicy;
}

export const PEER_VARIANTS: readonly PeerVariant[] = [
  { label: 'vllm-router round_robin', peer: 'vllm-router', policy: 'round_robin' },
  { label: 'vllm-router cache_aware', peer: 'vllm-router', policy: 'cache_aware' },
  { label: 'smg round_robin', peer: 'smg', policy: 'round_robin' },
  { label: 'smg cache_aware', peer: 'smg', policy: 'cache_aware' },
];

export const PEER_VERSIONS: Readonly<Record<PeerName, string>> = {
  'vllm-router': '0.1.17',
  smg: '1.13.0',
};

const VENV = path.join(ROOT, '.venv-peers');

function binary(peer: PeerName): string {
  return path.join(VENV, 'bin', peer);
}

/**
 * Installs the peers (unless skipped) and returns the ones that can run, logging why others cannot.
 */
export function preparePeers(log: (line: string) => void): PeerName[] {
  if (process.env.CI) {
    log('peers: skipped in CI (vllm-router, smg are optional benchmark peers)');
    return [];
  }
  if (process.env.BENCH_PEERS === '0') {
    log('peers: skipped (BENCH_PEERS=0)');
    return [];
  }
  const res = spawnSync('bash', [path.join(ROOT, 'scripts', 'install-peers.sh')], {
    cwd: ROOT,
    encoding: 'utf8',
    env: {
      ...process.env,
      VLLM_ROUTER_VERSION: PEER_VERSIONS['vllm-router'],
      SMG_VERSION: PEER_VERSIONS.smg,
    },
    timeout: 600_000,
  });
  if (res.status !== 0) {
    log(`peers: install failed (${(res.stderr || res.error?.message || '').trim().slice(-300)}); skipped`);
  }
  const ok = (Object.keys(PEER_VERSIONS) as PeerName[]).filter((p) => existsSync(binary(p)));
  for (const p of Object.keys(PEER_VERSIONS) as PeerName[]) {
    if (!ok.includes(p)) log(`peers: ${p} not available (no ${path.relative(ROOT, binary(p))}); skipped`);
  }
  return ok;
}

export interface PeerProcess {
  /** http://127.0.0.1:<port> */
  readonly url: string;
  readonly pid: number;
  stderrTail(): string;
  close(): Promise<void>;
}

/** Ready: /health answers 200 and /v1/models lists a model (smg discovers the workers' models async). */
async function servesModels(url: string): Promise<boolean> {
  const health = await fetch(`${url}/health`).catch(() => undefined);
  if (health?.status !== 200) return false;
  const res = await fetch(`${url}/v1/models`).catch(() => undefined);
  if (res?.status !== 200) return false;
  const body = (await res.json().catch(() => undefined)) as { data?: unknown[] } | undefined;
  return Array.isArray(body?.data) && body.data.length > 0;
}

export function peerArgs(
  peer: PeerName,
  policy: PeerPolicy,
  port: number,
  metricsPort: number,
  workerUrls: readonly string[],
): string[] {
  const common = [
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--worker-urls',
    ...workerUrls,
    '--policy',
    policy,
    '--prometheus-host',
    '127.0.0.1',
    '--prometheus-port',
    String(metricsPort),
  ];
  return peer === 'smg'
    ? ['launch', ...common, '--log-level', 'warn']
    : [...common, '--log-level', 'warning'];
}

/** `extraArgs`: more flags of the peer's (e.g. vllm-router's `--intra-node-data-parallel-size 4`). */
export async function startPeer(
  peer: PeerName,
  policy: PeerPolicy,
  workerUrls: readonly string[],
  extraArgs: readonly string[] = [],
): Promise<PeerProcess> {
  const [port, metricsPort] = (await freePorts(2)) as [number, number];
  return spawnPeer(peer, [...peerArgs(peer, policy, port, metricsPort, workerUrls), ...extraArgs], port);
}

/**
 * A peer as a whole proxy in front of `workers` fresh simulators: its URL, the simulators, and how to
 * close both (a peer that fails to start closes the simulators).
 */
export async function startPeerFleet(
  peer: PeerName,
  policy: PeerPolicy,
  workers: number,
  sim: SimulatorOptions,
): Promise<{ url: string; sims: readonly Simulator[]; close(): Promise<void> }> {
  const cluster = await startCluster(workers, sim);
  return startPeerOn(
    peer,
    policy,
    cluster,
    cluster.sims.map((s) => s.url),
  );
}

/**
 * A peer in front of a running fleet (`urls`, its workers' URLs; `cluster` closed with it, or at once
 * when the peer fails to start). `extraArgs`: more of the peer's flags.
 */
export async function startPeerOn(
  peer: PeerName,
  policy: PeerPolicy,
  cluster: SimulatorCluster,
  urls: readonly string[],
  extraArgs: readonly string[] = [],
): Promise<{ url: string; sims: readonly Simulator[]; close(): Promise<void> }> {
  try {
    const proxy = await startPeer(peer, policy, urls, extraArgs);
    return {
      url: proxy.url,
      sims: cluster.sims,
      close: async () => {
        await proxy.close();
        await cluster.close();
      },
    };
  } catch (err) {
    await cluster.close();
    throw err;
  }
}

/**
 * Spawns the peer's binary with `args` (which must make it listen on 127.0.0.1:`port`) and waits until
 * `ready(url)` (default: it serves models; 60 s budget); a peer that exits or never gets ready is
 * closed and reported.
 */
export async function spawnPeer(
  peer: PeerName,
  args: readonly string[],
  port: number,
  ready: (url: string) => Promise<boolean> = servesModels,
): Promise<PeerProcess> {
  const child = spawn(binary(peer), args, {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const { stderrTail, close } = superviseChild(child);
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null)
      throw new Error(`${peer} exited with ${child.exitCode}: ${stderrTail()}`);
    if (Date.now() > deadline) {
      await close();
      throw new Error(`${peer} not ready within 60 s: ${stderrTail()}`);
    }
    if (await ready(url)) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  return { url, pid: child.pid!, stderrTail, close };
}
