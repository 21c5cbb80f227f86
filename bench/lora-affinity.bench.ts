/**
 * LoRA affinity: requests for many LoRA adapters over a fleet whose engines hold few at once, by
 * policy. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/lora-affinity.bench.ts              2 interleaved runs per variant (~2.5 min)
 *   --repeats 3 --adapters 16 --max-loras 2 --load-ms 100 --requests 768
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts): 8 simulated vLLM workers (this process,
 * its timing model: 5 ms + 0.05 ms per uncached prompt token on one prefill lane, 10 ms decode steps
 * +2% per extra sequence), the router in its own process (compiled) behind real Envoy, a closed-loop
 * client at concurrency 64 sending streamed completions. Each simulator serves the base model `base`
 * and any other name as a LoRA adapter, as vLLM with `--enable-lora --max-loras N`
 * (sim/lora-slots.ts): at most N adapters run at once (a request for another waits, passed over by
 * the scheduler, until one drains), and starting an adapter that is not loaded costs `--load-ms`
 * (the engine keeps its N most recently started adapters loaded).
 *
 * Workload: `--requests` requests, each for one of `--adapters` adapters drawn uniformly (seeded), a
 * unique ~256-token prompt (no prefix sharing: the prefix cache plays no part), 32 output tokens. The
 * fleet holds adapters x 1 slots when adapters = workers x max-loras (the default 16 = 8 x 2): every
 * adapter fits at once if each stays on one worker.
 *
 * Variants: `round_robin`, `least_load` (load only), `cache_aware_no_lora` (the default policy with
 * `--metric-lora ''`: the cost model reads the workers' queues but not their adapters) and
 * `cache_aware` (the default policy: it also reads vllm:lora_requests_info and the router's own
 * in-flight adapters, routing/lora-affinity.ts).
 * Per variant: output tokens/s (mean of the runs, each run on a fresh stack after a 128-request
 * warm-up under another seed), TTFT p50 / p90, adapter loads per 1,000 requests (the simulators'
 * count over the measured pass), errors. Ratios vs round robin are within one run.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios.
 */
import { buildRouter, startRoutedStack } from './bench-stack.js';
import { runClosedLoop, type RequestResult } from './drivers.js';
import { TIMING } from './routing-bench.js';
import { numericFlag } from './numeric-flag.js';
import { percentile, round } from './stats.js';
import { mulberry32, type BenchRequest } from './workloads.js';

const repeats = numericFlag('repeats', 2);
const adapters = numericFlag('adapters', 16);
const maxLoras = numericFlag('max-loras', 2);
const loadMs = numericFlag('load-ms', 100);
const requests = numericFlag('requests', 768);
const WORKERS = 8;
const CONCURRENCY = 64;
const OUTPUT_TOKENS = 32;
const VARIANTS: readonly { label: string; router: Record<string, unknown> }[] = [
  { label: 'round_robin', router: { policy: 'round_robin' } },
  { label: 'least_load', router: { policy: 'least_load' } },
  // The default policy without the LoRA signal (--metric-lora ''): its cost model still reads the
  // workers' queues, so this row is what load awareness alone gives.
  { label: 'cache_aware_no_lora', router: { policy: 'cache_aware', metricLora: '' } },
  { label: 'cache_aware', router: { policy: 'cache_aware' } },
];
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'adapter tenant query table join index batch token model answer summary report'.split(' ');

function workload(n: number, seed: number): BenchRequest[] {
  const rng = mulberry32(seed);
  return Array.from({ length: n }, (_, index) => {
    const words: string[] = [`request ${seed}.${index}:`];
    while (words.join(' ').length < 1024) words.push(WORDS[Math.floor(rng() * WORDS.length)]!);
    const prompt = words.join(' ');
    const model = `lora-${Math.floor(rng() * adapters)}`;
    return {
      index,
      path: '/v1/completions',
      body: { model, prompt, max_tokens: OUTPUT_TOKENS, stream: true },
      stream: true,
      outputTokens: OUTPUT_TOKENS,
      promptChars: prompt.length,
    };
  });
}

interface Cell {
  tokensPerSec: number;
  ttftP50: number;
  ttftP90: number;
  loadsPer1000: number;
  errors: number;
}

const script = buildRouter().script;
const measured = workload(requests, 1);
const warm = workload(128, 2);
const runs = new Map<string, Cell[]>();
for (let rep = 0; rep < repeats; rep++) {
  for (const { label, router } of VARIANTS) {
    const stack = await startRoutedStack({
      workers: WORKERS,
      sim: {
        model: 'base',
        maxRecords: 0,
        timeScale: 1,
        timing: TIMING,
        lora: { maxLoras, loadMs },
      },
      router,
      routerScript: script,
    });
    try {
      await runClosedLoop({ baseUrl: stack.url, requests: warm, concurrency: CONCURRENCY });
      const loads = (): number => stack.cluster.sims.reduce((a, s) => a + s.loraLoads, 0);
      const before = loads();
      const run = await runClosedLoop({ baseUrl: stack.url, requests: measured, concurrency: CONCURRENCY });
      const ok = run.results.filter(
        (r): r is RequestResult => r !== undefined && r.status === 200 && !r.error,
      );
      const ttft = ok.map((r) => r.ttftMs ?? r.latencyMs);
      const cell: Cell = {
        tokensPerSec: ok.reduce((a, r) => a + r.outputTokens, 0) / (run.wallMs / 1000),
        ttftP50: percentile(ttft, 50),
        ttftP90: percentile(ttft, 90),
        loadsPer1000: ((loads() - before) * 1000) / measured.length,
        errors: measured.length - ok.length,
      };
      log(`run ${rep + 1} ${label}: ${JSON.stringify(cell)}`);
      runs.set(label, [...(runs.get(label) ?? []), cell]);
    } finally {
      await stack.close();
    }
  }
}

const meanOf = (cells: Cell[], k: keyof Cell): number => cells.reduce((a, c) => a + c[k], 0) / cells.length;
const rr = meanOf(runs.get('round_robin')!, 'tokensPerSec');
const results = Object.fromEntries(
  VARIANTS.map(({ label: v }) => {
    const cells = runs.get(v)!;
    const tps = meanOf(cells, 'tokensPerSec');
    return [
      v,
      {
        tokensPerSec: round(tps),
        vsRoundRobin: round(tps / rr),
        runs: cells.map((c) => round(c.tokensPerSec)),
        ttftP50Ms: round(meanOf(cells, 'ttftP50')),
        ttftP90Ms: round(meanOf(cells, 'ttftP90')),
        adapterLoadsPer1000: round(meanOf(cells, 'loadsPer1000')),
        errors: cells.reduce((a, c) => a + c.errors, 0),
      },
    ];
  }),
);
process.stdout.write(
  `${JSON.stringify(
    { benchmark: 'lora-affinity', workers: WORKERS, adapters, maxLoras, loadMs, requests, repeats, results },
    null,
    2,
  )}\n`,
);
process.exit(0);
