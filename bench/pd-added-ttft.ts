/**
 * Added time-to-first-token of the sequential P/D path (client -> Envoy -> router, which runs the
 * prefill leg itself, -> decode worker) over the same two legs run by the client itself, straight to
 * the simulators (NIXL: prefill, then decode with the prefill response's kv_transfer_params; what
 * vLLM's toy proxy does). The baseline needs a real prefill leg: the simulated decode worker validates
 * the handover (it reads the blocks the prefill issued), as a real one does.
 *
 * Simulators run with timeScale 0 (no simulated GPU time), so the difference is the routing path
 * alone: Envoy, the ext_proc round trips and the body rewrites. Requests alternate between the two
 * paths at concurrency 1; differences are taken per request pair and then summarised (never a
 * difference of percentiles). Used by `npm run bench -- pd` (bench/pd-bench.ts) and by the
 * stand-alone `npx tsx bench/pd-ttft.bench.ts`.
 */
import { request } from 'undici';
import { startEnvoy } from '../src/envoy/envoy-process.js';
import { startRouter } from '../src/router.js';
import { startSimulator } from '../src/sim/simulator.js';
import { pino } from 'pino';
import { benchRouterConfig } from './bench-stack.js';
import { pairedDiffs, percentile, round } from './stats.js';

export interface AddedTtftResult {
  readonly requests: number;
  /** Both legs run by the client, straight to the simulators. */
  readonly directTtftMs: { readonly p50: number; readonly p99: number };
  readonly pdViaEnvoyTtftMs: { readonly p50: number; readonly p99: number };
  readonly addedMs: { readonly p50: number; readonly p99: number };
  readonly ratio: { readonly p50: number };
}

/** TTFT of one streamed request, ms (the first `data: {` chunk) since `start`. */
async function ttft(url: string, body: unknown, start = performance.now()): Promise<number> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}: ${await res.body.text()}`);
  let first = 0;
  for await (const chunk of res.body) {
    if (!first && (chunk as Buffer).includes('data: {')) first = performance.now() - start;
  }
  return first;
}

const NIXL_PREFILL_KV = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

/** The client's own P/D: the prefill leg, then the decode leg with the prefill's params echoed. */
async function handRun(
  prefillUrl: string,
  decodeUrl: string,
  body: Record<string, unknown>,
): Promise<number> {
  const start = performance.now();
  const res = await request(prefillUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, max_tokens: 1, stream: false, kv_transfer_params: NIXL_PREFILL_KV }),
  });
  const prefilled = (await res.body.json()) as { kv_transfer_params?: unknown };
  if (res.statusCode !== 200) throw new Error(`prefill status ${res.statusCode}`);
  return ttft(decodeUrl, { ...body, kv_transfer_params: prefilled.kv_transfer_params }, start);
}

export async function measureAddedTtft(requests: number): Promise<AddedTtftResult> {
  const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
  const decode = await startSimulator({ role: 'decode', timeScale: 0 });
  const router = await startRouter(
    Object.freeze(benchRouterConfig({ mode: 'pd', prefill: [prefill.url], decode: [decode.url] })),
    { logger: pino({ level: 'silent' }) },
  );
  const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  try {
    const direct = (body: Record<string, unknown>): Promise<number> =>
      handRun(`${prefill.url}/v1/completions`, `${decode.url}/v1/completions`, body);
    return await alternate(`http://127.0.0.1:${envoy.listenerPort}/v1/completions`, direct, requests);
  } finally {
    await envoy.close();
    await router.close();
    await prefill.close();
    await decode.close();
  }
}

async function alternate(
  viaRouter: string,
  direct: (body: Record<string, unknown>) => Promise<number>,
  n: number,
): Promise<AddedTtftResult> {
  const base = { model: 'sim-model', max_tokens: 16, stream: true };
  for (let i = 0; i < 20; i++) {
    await ttft(viaRouter, { ...base, prompt: `warm ${i}` });
    await direct({ ...base, prompt: `warm ${i}` });
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < n; i++) {
    const prompt = `Request ${i}: ${'a moderately long prompt '.repeat(40)}`;
    a.push(await direct({ ...base, prompt }));
    b.push(await ttft(viaRouter, { ...base, prompt }));
  }
  const diffs = pairedDiffs(a, b);
  const ratios = a.map((x, i) => b[i]! / x);
  const p = (v: number[], q: number): number => round(percentile(v, q));
  return {
    requests: n,
    directTtftMs: { p50: p(a, 50), p99: p(a, 99) },
    pdViaEnvoyTtftMs: { p50: p(b, 50), p99: p(b, 99) },
    addedMs: { p50: p(diffs, 50), p99: p(diffs, 99) },
    ratio: { p50: p(ratios, 50) },
  };
}
