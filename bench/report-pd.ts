/**
 * docs/benchmarks.md section of the P/D benchmark (bench/pd-bench.ts): one table per client
 * concurrency with a row per connector and front door (TTFT p50/p90, output tokens/s, errors, front-door
 * CPU per request), ratios
 * measured within the run (against NIXL through the same front door, and this router against the
 * reference router on the same connector), then the added TTFT of the sequential path. Pure.
 */
import type { PdResult } from './pd-bench.js';
import type { PdCell } from './pd-cell.js';
import { ratio, runHeader, table } from './report-doc.js';
import type { RenderedSection } from './report-sections.js';

const FRONT: Record<PdCell['frontDoor'], string> = {
  router: 'this router (Envoy + ext_proc)',
  'vllm-router': 'vllm-router',
};

function setupLine(r: PdResult): string {
  const { setup: s } = r;
  const peers = Object.entries(s.peers).map(([p, v]) => `\`${p}\` ${v}`);
  return (
    `Setup: ${s.prefill} prefill + ${s.decode} decode simulators per connector (fresh fleet per front door), ` +
    `validating the connector's KV handover; round robin in both pools; closed-loop client sending unique ` +
    `${s.promptTokens}-token prompts for ${s.outputTokens} streamed output tokens (no prefix-cache hits); ` +
    `time scale ${s.timeScale}: prefill 5 ms + 0.05 ms/token on one lane per prefill worker, KV transfer ` +
    `0.005 ms/token, decode 10 ms per step +2% per extra running sequence. Legs: sequential = decode leg ` +
    `after the prefill response; overlapped = decode leg sent at once, its worker pulls the KV when the ` +
    `prefill is done (Mooncake); concurrent = both at once (MoRI-IO WRITE; the simulated decode worker does ` +
    `not wait for the pushed KV, so its TTFT leaves the prefill out). ` +
    `NIXL and Mooncake workers are static (\`--prefill URL [BOOTSTRAP_PORT]\`, \`--decode URL\`); MoRI-IO ` +
    `(with its transfer mode) and P2P NCCL workers join by ZMQ self-registration (heartbeat 1 s), as ` +
    `those fleets do. This router runs compiled, as its own process, behind real Envoy; front-door CPU ` +
    `is router + Envoy (or the peer's process) from /proc over the cell. ` +
    (peers.length > 0
      ? `Peer: ${peers.join(', ')} (PyPI, \`.venv-peers\`) as a whole proxy with \`--vllm-pd-disaggregation\` ` +
        `and \`--kv-connector nixl|mooncake|moriio\` (P2P NCCL: no connector flag, its ZMQ discovery).`
      : 'Peers: not run (quick run, CI, BENCH_PEERS=0 or not installed).')
  );
}

function rowsAt(cells: readonly PdCell[], concurrency: number): string[][] {
  const at = cells.filter((c) => c.concurrency === concurrency);
  const find = (variant: string, front: PdCell['frontDoor']): PdCell | undefined =>
    at.find((c) => c.variant === variant && c.frontDoor === front);
  return at.map((c) => {
    const nixl = find('nixl', c.frontDoor);
    const peer = c.frontDoor === 'router' ? find(c.variant, 'vllm-router') : undefined;
    return [
      c.variant,
      c.legs,
      FRONT[c.frontDoor],
      c.ttftP50Ms.toFixed(1),
      c.ttftP90Ms.toFixed(1),
      c.outputTokPerSec.toFixed(0),
      `${c.errors} / ${c.requests}`,
      c.frontDoorCpuMsPerRequest.toFixed(2),
      nixl ? ratio(c.ttftP50Ms, nixl.ttftP50Ms) : 'n/a',
      nixl ? ratio(c.outputTokPerSec, nixl.outputTokPerSec) : 'n/a',
      peer ? ratio(c.outputTokPerSec, peer.outputTokPerSec) : '',
      peer ? ratio(c.ttftP50Ms, peer.ttftP50Ms) : '',
    ];
  });
}

const HEAD = [
  'connector',
  'legs',
  'front door',
  'TTFT p50 ms',
  'TTFT p90 ms',
  'output tok/s',
  'errors',
  'front-door CPU ms/req',
  'TTFT p50 vs nixl',
  'tok/s vs nixl',
  'tok/s vs vllm-router',
  'TTFT p50 vs vllm-router',
];

function addedTtftLines(r: PdResult): string[] {
  const a = r.addedTtft;
  if (!a) return [];
  return [
    '### Added TTFT of the sequential path',
    '',
    `Client -> Envoy -> router (which runs the prefill leg) -> decode worker, against the same two legs ` +
      `run by the client straight to the simulators (NIXL); simulators with no simulated GPU time, concurrency 1, ${a.requests} request pairs, ` +
      `differences per pair: direct ${a.directTtftMs.p50} ms p50, via the router ${a.pdViaEnvoyTtftMs.p50} ms ` +
      `p50 (${a.pdViaEnvoyTtftMs.p99} ms p99); added **${a.addedMs.p50} ms p50**, ${a.addedMs.p99} ms p99.`,
  ];
}

function errorLines(cells: readonly PdCell[]): string[] {
  const failed = cells.filter((c) => c.firstError !== undefined);
  if (failed.length === 0) return ['Every request of every cell succeeded.'];
  return [
    'First error per failing cell:',
    '',
    ...failed.map(
      (c) => `- ${c.variant}, ${FRONT[c.frontDoor]}, concurrency ${c.concurrency}: \`${c.firstError}\``,
    ),
  ];
}

export function renderPd(r: PdResult): RenderedSection {
  const parts = ['## P/D per KV connector', '', runHeader(r.info), '', setupLine(r), ''];
  for (const c of r.setup.concurrencies) {
    parts.push(`### Concurrency ${c}`, '', table(HEAD, rowsAt(r.cells, c)), '');
  }
  parts.push(...errorLines(r.cells), '', ...addedTtftLines(r));
  return { markdown: parts.join('\n'), assets: [] };
}
