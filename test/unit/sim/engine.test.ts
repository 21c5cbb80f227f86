import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { Engine } from '../../../src/sim/engine.js';
import { resolveTimingModel } from '../../../src/sim/timing-model.js';

interface Seq {
  tokens: number[];
  lastSeen: boolean;
  admittedAt?: number;
}

function seq(
  engine: Engine,
  outputTokens: number,
  ttftMs = 5,
): { s: Seq; job: ReturnType<Engine['submit']> } {
  const s: Seq = { tokens: [], lastSeen: false };
  const job = engine.submit({
    admit: () => {
      s.admittedAt = Date.now();
      return ttftMs;
    },
    outputTokens,
    onToken: (i, last) => {
      s.tokens.push(i);
      if (last) s.lastSeen = true;
    },
  });
  return { s, job };
}

describe('Engine (fake clock)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'Date'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('produces every token in order, then frees the slot', async () => {
    const engine = new Engine(resolveTimingModel({ baseItlMs: 10 }), 1);
    const { s } = seq(engine, 4);
    expect(engine.running).toBe(1);
    await vi.runAllTimersAsync();
    expect(s.tokens).toEqual([0, 1, 2, 3]);
    expect(s.lastSeen).toBe(true);
    expect(engine.running).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
    engine.close();
  });

  it('queues beyond maxRunningSeqs and admits FIFO when a slot frees', async () => {
    const engine = new Engine(resolveTimingModel({ maxRunningSeqs: 1 }), 1);
    const a = seq(engine, 2);
    const b = seq(engine, 2);
    const c = seq(engine, 2);
    expect([engine.running, engine.waiting]).toEqual([1, 2]);
    expect(b.s.admittedAt).toBeUndefined();
    await vi.runAllTimersAsync();
    expect([a.s.lastSeen, b.s.lastSeen, c.s.lastSeen]).toEqual([true, true, true]);
    expect(a.s.admittedAt!).toBeLessThanOrEqual(b.s.admittedAt!);
    expect(b.s.admittedAt!).toBeLessThanOrEqual(c.s.admittedAt!);
    expect([engine.running, engine.waiting]).toEqual([0, 0]);
    engine.close();
  });

  it('one step produces a token for every decoding sequence', async () => {
    const engine = new Engine(resolveTimingModel({ baseItlMs: 100, itlGrowthPerSeq: 0 }), 1);
    const a = seq(engine, 10, 1);
    const b = seq(engine, 10, 1);
    await vi.advanceTimersByTimeAsync(1); // both prefills done: first tokens
    expect([a.s.tokens.length, b.s.tokens.length]).toEqual([1, 1]);
    await vi.advanceTimersByTimeAsync(100); // one step
    expect([a.s.tokens.length, b.s.tokens.length]).toEqual([2, 2]);
    engine.close();
    expect(vi.getTimerCount()).toBe(0);
  });

  it.each(['waiting', 'prefill', 'decode'] as const)(
    'cancel while %s frees the slot and leaves no timer',
    async (phase) => {
      const engine = new Engine(resolveTimingModel({ maxRunningSeqs: 1, baseItlMs: 50 }), 1);
      const first = seq(engine, 3, 10);
      const second = seq(engine, 3, 10);
      if (phase === 'decode') await vi.advanceTimersByTimeAsync(10);
      const victim = phase === 'waiting' ? second : first;
      engine.cancel(victim.job);
      engine.cancel(victim.job); // idempotent
      await vi.runAllTimersAsync();
      const survivor = victim === first ? second : first;
      expect(survivor.s.lastSeen).toBe(true);
      expect(victim.s.lastSeen).toBe(false);
      expect([engine.running, engine.waiting]).toEqual([0, 0]);
      expect(vi.getTimerCount()).toBe(0);
      engine.close();
    },
  );

  it('timeScale 0 uses no timers, only setImmediate', async () => {
    const engine = new Engine(resolveTimingModel(), 0);
    const { s } = seq(engine, 3, 0);
    await vi.runAllTimersAsync();
    expect(s.tokens).toEqual([0, 1, 2]);
    engine.close();
  });

  it('close() cancels everything and clears timers; idempotent', () => {
    const engine = new Engine(resolveTimingModel({ maxRunningSeqs: 1 }), 1);
    const a = seq(engine, 3);
    seq(engine, 3);
    engine.close();
    engine.close();
    expect(vi.getTimerCount()).toBe(0);
    expect(a.s.tokens).toEqual([]);
    const late = seq(engine, 1);
    expect(late.job.state).toBe('done');
  });

  it.each([
    { lanes: 0, firstTokenAt: [50, 50, 50] },
    { lanes: 1, firstTokenAt: [50, 100, 150] },
    { lanes: 2, firstTokenAt: [50, 50, 100] },
  ])('prefillLanes $lanes: prefills queue on the earliest-free lane', async ({ lanes, firstTokenAt }) => {
    const engine = new Engine(resolveTimingModel({ prefillLanes: lanes, baseItlMs: 1000 }), 1);
    const start = Date.now();
    const at: number[] = [];
    for (let i = 0; i < 3; i++) {
      engine.submit({
        admit: () => 50,
        outputTokens: 2,
        onToken: (idx) => idx === 0 && at.push(Date.now() - start),
      });
    }
    await vi.advanceTimersByTimeAsync(200);
    expect(at).toEqual(firstTokenAt);
    engine.close();
  });

  it('counts a sequence whose prefill waits for a busy lane as waiting, as vLLM does', async () => {
    const engine = new Engine(resolveTimingModel({ prefillLanes: 1, baseItlMs: 1000 }), 1);
    for (let i = 0; i < 3; i++) engine.submit({ admit: () => 50, outputTokens: 2, onToken: () => undefined });
    expect([engine.running, engine.waiting]).toEqual([1, 2]);
    await vi.advanceTimersByTimeAsync(50);
    expect([engine.running, engine.waiting]).toEqual([2, 1]);
    await vi.advanceTimersByTimeAsync(50);
    expect([engine.running, engine.waiting]).toEqual([3, 0]);
    engine.close();
    expect([engine.running, engine.waiting]).toEqual([0, 0]);
  });

  describe('a step token budget (maxNumBatchedTokens): prefill stalls the decode batch, as in vLLM', () => {
    // 0.05 ms per prefill token: a budget of 2000 tokens carries at most 100 ms of prefill per step.
    const timing = (maxNumBatchedTokens: number, prefillLanes = 1) =>
      resolveTimingModel({
        prefillLanes,
        maxNumBatchedTokens,
        baseItlMs: 10,
        itlGrowthPerSeq: 0,
        prefillMsPerToken: 0.05,
      });

    /** Times of A's tokens while B (admitted right after it) prefills `computeMs` of its 5 + computeMs ms. */
    async function decodeBeside(t: ReturnType<typeof timing>, computeMs: number): Promise<number[]> {
      const engine = new Engine(t, 1);
      const start = Date.now();
      const at: number[] = [];
      engine.submit({
        admit: () => 5,
        computeMs: () => 0,
        outputTokens: 5,
        onToken: () => at.push(Date.now() - start),
      });
      engine.submit({
        admit: () => 5 + computeMs,
        computeMs: () => computeMs,
        outputTokens: 1,
        onToken: () => undefined,
      });
      await vi.advanceTimersByTimeAsync(1000);
      engine.close();
      return at;
    }

    it('without a budget the decode steps keep their pace', async () => {
      expect(await decodeBeside(timing(0), 200)).toEqual([5, 15, 25, 35, 45]);
    });

    it("each step while the neighbour's 200 ms prefill computes carries at most the budget's 100 ms of it", async () => {
      // B's compute runs 10..210 (its lane is free at 5, its 5 ms overhead first): the step armed at 5
      // carries 100 ms of it, the one armed at 115 the 95 ms left, then the pace is back.
      expect(await decodeBeside(timing(2000), 200)).toEqual([5, 115, 220, 230, 240]);
    });

    it('a prefill shorter than the budget stalls one step by its own length', async () => {
      expect(await decodeBeside(timing(2000), 40)).toEqual([5, 55, 65, 75, 85]);
    });

    it('a KV transfer (no compute) and a fully cached prompt stall nothing', async () => {
      expect(await decodeBeside(timing(2000), 0)).toEqual([5, 15, 25, 35, 45]);
    });

    it('without prefill lanes the budget has no effect', async () => {
      expect(await decodeBeside(timing(2000, 0), 200)).toEqual([5, 15, 25, 35, 45]);
    });
  });

  it('without prefill lanes every admitted sequence is running', () => {
    const engine = new Engine(resolveTimingModel({ maxRunningSeqs: 2 }), 1);
    for (let i = 0; i < 3; i++) engine.submit({ admit: () => 50, outputTokens: 2, onToken: () => undefined });
    expect([engine.running, engine.waiting]).toEqual([2, 1]);
    engine.close();
  });
});
