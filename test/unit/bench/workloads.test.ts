import { describe, expect, it } from 'vitest';
import {
  generateWorkload,
  mulberry32,
  randomText,
  EXTERNAL_HEADER,
  WORKLOAD_NAMES,
  type BenchRequest,
} from '../../../bench/workloads.js';

const small = {
  groups: 4,
  promptsPerGroup: 3,
  systemTokens: 64,
  questionTokens: 8,
  users: 3,
  rounds: 4,
  answerTokens: 8,
  count: 10,
  promptTokens: 32,
  documents: 2,
  questionsPerDocument: 2,
  documentBytes: 4096,
  burst: 5,
  prefixTokens: 64,
  externalPerWorker: 2,
  externalPool: 4,
  externalPromptTokens: 16,
  externalOutputTokens: 8,
  tenants: 5,
  visitsPerTenant: 3,
  activeTenants: 2,
  contextTokens: 64,
};

const promptOf = (r: BenchRequest): string => {
  if (typeof r.body.prompt === 'string') return r.body.prompt;
  return (r.body.messages as Array<{ role: string; content: string }>).map((m) => m.content).join('|');
};

describe('mulberry32', () => {
  it('is deterministic per seed and in [0, 1)', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const c = mulberry32(43);
    const xs = Array.from({ length: 1000 }, () => a());
    expect(Array.from({ length: 1000 }, () => b())).toEqual(xs);
    expect(Array.from({ length: 1000 }, () => c())).not.toEqual(xs);
    expect(xs.every((x) => x >= 0 && x < 1)).toBe(true);
  });

  it('randomText has exactly the asked length', () => {
    const rng = mulberry32(1);
    for (const n of [1, 7, 64, 1000]) expect(randomText(rng, n)).toHaveLength(n);
  });
});

describe('generateWorkload', () => {
  it.each(WORKLOAD_NAMES)('%s: same seed -> identical stream, other seed -> different', (name) => {
    const a = generateWorkload(name, { ...small, seed: 7 });
    const b = generateWorkload(name, { ...small, seed: 7 });
    const c = generateWorkload(name, { ...small, seed: 8 });
    expect(JSON.stringify(b.requests)).toBe(JSON.stringify(a.requests));
    expect(JSON.stringify(c.requests)).not.toBe(JSON.stringify(a.requests));
    expect(a.requests.map((r) => r.index)).toEqual(a.requests.map((_, i) => i));
    for (const r of a.requests) {
      expect(r.body.max_tokens).toBe(32);
      expect(r.body.stream).toBe(true);
      expect(r.promptChars).toBeGreaterThan(0);
    }
  });

  it('batched-fewshot: each request a batch of one task, every prompt its preamble and a question', () => {
    const opts = { tasks: 3, batchesPerTask: 2, promptsPerBatch: 4, preambleTokens: 32, seed: 7 };
    const w = generateWorkload('batched-fewshot', { ...opts, outputTokens: 8 });
    expect(w.requests).toHaveLength(6);
    expect(JSON.stringify(generateWorkload('batched-fewshot', { ...opts, outputTokens: 8 }).requests)).toBe(
      JSON.stringify(w.requests),
    );
    const preambles = new Set<string>();
    for (const r of w.requests) {
      const prompts = r.body.prompt as string[];
      expect(prompts).toHaveLength(4);
      const preamble = prompts[0]!.slice(0, 128);
      expect(preamble.startsWith(`task ${r.group} examples: `)).toBe(true);
      for (const p of prompts) expect(p.slice(0, 128)).toBe(preamble);
      expect(new Set(prompts).size).toBe(4);
      preambles.add(preamble);
      // Whole responses: 4 answers of 8 tokens each.
      expect(r.stream).toBe(false);
      expect(r.body.stream).toBeUndefined();
      expect(r.outputTokens).toBe(32);
      expect(r.promptChars).toBe(prompts.reduce((n, p) => n + p.length, 0));
    }
    expect(preambles.size).toBe(3);
    expect(w.sharedChars).toBe(3 * 128);
  });

  it.each([
    { name: 'shared-prefix' as const, n: 12 },
    { name: 'multi-turn' as const, n: 12 },
    { name: 'no-sharing' as const, n: 10 },
    { name: 'long-prompt' as const, n: 4 },
    { name: 'chat-one-system-prompt' as const, n: 12 },
    { name: 'hot-burst' as const, n: 5 },
    { name: 'external-load' as const, n: 12 },
    { name: 'eviction-pressure' as const, n: 15 },
  ])('$name: $n requests', ({ name, n }) => {
    expect(generateWorkload(name, small).requests).toHaveLength(n);
  });

  it('shared-prefix: G groups x P prompts; a group shares its system prompt, groups do not', () => {
    const w = generateWorkload('shared-prefix', small);
    const sys = 64 * 4;
    const byGroup = new Map<number, string[]>();
    for (const r of w.requests) {
      expect(r.path).toBe('/v1/completions');
      const p = promptOf(r);
      expect(p).toHaveLength(sys + 1 + 8 * 4);
      byGroup.set(r.group!, [...(byGroup.get(r.group!) ?? []), p]);
    }
    expect([...byGroup.keys()].sort()).toEqual([0, 1, 2, 3]);
    const prefixes = [...byGroup.values()].map((ps) => {
      expect(ps).toHaveLength(3);
      expect(new Set(ps.map((p) => p.slice(0, sys))).size).toBe(1);
      expect(new Set(ps).size).toBe(3);
      return ps[0]!.slice(0, sys);
    });
    expect(new Set(prefixes).size).toBe(4);
    expect(w.sharedChars).toBe(4 * sys);
    // Shuffled: not grouped back to back.
    expect(w.requests.map((r) => r.group)).not.toEqual([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]);
  });

  it('multi-turn: round-major; each round extends the same user previous prompt', () => {
    const w = generateWorkload('multi-turn', small);
    const rounds = w.requests.map((r) => r.round!);
    expect(rounds).toEqual([...rounds].sort((a, b) => a - b));
    for (let u = 0; u < 3; u++) {
      const mine = w.requests.filter((r) => r.user === u);
      expect(mine.map((r) => r.round)).toEqual([0, 1, 2, 3]);
      for (let i = 1; i < mine.length; i++) {
        const prev = mine[i - 1]!.body.messages as unknown[];
        const cur = mine[i]!.body.messages as unknown[];
        expect(cur.length).toBe(prev.length + 2);
        expect(cur.slice(0, prev.length)).toEqual(prev);
        expect(mine[i]!.promptChars).toBeGreaterThan(mine[i - 1]!.promptChars);
      }
    }
    const systems = new Set(
      w.requests.map((r) => (r.body.messages as Array<{ content: string }>)[0]!.content),
    );
    expect(systems.size).toBe(1);
  });

  it('no-sharing: prompts share no 64-char prefix', () => {
    const w = generateWorkload('no-sharing', small);
    expect(new Set(w.requests.map((r) => promptOf(r).slice(0, 64))).size).toBe(10);
    expect(w.sharedChars).toBe(0);
  });

  it('long-prompt: 220 KB documents by default', () => {
    const w = generateWorkload('long-prompt', { documents: 1, questionsPerDocument: 2, seed: 3 });
    expect(w.requests).toHaveLength(2);
    for (const r of w.requests) expect(r.promptChars).toBe(220 * 1024 + 1 + 128 * 4);
  });

  it('chat-one-system-prompt: 64 users x 6 rounds, one shared 2048-token system prompt by default', () => {
    const w = generateWorkload('chat-one-system-prompt', { seed: 2 });
    expect(w.requests).toHaveLength(64 * 6);
    expect(w.params).toMatchObject({ users: 64, rounds: 6, systemTokens: 2048 });
    const systems = new Set(
      w.requests.map((r) => (r.body.messages as Array<{ role: string; content: string }>)[0]!.content),
    );
    expect(systems.size).toBe(1);
    expect([...systems][0]).toHaveLength(2048 * 4);
    for (let u = 0; u < 64; u += 21) {
      const mine = w.requests.filter((r) => r.user === u);
      expect(mine.map((r) => r.round)).toEqual([0, 1, 2, 3, 4, 5]);
      const last = mine[5]!.body.messages as unknown[];
      expect(last.slice(0, (mine[4]!.body.messages as unknown[]).length)).toEqual(mine[4]!.body.messages);
    }
  });

  it('hot-burst: one long shared prefix, sent all at once (concurrency = burst)', () => {
    const d = generateWorkload('hot-burst', { seed: 2 });
    expect(d.requests).toHaveLength(200);
    expect(d.concurrency).toBe(200);
    expect(d.params).toMatchObject({ burst: 200, prefixTokens: 8192 });
    const w = generateWorkload('hot-burst', small);
    const pre = 64 * 4;
    const prompts = w.requests.map(promptOf);
    expect(new Set(prompts.map((p) => p.slice(0, pre))).size).toBe(1);
    expect(new Set(prompts).size).toBe(5);
    expect(w.concurrency).toBe(5);
    expect(w.sharedChars).toBe(pre);
  });

  it('external-load: routed shared-prefix traffic plus a background pool for half the workers', () => {
    const w = generateWorkload('external-load', small);
    expect(w.requests.every((r) => r.stream && r.path === '/v1/completions')).toBe(true);
    expect(new Set(w.requests.map((r) => r.group)).size).toBe(4);
    const ext = w.external!;
    // The direct clients run 1 s before the router's traffic by default (steady state on /metrics).
    expect(ext).toMatchObject({
      workerFraction: 0.5,
      concurrencyPerWorker: 2,
      header: EXTERNAL_HEADER,
      settleMs: 1000,
    });
    expect(w.params).toMatchObject({ externalSettleMs: 1000 });
    expect(generateWorkload('external-load', { ...small, externalSettleMs: 0 }).external!.settleMs).toBe(0);
    expect(() => generateWorkload('external-load', { ...small, externalSettleMs: -1 })).toThrow(
      /externalSettleMs/,
    );
    expect(ext.requests).toHaveLength(4);
    expect(ext.requests.map((r) => r.index)).toEqual([0, 1, 2, 3]);
    for (const r of ext.requests) {
      expect(r.stream).toBe(false);
      expect(r.body.max_tokens).toBe(8);
      expect(promptOf(r)).toHaveLength(16 * 4);
    }
    expect(new Set(ext.requests.map(promptOf)).size).toBe(4);
    // Background prompts share nothing with the routed traffic.
    const routed = new Set(w.requests.map((r) => promptOf(r).slice(0, 16)));
    for (const r of ext.requests) expect(routed.has(promptOf(r).slice(0, 16))).toBe(false);
    expect(generateWorkload('shared-prefix', small).external).toBeUndefined();
  });

  it('eviction-pressure: each tenant re-visits its own context; at most A tenants in session at once', () => {
    const w = generateWorkload('eviction-pressure', small);
    const contexts = new Map<number, string>();
    const firstAt = new Map<number, number>();
    const lastAt = new Map<number, number>();
    for (const r of w.requests) {
      expect(r.path).toBe('/v1/chat/completions');
      const [system, user] = r.body.messages as Array<{ role: string; content: string }>;
      expect(system).toMatchObject({ role: 'system' });
      expect(system!.content).toHaveLength(64 * 4);
      expect(user!.content).toContain(`tenant ${r.group!} visit ${r.round!}:`);
      if (contexts.has(r.group!)) expect(contexts.get(r.group!)).toBe(system!.content);
      contexts.set(r.group!, system!.content);
      if (!firstAt.has(r.group!)) firstAt.set(r.group!, r.index);
      lastAt.set(r.group!, r.index);
    }
    expect(new Set(contexts.values()).size).toBe(5);
    for (let t = 0; t < 5; t++) {
      expect(w.requests.filter((r) => r.group === t).map((r) => r.round)).toEqual([0, 1, 2]);
    }
    // Sessions: at every position at most 2 tenants have started and not yet finished.
    for (let i = 0; i < w.requests.length; i++) {
      const open = [...firstAt.keys()].filter((t) => firstAt.get(t)! <= i && lastAt.get(t)! >= i);
      expect(open.length).toBeLessThanOrEqual(2);
    }
    expect(w.sharedChars).toBe(5 * 64 * 4);
  });

  it('stream: false builds non-streaming bodies', () => {
    const w = generateWorkload('no-sharing', { ...small, stream: false });
    for (const r of w.requests) {
      expect(r.stream).toBe(false);
      expect(r.body.stream).toBeUndefined();
    }
  });

  it('rejects invalid sizes', () => {
    expect(() => generateWorkload('shared-prefix', { groups: 0 })).toThrow(RangeError);
    expect(() => generateWorkload('no-sharing', { count: 1.5 })).toThrow(RangeError);
  });
});
