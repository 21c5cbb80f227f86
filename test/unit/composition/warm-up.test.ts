import { afterEach, describe, expect, it } from 'vitest';
import { WarmUp } from '../../../src/composition/warm-up.js';

const open: WarmUp[] = [];
afterEach(() => open.splice(0).forEach((w) => w.close()));

function harness(timeoutMs = 1000) {
  let now = 1;
  const done: Array<readonly string[]> = [];
  const w = new WarmUp({ timeoutMs, clock: () => now, onDone: (r) => done.push(r.timedOut) });
  open.push(w);
  return { w, done, advance: (ms: number) => (now += ms) };
}

describe('WarmUp', () => {
  it('is done at start when there is nothing to warm', () => {
    const { w, done } = harness();
    w.start();
    expect(w.done).toBe(true);
    expect(done).toEqual([[]]);
  });

  it('waits for every condition, names the pending ones, and finishes once', () => {
    const { w, done } = harness();
    const state = { metrics: false, kv: false };
    w.add({ name: 'worker metrics scraped', ready: () => state.metrics });
    w.add({ name: 'kv events replayed', ready: () => state.kv });
    w.start();
    expect(w.done).toBe(false);
    expect(w.pending()).toEqual(['worker metrics scraped', 'kv events replayed']);
    state.metrics = true;
    expect(w.check()).toBe(false);
    expect(w.pending()).toEqual(['kv events replayed']);
    state.kv = true;
    expect(w.check()).toBe(true);
    expect(w.check()).toBe(true);
    expect(w.done).toBe(true);
    expect(w.pending()).toEqual([]);
    expect(done).toEqual([[]]);
  });

  it('becomes ready at the timeout and reports what was still pending', () => {
    const { w, done, advance } = harness(500);
    w.add({ name: 'never', ready: () => false });
    w.start();
    advance(499);
    expect(w.check()).toBe(false);
    advance(1);
    expect(w.check()).toBe(true);
    expect(done).toEqual([['never']]);
  });

  it('treats a throwing condition as not ready', () => {
    const { w } = harness();
    w.add({
      name: 'broken',
      ready: () => {
        throw new Error('boom');
      },
    });
    w.start();
    expect(w.pending()).toEqual(['broken']);
  });

  it('refuses conditions after start', () => {
    const { w } = harness();
    w.start();
    expect(() => w.add({ name: 'late', ready: () => true })).toThrow(/already started/);
  });

  it('polls on its own timer until ready (real clock, event-driven wait)', async () => {
    let ready = false;
    const finished = new Promise<void>((resolve) => {
      const w = new WarmUp({ timeoutMs: 60_000, pollMs: 1, onDone: () => resolve() });
      open.push(w);
      w.add({ name: 'flag', ready: () => ready });
      w.start();
      ready = true;
    });
    await finished;
  });
});
