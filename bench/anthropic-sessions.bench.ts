/**
 * Coding-agent sessions on vLLM's Anthropic Messages API (`POST /v1/messages`), shaped like Claude
 * Code's traffic: `--sessions` sessions at once, each `--turns` turns in a row; every request carries
 * the same system prompt (~2,000 tokens) and tool definitions, opened by an
 * `x-anthropic-billing-header` block with a fresh hash (as Claude Code sends it), then the whole
 * conversation so far: a first user message that opens with the same repository context in every
 * session (~400 tokens) and then a file (~500 tokens), and per turn the assistant's answer, a tool call
 * and its result (~250 tokens) and a new question. Streamed, 32 output tokens.
 * Prints one JSON object to stdout (progress on stderr).
 *
 *   npx tsx bench/anthropic-sessions.bench.ts          2 interleaved runs per variant (~2 min)
 *   --repeats 3 --sessions 32 --turns 6
 *
 * Stack as the routing benchmark's (bench/routing-bench.ts TIMING, 8 simulated workers, 1024-block
 * prefix caches of 16 tokens): this router in its own process (compiled) behind real Envoy, and the
 * peers (PyPI `vllm-router`, `smg`, bench/peers.ts) as whole proxies in front of fresh simulators,
 * when they can run. Variants: round robin and cache_aware (the default) on /v1/messages, and
 * cache_aware on the same conversations sent as /v1/chat/completions (what the router already read:
 * the Messages path should route as well as that); two router replicas behind
 * envoy/envoy-replicas.yaml's affinity (Maglev on the session key, else on the prompt's opening),
 * with the sessions unnamed (`x2, opening key`) and named in Claude Code's session header
 * (`x2, session key`).
 * Per variant: requests answered 2xx (share), errors by status, prefix-cache hit rate over the
 * measured requests (cached / prompt tokens, from the simulators' records), time to first token p50 /
 * p90 (first text delta), output tokens/s over the run's wall time, max/mean requests per worker.
 *
 * Absolute figures on a shared 2-core machine are noisy: compare the ratios within one run.
 */
import { randomBytes } from 'node:crypto';
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
import { anthropicChatMessages } from '../src/request/anthropic-messages.js';

const repeats = numericFlag('repeats', 2);
const sessions = numericFlag('sessions', 32);
const turns = numericFlag('turns', 6);
const WORKERS = 8;
const OUTPUT_TOKENS = 32;
const MODEL = 'sim-model';
const log = (m: string): void => void process.stderr.write(`${m}\n`);

const WORDS = 'const let return import export function await async class type interface if else'.split(' ');
const text = (rng: () => number, chars: number, head: string): string => wordText(rng, chars, head, WORDS);
// ~1.8 characters per token on this text (the routing benchmark's measure).
const SYSTEM = text(mulberry32(7), 3686, 'You are an interactive coding agent.');
// Every session's first message opens with the same repository context (as Claude Code's does).
const REMINDER = `${text(mulberry32(11), 700, '<system-reminder> Context of this repository:')} </system-reminder>\n`;
const TOOLS = [
  {
    name: 'read_file',
    description: 'Reads a file of the repository.',
    input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
];

type Block = Record<string, unknown>;
type Message = { role: 'user' | 'assistant'; content: string | Block[] };

/** The request body of one turn: Anthropic's, or the chat request vLLM turns it into. */
function body(messages: Message[], chat: boolean): Record<string, unknown> {
  const system = [
    {
      type: 'text',
      text: `x-anthropic-billing-header: cc_version=2.1.7; cch=${randomBytes(4).toString('hex')};`,
    },
    { type: 'text', text: SYSTEM },
  ];
  const anthropic = { model: MODEL, max_tokens: OUTPUT_TOKENS, stream: true, system, tools: TOOLS, messages };
  if (!chat) return anthropic;
  return {
    model: MODEL,
    max_tokens: OUTPUT_TOKENS,
    stream: true,
    messages: anthropicChatMessages(anthropic),
    tools: TOOLS.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description, parameters: t.input_schema },
    })),
  };
}

/**
 * One run of every session against `baseUrl`; each session's turns go one after the other. `chat`: as
 * /v1/chat/completions; `sessionHeader`: each session named in Claude Code's `x-claude-code-session-id`.
 */
function converse(
  baseUrl: string,
  { chat, sessionHeader }: { chat: boolean; sessionHeader?: boolean },
  seed: number,
  n: number,
  t: number,
) {
  return runSessions(n, async (s) => {
    const rng = mulberry32(seed * 1000 + s);
    const out: Turn[] = [];
    const file = text(rng, 900, `session ${seed}.${s} file:`);
    const messages: Message[] = [{ role: 'user', content: [{ type: 'text', text: `${REMINDER}${file}` }] }];
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (sessionHeader === true) headers['x-claude-code-session-id'] = `session-${seed}-${s}`;
    for (let k = 0; k < t; k++) {
      if (k > 0) {
        const id = `toolu_${seed}_${s}_${k}`;
        messages.push({
          role: 'assistant',
          content: [{ type: 'tool_use', id, name: 'read_file', input: { path: `src/f${k}.ts` } }],
        });
        messages.push({
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: id, content: text(rng, 450, `contents of f${k}:`) },
            { type: 'text', text: text(rng, 100, `turn ${k}:`) },
          ],
        });
      }
      const url = `${baseUrl}${chat ? '/v1/chat/completions' : '/v1/messages'}`;
      const r = await streamTurn(url, body(messages, chat), OUTPUT_TOKENS, headers);
      out.push(r.turn);
      if (r.text !== undefined) messages.push({ role: 'assistant', content: r.text });
    }
    return out;
  });
}

/** `chat`: sent as /v1/chat/completions; `sessionHeader`: the client names each session in Claude Code's header. */
type Variant = SessionVariant & { chat: boolean; sessionHeader?: boolean };
const peers = preparePeers(log);
const VARIANTS: Variant[] = [
  { label: 'round_robin', chat: false, router: { policy: 'round_robin' } },
  { label: 'cache_aware', chat: false, router: { policy: 'cache_aware' } },
  { label: 'cache_aware (as chat)', chat: true, router: { policy: 'cache_aware' } },
  { label: 'cache_aware x2, opening key', chat: false, router: { policy: 'cache_aware' }, replicas: 2 },
  {
    label: 'cache_aware x2, session key',
    chat: false,
    router: { policy: 'cache_aware' },
    replicas: 2,
    sessionHeader: true,
  },
  ...peers.map((peer): Variant => ({ label: `${peer} cache_aware`, chat: false, peer })),
];

await runSessionBench({
  benchmark: 'anthropic-sessions',
  params: {},
  variants: VARIANTS,
  repeats,
  sessions,
  turns,
  workers: WORKERS,
  sim: SESSION_SIM,
  converse,
  log,
});
