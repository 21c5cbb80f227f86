import { describe, expect, it } from 'vitest';
import { numericFlag } from '../../../bench/numeric-flag.js';

describe('numericFlag (micro-benchmark command lines)', () => {
  it('reads --name <number>, or the fallback when the flag is absent', () => {
    expect(numericFlag('rounds', 4, ['node', 'x.ts', '--rounds', '2'])).toBe(2);
    expect(numericFlag('rounds', 4, ['node', 'x.ts'])).toBe(4);
    expect(numericFlag('idle-seconds', 30, ['--idle-seconds', '0'])).toBe(0);
  });

  it('rejects a missing, negative or non-numeric value with the flag named', () => {
    expect(() => numericFlag('rounds', 4, ['--rounds'])).toThrow('--rounds needs a number >= 0');
    expect(() => numericFlag('rounds', 4, ['--rounds', '-1'])).toThrow(RangeError);
    expect(() => numericFlag('rounds', 4, ['--rounds', 'two'])).toThrow(RangeError);
  });
});
