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
      want: { source: 'in_flight', ahead: 2 },
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
