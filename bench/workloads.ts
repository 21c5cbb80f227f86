/**
 * Seeded request-stream generator for the benchmarks: the same name, options and seed always give the
 * same requests, byte for byte, so every run (and every policy within a run) sees identical traffic.
 *
 * Randomness: mulberry32, a 32-bit PRNG (one multiply-xorshift round per draw), seeded per workload.
 * Text: words drawn from a small fixed vocabulary, cut to an exact character count. Token counts use
 * the simulator's approximation of 4 characters per token (src/sim/prefix-cache.ts).
 *
 * Workloads (defaults scaled from the peers' to fit a shared 2-core machine; see docs/benchmarks.md):
 * - `shared-prefix` (SGLang's generated-shared-prefix, 64 groups x 16 prompts, 2048-token system prompt,
 *   128-token question, 256-token output): G groups x P prompts, each prompt = the group's system prompt
 *   + '\n' + a unique question, on /v1/completions. Defaults 32 x 16, 2048 / 128 tokens, 32 output
 *   tokens (every output token is one SSE event through Envoy and ext_proc, which is the CPU cost on
 *   this machine; prefill, not decode, is what the comparison is about). Order: shuffled across groups.
 * - `multi-turn` (multi-round QA): U users x R rounds on /v1/chat/completions with a shared system
 *   prompt (1024 tokens); round r carries the user's r-1 previous questions (64 tokens) and synthetic
 *   answers (64 tokens), so each round's prompt extends the previous one. Order: round-major (every
 *   user's round r before any round r+1), users shuffled within a round. Defaults 32 x 6.
 * - `no-sharing`: N unrelated random prompts of the shared-prefix prompt size (2176 tokens), where
 *   affinity cannot help and must not hurt. Default N = 256.
 * - `long-prompt`: D documents of 220 KB (the size that broke a peer's endpoint picker) x Q questions
 *   each; prompt = document + question. Defaults 4 x 4.
 * - `chat-one-system-prompt`: the multi-turn generator with ONE shared 2048-token system prompt for 64
 *   users x 6 rounds (the traffic shape that piles onto one worker when affinity has no load escape).
 * - `hot-burst`: B requests (default 200) on one long shared prefix (8192 tokens) + a unique question,
 *   meant to be sent all at once (`concurrency` = B), then nothing: affinity must not put the whole
 *   burst on the one worker that holds the prefix.
 * - `external-load`: shared-prefix traffic (16 groups x 16, 1024-token system prompts) for the router,
 *   plus `external`: background requests (unique 1024-token prompts, 128 output tokens, not streamed)
 *   that a benchmark sends straight to half of the workers while the router's traffic runs (starting
 *   `externalSettleMs` before it), so the router meets load it did not cause. `external.requests` is
 *   a pool the driver cycles through.
 *
 * - `eviction-pressure` (the shape of llm-d's exact-vs-approximate prefix benchmark): T tenants (default
 *   48), each with its own long context (a 3072-token system message) that it re-visits V times (default
 *   8) with a new 32-token question, on /v1/chat/completions. Sessions overlap: the
 *   tenants enter in a seeded order and at any time A of them (default 24) are active; each request is a
 *   visit by a random active tenant, and a tenant that has made its V visits leaves for the next one.
 *   Meant for caches far smaller than the working set (the benchmark gives each worker room for about
 *   two contexts, 8 workers for 16 of the 24 active ones and a third of all 48): workers evict
 *   contexts that a router's approximate tree still believes they hold.
 *
 * Every request streams (`stream: true`, usage included) unless `stream: false` is asked for.
 */
import { seededRandom } from '../src/util/seeded-random.js';

export const CHARS_PER_TOKEN = 4;
export const WORKLOAD_NAMES = [
  'shared-prefix',
  'multi-turn',
  'no-sharing',
  'long-prompt',
  'chat-one-system-prompt',
  'hot-burst',
  'external-load',
  'eviction-pressure',
] as const;
/**
 * Workloads run only when named (`--workloads=`): not in the standard run, whose tables
 * docs/benchmarks.md keeps.
 * - batched-fewshot: an evaluation harness's traffic (lm-eval's completions with a batch size):
 *   each request a batched completions prompt, 8 prompts of one task, each the task's few-shot
 *   preamble and one question; more tasks than a worker's cache holds. Whole responses.
 */
export const EXTRA_WORKLOAD_NAMES = ['batched-fewshot'] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number] | (typeof EXTRA_WORKLOAD_NAMES)[number];

export interface BenchRequest {
  /** Position in the stream (0-based). */
  readonly index: number;
  readonly path: '/v1/completions' | '/v1/chat/completions';
  /** OpenAI JSON body. */
  readonly body: Readonly<Record<string, unknown>>;
  readonly stream: boolean;
  /** max_tokens asked for. */
  readonly outputTokens: number;
  /** Characters of model-visible prompt text (message contents for chat). */
  readonly promptChars: number;
  readonly group?: number;
  readonly user?: number;
  readonly round?: number;
}

export interface Workload {
  readonly name: WorkloadName;
  readonly seed: number;
  readonly requests: readonly BenchRequest[];
  /** Characters of text that more than one request shares (system prompts, documents). */
  readonly sharedChars: number;
  /** The resolved generator parameters (recorded in results). */
  readonly params: Readonly<Record<string, number | boolean | string>>;
  /** Closed-loop concurrency this workload is defined with (hot-burst: the whole burst at once). */
  readonly concurrency?: number;
  /** Load sent straight to workers, bypassing the router (external-load). */
  readonly external?: ExternalLoad;
}

export interface ExternalLoad {
  /** Fraction of the fleet (the first workers) kept busy. */
  readonly workerFraction: number;
  /** Closed-loop clients per busy worker. */
  readonly concurrencyPerWorker: number;
  /** Request pool per busy worker, cycled until the router's traffic ends. */
  readonly requests: readonly BenchRequest[];
  /** Header that marks a background request (so benchmarks can tell it from routed traffic). */
  readonly header: string;
  /**
   * How long the direct clients run before the router's traffic starts, ms: the busy half is then in
   * its steady state (KV pool full, requests waiting) and has shown it on its /metrics, as a fleet
   * under someone else's load does. Without it the router's first burst raced the background's start:
   * the workers' last scrape still read idle, and in 2 of 6 runs ~30 of the burst's requests went to
   * the workers about to fill, where they waited ~2.5 s for KV blocks (bench/routing-bench.ts).
   */
  readonly settleMs: number;
}

export const EXTERNAL_HEADER = 'x-bench-external';

export interface WorkloadOptions {
  seed?: number;
  model?: string;
  stream?: boolean;
  outputTokens?: number;
  /** shared-prefix */
  groups?: number;
  promptsPerGroup?: number;
  systemTokens?: number;
  questionTokens?: number;
  /** multi-turn */
  users?: number;
  rounds?: number;
  answerTokens?: number;
  /** no-sharing */
  count?: number;
  promptTokens?: number;
  /** long-prompt */
  documents?: number;
  questionsPerDocument?: number;
  documentBytes?: number;
  /** hot-burst */
  burst?: number;
  prefixTokens?: number;
  /** external-load */
  externalPerWorker?: number;
  externalPool?: number;
  externalPromptTokens?: number;
  externalOutputTokens?: number;
  /** Milliseconds the direct clients run before the router's traffic starts (default 1000). */
  externalSettleMs?: number;
  /** batched-fewshot (also `questionTokens`) */
  tasks?: number;
  batchesPerTask?: number;
  promptsPerBatch?: number;
  preambleTokens?: number;
  /** eviction-pressure */
  tenants?: number;
  visitsPerTenant?: number;
  activeTenants?: number;
  contextTokens?: number;
}

/** mulberry32 (src/util/seeded-random.ts): deterministic uniform numbers in [0, 1). */
export const mulberry32 = seededRandom;

const VOCAB = (
  'the of and to in is was for on are with as at by be this from or an have not they which one you ' +
  'were all we when there can been has more if will would about time into some could them other than ' +
  'model token cache prefix worker router request latency decode prefill kernel tensor batch queue ' +
  'block memory engine stream envoy policy tree node hash shard replica cluster metric answer question ' +
  'system user assistant document chapter section paragraph figure table result value number river ' +
  'mountain harbor village garden winter summer lantern bridge castle forest meadow ocean desert'
).split(' ');

/** Random words cut to exactly `chars` characters. */
export function randomText(rng: () => number, chars: number): string {
  const parts: string[] = [];
  let len = 0;
  while (len <= chars) {
    const w = VOCAB[Math.floor(rng() * VOCAB.length)]!;
    parts.push(w);
    len += w.length + 1;
  }
  return parts.join(' ').slice(0, chars);
}

/** Fisher-Yates with the seeded rng. */
export function shuffle<T>(rng: () => number, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

function positiveInt(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  return v;
}

interface Common {
  rng: () => number;
  model: string;
  stream: boolean;
  outputTokens: number;
}

function completion(c: Common, prompt: string, extra: Partial<BenchRequest>): Omit<BenchRequest, 'index'> {
  const body: Record<string, unknown> = { model: c.model, prompt, max_tokens: c.outputTokens };
  if (c.stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
  return {
    path: '/v1/completions',
    body,
    stream: c.stream,
    outputTokens: c.outputTokens,
    promptChars: prompt.length,
    ...extra,
  };
}

export function generateWorkload(name: WorkloadName, opts: WorkloadOptions = {}): Workload {
  const seed = opts.seed ?? 1;
  const c: Common = {
    rng: mulberry32(seed ^ hashName(name)),
    model: opts.model ?? 'sim-model',
    stream: opts.stream ?? true,
    outputTokens: positiveInt('outputTokens', opts.outputTokens ?? 32),
  };
  let items: Array<Omit<BenchRequest, 'index'>>;
  let sharedChars = 0;
  let concurrency: number | undefined;
  let external: ExternalLoad | undefined;
  let params: Record<string, number | boolean | string>;
  switch (name) {
    case 'shared-prefix': {
      const groups = positiveInt('groups', opts.groups ?? 32);
      const per = positiveInt('promptsPerGroup', opts.promptsPerGroup ?? 16);
      const sys = positiveInt('systemTokens', opts.systemTokens ?? 2048) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 128) * CHARS_PER_TOKEN;
      items = [];
      for (let g = 0; g < groups; g++) {
        const system = `group ${g} system: ${randomText(c.rng, sys)}`.slice(0, sys);
        sharedChars += system.length;
        for (let p = 0; p < per; p++) {
          items.push(completion(c, `${system}\n${randomText(c.rng, q)}`, { group: g }));
        }
      }
      shuffle(c.rng, items);
      params = { groups, promptsPerGroup: per, systemTokens: sys / 4, questionTokens: q / 4 };
      break;
    }
    case 'multi-turn':
    case 'chat-one-system-prompt': {
      const one = name === 'chat-one-system-prompt';
      const users = positiveInt('users', opts.users ?? (one ? 64 : 32));
      const rounds = positiveInt('rounds', opts.rounds ?? 6);
      const sys = positiveInt('systemTokens', opts.systemTokens ?? (one ? 2048 : 1024)) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 64) * CHARS_PER_TOKEN;
      const a = positiveInt('answerTokens', opts.answerTokens ?? 64) * CHARS_PER_TOKEN;
      const system = randomText(c.rng, sys);
      sharedChars = system.length;
      items = multiTurn(c, system, users, rounds, q, a);
      params = { users, rounds, systemTokens: sys / 4, questionTokens: q / 4, answerTokens: a / 4 };
      break;
    }
    case 'hot-burst': {
      const burst = positiveInt('burst', opts.burst ?? 200);
      const pre = positiveInt('prefixTokens', opts.prefixTokens ?? 8192) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 64) * CHARS_PER_TOKEN;
      const prefix = `hot prefix: ${randomText(c.rng, pre)}`.slice(0, pre);
      sharedChars = prefix.length;
      items = [];
      for (let i = 0; i < burst; i++)
        items.push(completion(c, `${prefix}\n${randomText(c.rng, q)}`, { group: 0 }));
      concurrency = burst;
      params = { burst, prefixTokens: pre / 4, questionTokens: q / 4 };
      break;
    }
    case 'external-load': {
      const groups = positiveInt('groups', opts.groups ?? 16);
      const per = positiveInt('promptsPerGroup', opts.promptsPerGroup ?? 16);
      const sys = positiveInt('systemTokens', opts.systemTokens ?? 1024) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 128) * CHARS_PER_TOKEN;
      items = [];
      for (let g = 0; g < groups; g++) {
        const system = `group ${g} system: ${randomText(c.rng, sys)}`.slice(0, sys);
        sharedChars += system.length;
        for (let p = 0; p < per; p++) {
          items.push(completion(c, `${system}\n${randomText(c.rng, q)}`, { group: g }));
        }
      }
      shuffle(c.rng, items);
      const perWorker = positiveInt('externalPerWorker', opts.externalPerWorker ?? 16);
      const pool = positiveInt('externalPool', opts.externalPool ?? 256);
      const ext = positiveInt('externalPromptTokens', opts.externalPromptTokens ?? 1024) * CHARS_PER_TOKEN;
      const extOut = positiveInt('externalOutputTokens', opts.externalOutputTokens ?? 128);
      const settleMs = opts.externalSettleMs ?? 1000;
      if (!Number.isInteger(settleMs) || settleMs < 0)
        throw new Error(`externalSettleMs must be a non-negative integer, got ${settleMs}`);
      const bg: Common = { ...c, stream: false, outputTokens: extOut };
      const background = Array.from({ length: pool }, (_, i) => ({
        ...completion(bg, `external ${i} ${randomText(c.rng, ext)}`.slice(0, ext), {}),
        index: i,
      }));
      external = {
        workerFraction: 0.5,
        concurrencyPerWorker: perWorker,
        requests: background,
        header: EXTERNAL_HEADER,
        settleMs,
      };
      params = {
        groups,
        promptsPerGroup: per,
        systemTokens: sys / 4,
        questionTokens: q / 4,
        externalWorkers: 'half',
        externalPerWorker: perWorker,
        externalPromptTokens: ext / 4,
        externalOutputTokens: extOut,
        externalSettleMs: settleMs,
      };
      break;
    }
    case 'eviction-pressure': {
      const tenants = positiveInt('tenants', opts.tenants ?? 48);
      const visits = positiveInt('visitsPerTenant', opts.visitsPerTenant ?? 8);
      const active = positiveInt('activeTenants', opts.activeTenants ?? 24);
      const ctx = positiveInt('contextTokens', opts.contextTokens ?? 3072) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 32) * CHARS_PER_TOKEN;
      const contexts = Array.from({ length: tenants }, (_, t) =>
        `tenant ${t} context: ${randomText(c.rng, ctx)}`.slice(0, ctx),
      );
      sharedChars = contexts.reduce((n, t) => n + t.length, 0);
      items = evictionPressure(c, contexts, visits, active, q);
      params = {
        tenants,
        visitsPerTenant: visits,
        activeTenants: active,
        contextTokens: ctx / 4,
        questionTokens: q / 4,
      };
      break;
    }
    case 'no-sharing': {
      const count = positiveInt('count', opts.count ?? 256);
      const chars = positiveInt('promptTokens', opts.promptTokens ?? 2176) * CHARS_PER_TOKEN;
      items = [];
      for (let i = 0; i < count; i++) items.push(completion(c, `${i} ${randomText(c.rng, chars)}`, {}));
      params = { count, promptTokens: chars / 4 };
      break;
    }
    case 'long-prompt': {
      const docs = positiveInt('documents', opts.documents ?? 4);
      const per = positiveInt('questionsPerDocument', opts.questionsPerDocument ?? 4);
      const bytes = positiveInt('documentBytes', opts.documentBytes ?? 220 * 1024);
      const q = positiveInt('questionTokens', opts.questionTokens ?? 128) * CHARS_PER_TOKEN;
      items = [];
      for (let d = 0; d < docs; d++) {
        const doc = `document ${d}: ${randomText(c.rng, bytes)}`.slice(0, bytes);
        sharedChars += doc.length;
        for (let p = 0; p < per; p++)
          items.push(completion(c, `${doc}\n${randomText(c.rng, q)}`, { group: d }));
      }
      shuffle(c.rng, items);
      params = { documents: docs, questionsPerDocument: per, documentBytes: bytes, questionTokens: q / 4 };
      break;
    }
    case 'batched-fewshot': {
      const tasks = positiveInt('tasks', opts.tasks ?? 48);
      const batches = positiveInt('batchesPerTask', opts.batchesPerTask ?? 4);
      const per = positiveInt('promptsPerBatch', opts.promptsPerBatch ?? 8);
      const pre = positiveInt('preambleTokens', opts.preambleTokens ?? 1536) * CHARS_PER_TOKEN;
      const q = positiveInt('questionTokens', opts.questionTokens ?? 48) * CHARS_PER_TOKEN;
      // Whole responses, as a harness reads them (one usage for the batch).
      const whole: Common = { ...c, stream: false };
      items = [];
      for (let t = 0; t < tasks; t++) {
        const preamble = `task ${t} examples: ${randomText(c.rng, pre)}`.slice(0, pre);
        sharedChars += preamble.length;
        for (let b = 0; b < batches; b++) {
          const prompts = Array.from({ length: per }, () => `${preamble}\nQ: ${randomText(c.rng, q)}\nA:`);
          const one = completion(whole, prompts[0]!, { group: t });
          items.push({
            ...one,
            body: { ...one.body, prompt: prompts },
            outputTokens: c.outputTokens * per,
            promptChars: prompts.reduce((n, p) => n + p.length, 0),
          });
        }
      }
      shuffle(c.rng, items);
      c.stream = false;
      params = {
        tasks,
        batchesPerTask: batches,
        promptsPerBatch: per,
        preambleTokens: pre / 4,
        questionTokens: q / 4,
      };
      break;
    }
    default: {
      const never: never = name;
      throw new RangeError(`unknown workload ${String(never)}`);
    }
  }
  params = { ...params, outputTokens: c.outputTokens, stream: c.stream, seed };
  return {
    name,
    seed,
    requests: items.map((it, index) => ({ ...it, index })),
    sharedChars,
    params,
    ...(concurrency !== undefined ? { concurrency } : {}),
    ...(external ? { external } : {}),
  };
}

/**
 * U users x R rounds on /v1/chat/completions, one shared system prompt; round r carries the user's
 * earlier questions and synthetic answers. Round-major, users shuffled within a round.
 */
function multiTurn(
  c: Common,
  system: string,
  users: number,
  rounds: number,
  q: number,
  a: number,
): Array<Omit<BenchRequest, 'index'>> {
  const history: Array<Array<{ role: string; content: string }>> = [];
  for (let u = 0; u < users; u++) history.push([{ role: 'system', content: system }]);
  const items: Array<Omit<BenchRequest, 'index'>> = [];
  for (let r = 0; r < rounds; r++) {
    const round: Array<Omit<BenchRequest, 'index'>> = [];
    for (let u = 0; u < users; u++) {
      const h = history[u]!;
      h.push({ role: 'user', content: `user ${u} round ${r}: ${randomText(c.rng, q)}` });
      const messages = h.map((m) => ({ ...m }));
      const chars = messages.reduce((n, m) => n + m.content.length, 0);
      const body: Record<string, unknown> = { model: c.model, messages, max_tokens: c.outputTokens };
      if (c.stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
      round.push({
        path: '/v1/chat/completions',
        body,
        stream: c.stream,
        outputTokens: c.outputTokens,
        promptChars: chars,
        user: u,
        round: r,
      });
      h.push({ role: 'assistant', content: randomText(c.rng, a) });
    }
    items.push(...shuffle(c.rng, round));
  }
  return items;
}

/**
 * eviction-pressure's order: tenants enter in a seeded order; each request is a visit by a random one of
 * the (at most) `active` tenants in session, and a tenant leaves after `visits` visits (see the header).
 */
function evictionPressure(
  c: Common,
  contexts: readonly string[],
  visits: number,
  active: number,
  q: number,
): Array<Omit<BenchRequest, 'index'>> {
  const waiting = shuffle(
    c.rng,
    contexts.map((_, t) => t),
  );
  const inSession: Array<{ tenant: number; left: number }> = [];
  const items: Array<Omit<BenchRequest, 'index'>> = [];
  while (waiting.length > 0 || inSession.length > 0) {
    while (inSession.length < active && waiting.length > 0) {
      inSession.push({ tenant: waiting.shift()!, left: visits });
    }
    const i = Math.floor(c.rng() * inSession.length);
    const s = inSession[i]!;
    const visit = visits - s.left;
    const messages = [
      { role: 'system', content: contexts[s.tenant]! },
      { role: 'user', content: `tenant ${s.tenant} visit ${visit}: ${randomText(c.rng, q)}` },
    ];
    const body: Record<string, unknown> = { model: c.model, messages, max_tokens: c.outputTokens };
    if (c.stream) Object.assign(body, { stream: true, stream_options: { include_usage: true } });
    items.push({
      path: '/v1/chat/completions',
      body,
      stream: c.stream,
      outputTokens: c.outputTokens,
      promptChars: messages.reduce((n, m) => n + m.content.length, 0),
      group: s.tenant,
      round: visit,
    });
    if (--s.left === 0) inSession.splice(i, 1);
  }
  return items;
}

/**
 * shared-prefix: the highest hit rate any routing can reach. A group's first prompt finds none of its
 * system prompt cached (the warm-up pass used other seeds); every other prompt of the group at most
 * all of it; questions are never shared.
 */
export function sharedPrefixHitCeiling(p: {
  readonly promptsPerGroup: number;
  readonly systemTokens: number;
  readonly questionTokens: number;
}): number {
  return (
    ((p.promptsPerGroup - 1) / p.promptsPerGroup) * (p.systemTokens / (p.systemTokens + p.questionTokens))
  );
}

export function isWorkloadName(v: unknown): v is WorkloadName {
  return (
    typeof v === 'string' &&
    ((WORKLOAD_NAMES as readonly string[]).includes(v) ||
      (EXTRA_WORKLOAD_NAMES as readonly string[]).includes(v))
  );
}

/** FNV-1a of the name, so workloads with the same seed still draw different streams. */
function hashName(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** Words drawn from `words` after `head` until the text is at least `chars` long (seeded by `rng`). */
export function wordText(rng: () => number, chars: number, head: string, words: readonly string[]): string {
  const out = [head];
  while (out.join(' ').length < chars) out.push(words[Math.floor(rng() * words.length)]!);
  return out.join(' ');
}
