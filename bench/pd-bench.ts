/**
 * P/D benchmark per KV connector (`npm run bench -- pd [--quick] [--connectors=nixl,mooncake]`).
 *
 * For every connector variant (bench/pd-fleet.ts): a fresh simulated fleet of 2 prefill + 2 decode
 * workers that validate the connector's handover, this router in pd mode (round robin in both pools) as
 * its own process (compiled, what production runs; quick runs use tsx) behind real Envoy
 * (bench/bench-stack.ts), as the peer is its own process too; a few warm-up requests, then closed-loop runs at each
 * concurrency (default 1, 16, 64) with unique prompts (the no-sharing workload: no prefix-cache hits,
 * so every request pays a full prefill), streamed with usage, measuring TTFT and output tokens/s at the
 * client (bench/drivers.ts), plus the front door's CPU time per request (/proc). The reference router runs the same cells as a whole proxy in front of a
 * fresh fleet (bench/pd-peer.ts; optional, skipped with a note when not installed, in CI, with
 * BENCH_PEERS=0 and in quick runs). MoRI-IO and P2P NCCL workers join both front doors by ZMQ
 * self-registration, NIXL and Mooncake workers are static. Last, the added TTFT of the
 * sequential path at concurrency 1 with no simulated GPU time (bench/pd-added-ttft.ts).
 *
 * Bounds: requests per cell = max(12, 4 x concurrency) (quick: 2 x concurrency, at least 4, at
 * concurrencies 1 and 4, time scale 0.25), 120 s per cell, every listener on 127.0.0.1.
 */
import { startCluster } from '../src/sim/cluster.js';
import type { Simulator } from '../src/sim/simulator.js';
import { buildRouter, freePort, procCpuMs, startRouterProcess } from './bench-stack.js';
import { startEnvoy } from '../src/envoy/envoy-process.js';
import { runClosedLoop } from './drivers.js';
import { measureAddedTtft, type AddedTtftResult } from './pd-added-ttft.js';
import { summarisePdCell, type PdCell, type PdFrontDoor } from './pd-cell.js';
import {
  decodeUrls,
  PD_DECODE,
  PD_PREFILL,
  PD_VARIANTS,
  pdRouterArgs,
  pdSimOptions,
  prefillArgs,
  type PdVariant,
} from './pd-fleet.js';
import { startPdPeer } from './pd-peer.js';
import { PEER_VERSIONS, preparePeers } from './peers.js';
import { runInfo, type RunInfo } from './report-doc.js';
import { generateWorkload } from './workloads.js';

export const PD_PROMPT_TOKENS = 512;
export const PD_OUTPUT_TOKENS = 64;

export interface PdBenchOptions {
  quick?: boolean;
  command?: string;
  log?: (line: string) => void;
  /** Variant labels to run (default: all of PD_VARIANTS). */
  connectors?: readonly string[];
  concurrencies?: readonly number[];
  /** Simulator time scale. Default 1 (quick: 0.25). */
  timeScale?: number;
  /** Run the reference router where installable. Default false. */
  peers?: boolean;
  /** Requests of the added-TTFT measurement; 0 skips it. Default 300 (quick: 30). */
  addedTtftRequests?: number;
}

export interface PdResult {
  readonly benchmark: 'pd';
  readonly info: RunInfo;
  readonly setup: {
    readonly prefill: number;
    readonly decode: number;
    readonly timeScale: number;
    readonly promptTokens: number;
    readonly outputTokens: number;
    readonly concurrencies: readonly number[];
    readonly variants: readonly PdVariant[];
    /** Peer name -> version, for the peers that ran. */
    readonly peers: Record<string, string>;
  };
  readonly cells: PdCell[];
  readonly addedTtft?: AddedTtftResult;
}

export function pdRequestsPerCell(concurrency: number, quick: boolean): number {
  return quick ? Math.max(4, 2 * concurrency) : Math.max(12, 4 * concurrency);
}

interface CellPlan {
  readonly variant: PdVariant;
  readonly frontDoor: PdFrontDoor;
  readonly concurrencies: readonly number[];
  readonly quick: boolean;
  readonly timeScale: number;
}

/**
 * Warm-up, then one closed-loop run per concurrency against `url`; `cpuMs` reads the front door's
 * CPU time so far.
 */
async function measureFrontDoor(url: string, plan: CellPlan, cpuMs: () => number): Promise<PdCell[]> {
  const opts = { promptTokens: PD_PROMPT_TOKENS, outputTokens: PD_OUTPUT_TOKENS };
  const warm = generateWorkload('no-sharing', { ...opts, count: 4, seed: 1000 });
  await runClosedLoop({ baseUrl: url, requests: warm.requests, concurrency: 2, maxDurationMs: 60_000 });
  const cells: PdCell[] = [];
  for (const concurrency of plan.concurrencies) {
    const count = pdRequestsPerCell(concurrency, plan.quick);
    // A seed per concurrency: unique prompts within a fleet, the same traffic for every variant.
    const w = generateWorkload('no-sharing', { ...opts, count, seed: concurrency });
    const cpu0 = cpuMs();
    const run = await runClosedLoop({
      baseUrl: url,
      requests: w.requests,
      concurrency,
      maxDurationMs: 120_000,
    });
    const { variant } = plan;
    const key = { variant: variant.label, connector: variant.connector, legs: variant.legs };
    cells.push(summarisePdCell({ ...key, frontDoor: plan.frontDoor, concurrency }, run, cpuMs() - cpu0));
  }
  return cells;
}

/** `tcp://127.0.0.1:<free port>` for a variant whose workers register over ZMQ, else undefined. */
async function discoveryEndpoint(variant: PdVariant): Promise<string | undefined> {
  return variant.discovery ? `tcp://127.0.0.1:${await freePort()}` : undefined;
}

/** A fresh fleet for one front door; closed when `fn` settles. */
async function withFleet<T>(
  plan: CellPlan,
  fn: (sims: readonly Simulator[], zmq: string | undefined) => Promise<T>,
): Promise<T> {
  const zmq = await discoveryEndpoint(plan.variant);
  const cluster = await startCluster(PD_PREFILL + PD_DECODE, pdSimOptions(plan.variant, plan.timeScale, zmq));
  try {
    return await fn(cluster.sims, zmq);
  } finally {
    await cluster.close();
  }
}

/**
 * This router as its own process (ready once both pools have a worker: Mooncake, when a prefill
 * instance's bootstrap server answered; discovery, when both roles registered) behind Envoy.
 */
function runRouterVariant(plan: CellPlan, script: string): Promise<PdCell[]> {
  return withFleet(plan, async (sims, zmq) => {
    const router = await startRouterProcess(pdRouterArgs(plan.variant, sims, zmq), [], script);
    try {
      const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
      try {
        const envoyPid = envoy.process.pid!;
        const cpuMs = (): number => router.cpuMs() + procCpuMs(envoyPid);
        return await measureFrontDoor(`http://127.0.0.1:${envoy.listenerPort}`, plan, cpuMs);
      } finally {
        await envoy.close();
      }
    } finally {
      await router.close();
    }
  });
}

function runPeerVariant(plan: CellPlan): Promise<PdCell[]> {
  return withFleet(plan, async (sims, zmq) => {
    const workers = zmq
      ? { discovery: zmq.slice('tcp://'.length) }
      : { prefill: prefillArgs(sims, plan.variant.connector), decode: decodeUrls(sims) };
    const peer = await startPdPeer(plan.variant, workers);
    try {
      return await measureFrontDoor(peer.url, plan, () => procCpuMs(peer.pid));
    } finally {
      await peer.close();
    }
  });
}

function cellLine(c: PdCell): string {
  return (
    `pd ${c.variant} ${c.frontDoor} c=${c.concurrency}: ttft p50 ${c.ttftP50Ms.toFixed(0)} ms ` +
    `p90 ${c.ttftP90Ms.toFixed(0)} ms, ${c.outputTokPerSec.toFixed(0)} tok/s, ` +
    `front-door CPU ${c.frontDoorCpuMsPerRequest.toFixed(2)} ms/req, ` +
    `errors ${c.errors}/${c.requests}${c.firstError ? ` (${c.firstError.slice(0, 100)})` : ''}`
  );
}

export async function runPdBench(opts: PdBenchOptions = {}): Promise<PdResult> {
  const quick = opts.quick ?? false;
  const log = opts.log ?? (() => undefined);
  const timeScale = opts.timeScale ?? (quick ? 0.25 : 1);
  const concurrencies = opts.concurrencies ?? (quick ? [1, 4] : [1, 16, 64]);
  const variants = PD_VARIANTS.filter((v) => !opts.connectors || opts.connectors.includes(v.label));
  const info = runInfo(opts.command ?? `npm run bench -- pd${quick ? ' --quick' : ''}`, quick);
  const peers = opts.peers ? preparePeers(log).filter((p) => p === 'vllm-router') : [];
  // Quick runs (smoke tests) skip the build and run the TypeScript through tsx.
  const script = quick ? 'src/cli.ts' : buildRouter().script;
  const cells: PdCell[] = [];
  for (const variant of variants) {
    const plan = { variant, concurrencies, quick, timeScale };
    for (const c of await runRouterVariant({ ...plan, frontDoor: 'router' }, script)) {
      cells.push(c);
      log(cellLine(c));
    }
    if (!variant.peer || peers.length === 0) continue;
    for (const c of await runPeerVariant({ ...plan, frontDoor: 'vllm-router' })) {
      cells.push(c);
      log(cellLine(c));
    }
  }
  const addedRequests = opts.addedTtftRequests ?? (quick ? 30 : 300);
  const addedTtft = addedRequests > 0 ? await measureAddedTtft(addedRequests) : undefined;
  if (addedTtft) log(`pd added TTFT (sequential, no GPU time): p50 ${addedTtft.addedMs.p50} ms`);
  return {
    benchmark: 'pd',
    info,
    setup: {
      prefill: PD_PREFILL,
      decode: PD_DECODE,
      timeScale,
      promptTokens: PD_PROMPT_TOKENS,
      outputTokens: PD_OUTPUT_TOKENS,
      concurrencies,
      variants,
      peers: Object.fromEntries(peers.map((p) => [p, PEER_VERSIONS[p]])),
    },
    cells,
    ...(addedTtft ? { addedTtft } : {}),
  };
}
