/**
 * Saturation (load/saturation.ts): a set of workers is saturated when none has a fresh scraped sample
 * within the waiting and KV-usage limits; the queue counts this router's prefills queued since. A
 * worker without load figures (no /metrics) is judged from this router's queued prefills alone.
 */
import { describe, expect, it } from 'vitest';
import { LoadBoard } from '../../../src/load/load-board.js';
import type { Backlog } from '../../../src/load/prefill-backlog.js';
import { DEFAULT_SATURATION, hasRoom, saturated } from '../../../src/load/saturation.js';

interface W {
  readonly url: string;
  readonly load: number;
  readonly backlog?: Backlog;
}

const NOW = 10_000;

function signalsOf(board: LoadBoard, withBacklog = true) {
  return {
    load: (w: W) => board.view(w.url, w.load, NOW),
    ...(withBacklog ? { backlog: (w: W) => w.backlog ?? { requests: 0, tokens: 0 } } : {}),
  };
}

function sample(
  board: LoadBoard,
  url: string,
  figures: { waiting?: number; running?: number; kvUsage?: number },
  at = NOW - 50,
  localAtSample = 0,
  queuedAtSample = 0,
): void {
  board.record(url, {
    takenAtMs: at,
    localAtSample,
    queuedAtSample,
    figures: { malformedLines: 0, ...figures },
  });
}

describe('hasRoom', () => {
  const limits = DEFAULT_SATURATION; // 5 waiting, 0.8 KV usage, as the endpoint picker's defaults
  const cases: Array<{
    name: string;
    figures: { waiting?: number; running?: number; kvUsage?: number };
    at?: number;
    backlog?: Backlog;
    localAtSample?: number;
    queuedAtSample?: number;
    room: boolean;
  }> = [
    { name: 'idle, fresh', figures: { waiting: 0, running: 0, kvUsage: 0.1 }, room: true },
    { name: 'queue at the limit', figures: { waiting: 5, running: 20, kvUsage: 0.5 }, room: true },
    { name: 'queue above the limit', figures: { waiting: 6, running: 20, kvUsage: 0.5 }, room: false },
    { name: 'KV usage above the limit', figures: { waiting: 0, running: 40, kvUsage: 0.81 }, room: false },
    { name: 'no KV usage figure', figures: { waiting: 1, running: 3 }, room: true },
    { name: 'stale sample', figures: { waiting: 0, running: 0 }, at: NOW - 5_000, room: false },
    { name: 'page with neither queue nor running', figures: { kvUsage: 0.1 }, room: true },
    {
      name: "page with neither queue nor running, this router's prefills fill its queue",
      figures: {},
      backlog: { requests: 6, tokens: 600 },
      room: false,
    },
    {
      name: "this router's burst since the sample fills the queue",
      figures: { waiting: 2, running: 10 },
      backlog: { requests: 6, tokens: 6000 },
      room: false,
    },
    {
      name: 'its own queued prefills are not counted twice',
      figures: { waiting: 5, running: 10 },
      localAtSample: 5,
      queuedAtSample: 5,
      backlog: { requests: 5, tokens: 500 },
      room: true,
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const board = new LoadBoard(1000);
      const w: W = { url: 'http://a', load: 0, ...(c.backlog ? { backlog: c.backlog } : {}) };
      sample(board, w.url, c.figures, c.at, c.localAtSample, c.queuedAtSample);
      expect(hasRoom(w, signalsOf(board), limits)).toBe(c.room);
    });
  }

  it("no sample (its /metrics is 404): judged from this router's own queued prefills", () => {
    const board = new LoadBoard(1000);
    const s = signalsOf(board);
    expect(hasRoom({ url: 'http://a', load: 3 }, s, limits)).toBe(true);
    expect(hasRoom({ url: 'http://a', load: 9, backlog: { requests: 5, tokens: 50 } }, s, limits)).toBe(true);
    expect(hasRoom({ url: 'http://a', load: 9, backlog: { requests: 6, tokens: 60 } }, s, limits)).toBe(
      false,
    );
    // Without a backlog (a policy that tracks none), nothing says it is saturated.
    expect(hasRoom({ url: 'http://a', load: 50 }, signalsOf(board, false), limits)).toBe(true);
  });

  it('without a backlog, reads the scraped queue alone', () => {
    const board = new LoadBoard(1000);
    const w: W = { url: 'http://a', load: 0, backlog: { requests: 50, tokens: 1 } };
    sample(board, w.url, { waiting: 3, running: 1 });
    expect(hasRoom(w, signalsOf(board, false), limits)).toBe(true);
    expect(hasRoom(w, signalsOf(board, true), limits)).toBe(false);
  });
});

describe('saturated', () => {
  it('is false while one worker has room, true when none has, and true for no workers', () => {
    const board = new LoadBoard(1000);
    const a: W = { url: 'http://a', load: 0 };
    const b: W = { url: 'http://b', load: 0 };
    sample(board, a.url, { waiting: 9, running: 64, kvUsage: 0.95 });
    sample(board, b.url, { waiting: 0, running: 2, kvUsage: 0.2 });
    const s = signalsOf(board);
    expect(saturated([a, b], s, DEFAULT_SATURATION)).toBe(false);
    expect(saturated([a], s, DEFAULT_SATURATION)).toBe(true);
    expect(saturated([], s, DEFAULT_SATURATION)).toBe(true);
    // Looser limits give the busy worker room again.
    expect(saturated([a], s, { waiting: 10, kvUsage: 0.99 })).toBe(false);
  });
});
