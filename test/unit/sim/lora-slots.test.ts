import { describe, expect, it } from 'vitest';
import { LoraSlots } from '../../../src/sim/lora-slots.js';

describe('LoraSlots (vLLM --max-loras)', () => {
  it('runs at most maxLoras adapters at once; base-model sequences never wait', () => {
    const s = new LoraSlots(2);
    expect(s.canStart('a')).toBe(true);
    expect(s.start('a')).toBe(true); // loaded
    expect(s.start('a')).toBe(false); // already there
    expect(s.start('b')).toBe(true);
    expect(s.canStart('c')).toBe(false);
    expect(s.canStart('a')).toBe(true); // joins its running adapter
    expect(s.canStart(undefined)).toBe(true);
    expect(s.runningAdapters()).toEqual(['a', 'b']);
    s.finish('b');
    expect(s.canStart('c')).toBe(true);
    expect(s.loads).toBe(2);
  });

  it('keeps the most recently started adapters loaded: one that comes back soon pays no load', () => {
    const s = new LoraSlots(2);
    s.start('a');
    s.finish('a');
    s.start('b');
    s.finish('b');
    expect(s.start('a')).toBe(false); // still loaded
    s.finish('a');
    expect(s.start('c')).toBe(true); // evicts b, the least recently started
    s.finish('c');
    expect(s.start('b')).toBe(true);
    expect(s.loads).toBe(4);
  });

  it('refuses a slot count below 1', () => {
    expect(() => new LoraSlots(0)).toThrow(RangeError);
  });
});
