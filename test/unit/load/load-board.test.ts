import { describe, expect, it } from 'vitest';
import { LoadBoard } from '../../../src/load/load-board.js';

const URL = 'http://10.0.0.1:8000';

describe('LoadBoard blend', () => {
  it.each([
    {
      name: 'never scraped: in-flight count only',
      sample: undefined,
      localNow: 3,
      now: 0,
      want: { source: 'in_flight', ahead: 3 },
    },
    {
      name: 'external load counts; our requests are not counted twice',
      sample: { waiting: 4, running: 6, localAtSample: 2, queuedAtSample: 1 },
      localNow: 2,
      now: 50,
      want: { source: 'scraped', ahead: 10, waiting: 4, waitingElsewhere: 3, ageMs: 50 },
    },
    {
      name: 'our own queued prefills are not a queue from elsewhere',
      sample: { waiting: 3, running: 1, localAtSample: 4, queuedAtSample: 3 },
      localNow: 4,
      now: 50,
      want: { source: 'scraped', ahead: 4, waiting: 3, waitingElsewhere: 0, ageMs: 50 },
    },
    {
      name: 'a queue from elsewhere is never more than the external load',
      sample: { waiting: 5, running: 0, localAtSample: 4, queuedAtSample: 0 },
      localNow: 4,
      now: 50,
      want: { source: 'scraped', ahead: 5, waiting: 5, waitingElsewhere: 1, ageMs: 50 },
    },
    {
      name: 'a burst since the sample counts on top of it',
      sample: { waiting: 0, running: 2, localAtSample: 2 },
      localNow: 12,
      now: 80,
      want: { source: 'scraped', ahead: 12, waiting: 0, waitingElsewhere: 0, ageMs: 80 },
    },
    {
      name: 'requests finished since the sample stop counting',
      sample: { waiting: 0, running: 8, localAtSample: 8 },
      localNow: 1,
      now: 80,
      want: { source: 'scraped', ahead: 1, waiting: 0, waitingElsewhere: 0, ageMs: 80 },
    },
    {
      name: 'worker reports less than we sent (not yet arrived): never negative external',
      sample: { waiting: 0, running: 1, localAtSample: 5 },
      localNow: 5,
      now: 10,
      want: { source: 'scraped', ahead: 5, waiting: 0, waitingElsewhere: 0, ageMs: 10 },
    },
    {
      name: 'a stale sample falls back to in-flight counts',
      sample: { waiting: 40, running: 40, localAtSample: 0 },
      localNow: 2,
      now: 1001,
      want: { source: 'in_flight', ahead: 2, stale: true },
    },
    {
      name: 'exactly at the staleness threshold is still fresh',
      sample: { waiting: 1, running: 0, localAtSample: 0 },
      localNow: 0,
      now: 1000,
      want: { source: 'scraped', ahead: 1, waiting: 1, waitingElsewhere: 1, ageMs: 1000 },
    },
    {
      name: 'a page without load figures falls back to in-flight counts',
      sample: { localAtSample: 0 },
      localNow: 4,
      now: 10,
      want: { source: 'in_flight', ahead: 4 },
    },
  ])('$name', ({ sample, localNow, now, want }) => {
    const board = new LoadBoard(1000);
    if (sample) {
      const { localAtSample, queuedAtSample, ...figures } = sample as typeof sample & {
        queuedAtSample?: number;
      };
      board.record(URL, {
        takenAtMs: 0,
        localAtSample,
        ...(queuedAtSample === undefined ? {} : { queuedAtSample }),
        figures: { ...figures, malformedLines: 0 },
      });
    }
    expect(board.view(URL, localNow, now)).toEqual(want);
  });

  it('keeps the newest sample, drops URLs that left every pool, rejects a bad threshold', () => {
    const board = new LoadBoard(1000);
    const figures = (running: number) => ({ running, malformedLines: 0 });
    board.record(URL, { takenAtMs: 20, localAtSample: 0, figures: figures(2) });
    board.record(URL, { takenAtMs: 10, localAtSample: 0, figures: figures(9) });
    expect(board.latest(URL)?.figures.running).toBe(2);
    board.retain(new Set(['http://other:1']));
    expect(board.latest(URL)).toBeUndefined();
    expect(() => new LoadBoard(0)).toThrow(RangeError);
  });
});

describe('LoadBoard foreign share (load this router did not send)', () => {
  const sample = (takenAtMs: number, localAtSample: number, running: number, waiting = 0) => ({
    takenAtMs,
    localAtSample,
    figures: { running, waiting, malformedLines: 0 },
  });

  it('stays 0 for a worker only this router uses, and until a busy sample is seen', () => {
    const board = new LoadBoard(1000);
    expect(board.foreignShare(URL)).toBe(0);
    board.record(URL, sample(0, 3, 0)); // idle page: no observation
    for (let t = 1; t <= 50; t++) board.record(URL, sample(t, 4, 3, 1));
    expect(board.foreignShare(URL)).toBe(0);
    // Our requests still counted here but already gone from the worker's page: never below 0.
    board.record(URL, sample(51, 6, 2));
    expect(board.foreignShare(URL)).toBe(0);
  });

  it('follows the share of the load that reached the worker another way: a second replica, direct clients', () => {
    const board = new LoadBoard(1000);
    for (let t = 1; t <= 40; t++) board.record(URL, sample(t, 3, 4, 2)); // half of 6 is ours
    expect(board.foreignShare(URL)).toBeCloseTo(0.5, 3);
    // One odd sample moves it part of the way, not all of it.
    board.record(URL, sample(41, 0, 6));
    expect(board.foreignShare(URL)).toBeGreaterThan(0.5);
    expect(board.foreignShare(URL)).toBeLessThan(0.75);
    for (let t = 42; t <= 80; t++) board.record(URL, sample(t, 0, 8)); // direct clients only
    expect(board.foreignShare(URL)).toBeCloseTo(1, 3);
    // A late sample is ignored, a URL that left every pool forgets its share.
    board.record(URL, sample(10, 8, 8));
    expect(board.foreignShare(URL)).toBeCloseTo(1, 3);
    board.retain(new Set());
    expect(board.foreignShare(URL)).toBe(0);
  });

  it('ignores pages with absurd figures', () => {
    const board = new LoadBoard(1000);
    board.record(URL, sample(1, 0, Number.POSITIVE_INFINITY));
    board.record(URL, sample(2, 0, Number.NaN));
    expect(board.foreignShare(URL)).toBe(0);
  });
});
