/** Request objectives (routing/objectives.ts): NAME=PRIORITY specs and the priority of a header value. */
import { describe, expect, it } from 'vitest';
import { ObjectiveTable, parseObjectiveSpecs } from '../../../src/routing/objectives.js';

describe('parseObjectiveSpecs', () => {
  it('reads names and integer priorities, negative ones included', () => {
    expect(parseObjectiveSpecs(['batch=-1', 'realtime=100', ' standard = 0 ', 'a=b=+2'])).toEqual(
      new Map([
        ['batch', -1],
        ['realtime', 100],
        ['standard', 0],
        ['a=b', 2],
      ]),
    );
  });

  it.each(['batch', '=1', 'batch=', 'batch=low', 'batch=1.5', 'batch=-1e3', 'batch=99999999999'])(
    'rejects %j with the expected spelling',
    (spec) => {
      expect(() => parseObjectiveSpecs([spec])).toThrow(/--objective: expected NAME=PRIORITY/);
    },
  );

  it('rejects a name given twice', () => {
    expect(() => parseObjectiveSpecs(['batch=-1', 'batch=-2'])).toThrow(/"batch" given twice/);
  });
});

describe('ObjectiveTable', () => {
  it('gives known objectives their priority, absent and unknown ones 0', () => {
    const t = new ObjectiveTable(
      new Map([
        ['batch', -1],
        ['realtime', 10],
      ]),
    );
    expect(t.priority('batch')).toBe(-1);
    expect(t.priority('realtime')).toBe(10);
    expect(t.priority('other')).toBe(0);
    expect(t.priority(undefined)).toBe(0);
  });

  it('sheds only when some objective has a negative priority', () => {
    expect(new ObjectiveTable().sheds).toBe(false);
    expect(
      new ObjectiveTable(
        new Map([
          ['a', 0],
          ['b', 5],
        ]),
      ).sheds,
    ).toBe(false);
    expect(
      new ObjectiveTable(
        new Map([
          ['a', 0],
          ['b', -5],
        ]),
      ).sheds,
    ).toBe(true);
  });

  it('takes watched objectives over configured ones of the same name, the whole set at a time', () => {
    const t = new ObjectiveTable(
      new Map([
        ['batch', 5],
        ['flag', -2],
      ]),
      true,
    );
    expect(t.watched).toBe(true);
    t.setWatched(
      new Map([
        ['batch', -1],
        ['chat', 0],
      ]),
    );
    expect([t.priority('batch'), t.priority('flag'), t.priority('chat')]).toEqual([-1, -2, 0]);
    expect(t.entries()).toEqual(
      new Map([
        ['batch', -1],
        ['flag', -2],
        ['chat', 0],
      ]),
    );
    // A new set replaces the last: batch falls back to its flag.
    t.setWatched(new Map());
    expect(t.priority('batch')).toBe(5);
  });

  it('sheds when a watched objective is negative, or a configured one not overridden by a watched one', () => {
    const t = new ObjectiveTable(new Map([['batch', -1]]), true);
    expect(t.sheds).toBe(true);
    t.setWatched(new Map([['batch', 1]]));
    expect(t.sheds).toBe(false);
    t.setWatched(
      new Map([
        ['batch', 1],
        ['bulk', -4],
      ]),
    );
    expect(t.sheds).toBe(true);
  });
});
