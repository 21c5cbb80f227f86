/**
 * Coding agents with their own tools, on /v1/chat/completions: `--sessions` agents at once, `--turns`
 * turns each in a row. Every request carries one short shared system prompt, the agent's tools (one of
 * `--profiles` tool sets, ~`--tool-tokens` tokens of function definitions each: the MCP servers a user
 * has configured; agent s has set s mod profiles), and the conversation so far: the same opening
 * request in every agent, then per turn the assistant's answer with a tool call and the tool's result
 * (~250 tokens). vLLM's chat template renders the tools into the prompt's opening system block, so
 * they are most of every prompt; the simulators render them the same way (sim/sim-tokenizer.ts).
 * Streamed, 32 output tokens. Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/agent-tools.bench.ts        2 interleaved runs per variant (~2 min)
 *   --repeats 3 --sessions 32 --turns 6 --profiles 4 --tool-tokens 6000
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING, 8 simulated workers, 1024-block
 * prefix caches of 16 tokens): this router in its own process (compiled) behind real Envoy, and the
 * peers (PyPI `vllm-router`, `smg`, bench/peers.ts) as whole proxies in front of fresh simulators,
 * when they can run. Variants: round robin, cache_aware (the default: tools and tool calls in the
 * routing text, request/prompt-text.ts), cache_aware with `--tools-in-prompt false` (the routing text
 * of the messages alone, as before), and two router replicas behind envoy/envoy-replicas.yaml's
 * affinity, with the agents unnamed (`x2, opening key`: every agent opens alike) and each naming its
 * conversation in OpenAI's `prompt_cache_key` (`x2, prompt_cache_key`).
 * Per variant: prefix-cache hit rate (cached / prompt tokens over the simulators' records), output
 * tokens/s over the run's wall time, time to first token p50 / p90, max/mean requests per worker.
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
const profiles = numericFlag('profiles', 4);
const toolTokens = numericFlag('tool-tokens', 6000);
const WORKERS = 8;
const OUTPUT_TOKENS = 32;
const MODEL = SESSION_SIM.model as string;
/** Tools per profile; the simulators count 4 characters per token (sim/sim-tokenizer.ts). */
const TOOLS_PER_PROFILE = 24;
const SIM_CHARS_PER_TOKEN = 4;
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'const let return import export function await async class type interface if else'.split(' ');
const text = (rng: () => number, chars: number, head: string): string => wordText(rng, chars, head, WORDS);
const SYSTEM = 'You are a coding agent. Use the tools to inspect and change the repository, then report.';
const OPENING = 'The CI run on main failed. Find the failing test, fix the code, and run the tests again.';

/** Tool set `p`: TOOLS_PER_PROFILE functions whose JSON adds up to about `toolTokens` tokens. */
function toolProfile(p: number): Record<string, unknown>[] {
  const rng = mulberry32(7_000 + p);
  const descriptionChars = Math.max(
    40,
    Math.round((toolTokens * SIM_CHARS_PER_TOKEN) / TOOLS_PER_PROFILE) - 160,
  );
  return Array.from({ length: TOOLS_PER_PROFILE }, (_, k) => ({
    type: 'function',
    function: {
      name: `mcp${p}_tool${k}`,
      description: text(rng, descriptionChars, `Tool ${k} of server ${p}:`),
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  }));
}
const PROFILES = Array.from({ length: profiles }, (_, p) => toolProfile(p));

/**
 * One run of every agent against `baseUrl`; each agent's turns go one after the other. `cacheKey`: each
 * agent names its conversation in OpenAI's `prompt_cache_key` (as Codex does), the replicas' affinity key.
 */
function converse(baseUrl: string, cacheKey: boolean, seed: number, n: number, t: number) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s);
    const p = s % profiles;
    const tools = PROFILES[p]!;
    const messages: Record<string, unknown>[] = [
      { role: 'system', content: SYSTEM },
      { role: 'user', content: OPENING },
    ];
    const out: Turn[] = [];
    for (let k = 0; k < t; k++) {
      const body = {
        model: MODEL,
        messages,
        tools,
        max_tokens: OUTPUT_TOKENS,
        stream: true,
        ...(cacheKey ? { prompt_cache_key: `agent-${seed}-${s}` } : {}),
      };
      const r = await streamTurn(`${baseUrl}/v1/chat/completions`, body, OUTPUT_TOKENS);
      out.push(r.turn);
      if (r.text === undefined) continue;
      // The model's answer called one of the agent's tools; its result comes back as a tool message.
      const id = `call_${seed}_${s}_${k}`;
      const name = `mcp${p}_tool${Math.floor(rng() * TOOLS_PER_PROFILE)}`;
      const args = JSON.stringify({ path: `src/agent${s}/file${k}.ts` });
      messages.push(
        {
          role: 'assistant',
          content: r.text,
          tool_calls: [{ id, type: 'function', function: { name, arguments: args } }],
        },
        { role: 'tool', tool_call_id: id, content: text(rng, 900, `agent ${seed}.${s} result ${k}:`) },
      );
    }
    return out;
  });
}

const peers = preparePeers(log);
const VARIANTS: Array<SessionVariant & { cacheKey?: boolean }> = [
  { label: 'round_robin', router: { policy: 'round_robin' } },
  { label: 'cache_aware', router: { policy: 'cache_aware' } },
  { label: 'cache_aware, tools left out', router: { policy: 'cache_aware', toolsInPrompt: false } },
  { label: 'cache_aware x2, opening key', router: { policy: 'cache_aware' }, replicas: 2 },
  {
    label: 'cache_aware x2, prompt_cache_key',
    router: { policy: 'cache_aware' },
    replicas: 2,
    cacheKey: true,
  },
  ...peers.map((peer) => ({ label: `${peer} cache_aware`, peer })),
];

await runSessionBench({
  benchmark: 'agent-tools',
  params: { profiles, toolTokens },
  variants: VARIANTS,
  repeats,
  sessions,
  turns,
  workers: WORKERS,
  sim: SESSION_SIM,
  converse: (url, v, seed, n, t) => converse(url, v.cacheKey === true, seed, n, t),
  log,
});
