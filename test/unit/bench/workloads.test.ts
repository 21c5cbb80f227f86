import { describe, expect, it } from 'vitest';
import {
  generateWorkload,
  mulberry32,
  randomText,
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

  it.each([
    { name: 'shared-prefix' as const, n: 12 },
    { name: 'multi-turn' as const, n: 12 },
    { name: 'no-sharing' as const, n: 10 },
    { name: 'long-prompt' as const, n: 4 },
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
