/**
 * RL rollouts beside interactive chats, on /v1/chat/completions: `--sessions` clients at once, `--turns`
 * requests each in a row. One client in `--rollout-every` is an RL trainer's rollout worker: each of its
 * requests asks for `--n` samples of one task prompt (GRPO's group: vLLM runs `n` sequences that share
 * the prompt's cached blocks) and `--rollout-tokens` tokens each. The others are chat users asking one
 * answer of 32 tokens. Every prompt is one of 4 task system prompts (~1,000 tokens) and a question of
 * its own (~200 tokens). Streamed. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/parallel-sampling.bench.ts      2 interleaved runs per variant (~4 min)
 *   --repeats 3 --sessions 32 --turns 6 --n 8 --rollout-every 4 --rollout-tokens 64
 *   --baseline-script PATH   also run another build of the router (an earlier commit's
 *                            dist/src/cli.js), as `cache_aware (baseline build)`
 *
 * The `groups split` variants send each rollout group as `n` concurrent requests of one sample (what
 * some RL frameworks do) instead of one request with `n`: the same work, `n` times the requests, each
 * prefilling or finding the shared prompt on its own.
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING: decode 10 ms per step +2% per
 * running sequence, at most 64 running per worker; 8 simulated workers), this router in its own
 * process behind real Envoy, and the peers (PyPI `vllm-router`, `smg`) in front of fresh simulators when
 * they can run. Per variant: output tokens/s (every sample's tokens) over the run's wall time, time to
 * first token p50 / p90 over all requests, max/mean SEQUENCES per worker (a request of `n` samples
 * counts n), prefix-cache hit rate.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { numericFlag } from './numeric-flag.js';
import {
  runSessionBench,
  runSessions,
  SESSION_SIM,
  streamTurn,
  type SessionVariant,
  type Turn,
} from './session-cells.js';
import { mulberry32, wordText } from './workloads.js';
import { preparePeers } from './peers.js';

const repeats = numericFlag('repeats', 2);
const sessions = numericFlag('sessions', 32);
const turns = numericFlag('turns', 6);
const samples = numericFlag('n', 8);
const rolloutEvery = Math.max(1, numericFlag('rollout-every', 4));
const rolloutTokens = numericFlag('rollout-tokens', 64);
const baselineAt = process.argv.indexOf('--baseline-script');
const baselineScript = baselineAt === -1 ? undefined : process.argv[baselineAt + 1];
const WORKERS = 8;
const CHAT_TOKENS = 32;
const MODEL = SESSION_SIM.model as string;
/** The simulators count 4 characters per token (sim/sim-tokenizer.ts). */
const TASK_CHARS = 4_000;
const QUESTION_CHARS = 800;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'prove integer sum prime factor equation answer step solve given find value'.split(' ');
const TASKS = Array.from({ length: 4 }, (_, k) =>
  wordText(mulberry32(11 + k), TASK_CHARS, `Task family ${k}. Reason step by step, then answer.`, WORDS),
);

/**
 * One run of every client against `baseUrl`; each client's requests go one after the other. `split`: a
 * rollout worker sends its group as `n` requests of one sample each, at once (as some RL frameworks
 * do), instead of one request with `n`.
 */
function traffic(baseUrl: string, split: boolean, seed: number, n: number, t: number) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s);
    const rollout = s % rolloutEvery === 0;
    const out: Turn[] = [];
    for (let k = 0; k < t; k++) {
      const system = TASKS[Math.floor(rng() * TASKS.length)]!;
      const question = wordText(rng, QUESTION_CHARS, `Client ${seed}.${s} question ${k}:`, WORDS);
      const maxTokens = rollout ? rolloutTokens : CHAT_TOKENS;
      const group = rollout && split ? samples : 1;
      const n = rollout && !split ? samples : 1;
      const body = {
        model: MODEL,
        messages: [
          { role: 'system', content: system },
          { role: 'user', content: question },
        ],
        max_tokens: maxTokens,
        stream: true,
        ...(n > 1 ? { n } : {}),
        ...(rollout ? { temperature: 1 } : {}),
      };
      const url = `${baseUrl}/v1/chat/completions`;
      const rs = await Promise.all(Array.from({ length: group }, () => streamTurn(url, body, maxTokens * n)));
      for (const r of rs) out.push(r.turn);
    }
    return out;
  });
}

const peers = preparePeers(log);
const VARIANTS: Array<SessionVariant & { split?: boolean }> = [
  { label: 'round_robin', router: { policy: 'round_robin' } },
  { label: 'cache_aware', router: { policy: 'cache_aware' } },
  { label: 'round_robin, groups split', router: { policy: 'round_robin' }, split: true },
  { label: 'cache_aware, groups split', router: { policy: 'cache_aware' }, split: true },
  ...(baselineScript === undefined
    ? []
    : [{ label: 'cache_aware (baseline build)', router: { policy: 'cache_aware' }, script: baselineScript }]),
  ...peers.map((peer) => ({ label: `${peer} cache_aware`, peer })),
];

await runSessionBench({
  benchmark: 'parallel-sampling',
  params: {
    samples,
    rolloutEvery,
    rolloutTokens,
    chatTokens: CHAT_TOKENS,
    baselineScript: baselineScript ?? null,
  },
  variants: VARIANTS,
  repeats,
  sessions,
  turns,
  workers: WORKERS,
  sim: SESSION_SIM,
  converse: (url, v, seed, n, t) => traffic(url, v.split === true, seed, n, t),
  log,
});
