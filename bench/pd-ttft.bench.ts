/**
 * Added time-to-first-token of the sequential P/D path (client -> Envoy -> router, which runs the
 * prefill leg itself, -> decode worker) over calling the simulated decode worker directly.
 *
 *   npx tsx bench/pd-ttft.bench.ts [--requests 300] [--quick]
 *
 * Simulators run with timeScale 0 (no simulated GPU time), so the difference is the routing path
 * alone: Envoy, the ext_proc round trips, the prefill HTTP call and the body rewrites. Requests
 * alternate between the two paths at concurrency 1; differences are taken per request pair and then
 * summarised (never a difference of percentiles). Prints one JSON object.
 */
import { parseArgs } from 'node:util';
import os from 'node:os';
import { request } from 'undici';
import { pino } from 'pino';
import { loopbackConfig } from '../src/config.js';
import { startRouter } from '../src/router.js';
import { startEnvoy } from '../src/envoy/envoy-process.js';
import { startSimulator } from '../src/sim/simulator.js';
import { percentile, pairedDiffs } from './stats.js';

const { values } = parseArgs({
  options: { requests: { type: 'string', default: '300' }, quick: { type: 'boolean' } },
});
const n = values.quick ? 30 : Number(values.requests);

async function ttft(url: string, body: unknown): Promise<number> {
  const start = performance.now();
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

async function main(): Promise<void> {
  const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
  const decode = await startSimulator({ role: 'decode', timeScale: 0 });
  const router = await startRouter(
    Object.freeze(
      loopbackConfig({
        mode: 'pd',
        prefill: [prefill.url],
        decode: [decode.url],
        healthCheckIntervalMs: 0,
      }),
    ),
    { logger: pino({ level: 'silent' }) },
  );
  const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  const viaRouter = `http://127.0.0.1:${envoy.listenerPort}/v1/completions`;
  const direct = `${decode.url}/v1/completions`;
  const base = { model: 'sim-model', max_tokens: 16, stream: true };
  const kv = {
    do_remote_prefill: true,
    do_remote_decode: false,
    remote_engine_id: 'bench',
    remote_block_ids: [0],
    remote_host: '127.0.0.1',
    remote_port: 1,
  };
  try {
    for (let i = 0; i < 20; i++) {
      await ttft(viaRouter, { ...base, prompt: `warm ${i}` });
      await ttft(direct, { ...base, prompt: `warm ${i}`, kv_transfer_params: kv });
    }
    const a: number[] = [];
    const b: number[] = [];
    for (let i = 0; i < n; i++) {
      const prompt = `Request ${i}: ${'a moderately long prompt '.repeat(40)}`;
      a.push(await ttft(direct, { ...base, prompt, kv_transfer_params: kv }));
      b.push(await ttft(viaRouter, { ...base, prompt }));
    }
    const diffs = pairedDiffs(a, b);
    const ratios = a.map((x, i) => (b[i] as number) / x);
    console.log(
      JSON.stringify(
        {
          bench: 'pd-ttft',
          date: new Date().toISOString(),
          cores: os.cpus().length,
          requests: n,
          directTtftMs: { p50: percentile(a, 50), p99: percentile(a, 99) },
          pdViaEnvoyTtftMs: { p50: percentile(b, 50), p99: percentile(b, 99) },
          addedMs: { p50: percentile(diffs, 50), p99: percentile(diffs, 99) },
          ratio: { p50: percentile(ratios, 50) },
        },
        null,
        2,
      ),
    );
  } finally {
    await envoy.close();
    await router.close();
    await prefill.close();
    await decode.close();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
