import { describe, expect, it } from 'vitest';
import { encodeFrame, FrameDecoder, FrameError } from '../../../src/extproc/grpc-frames.js';

const msg = (n: number, fill: number): Buffer => Buffer.alloc(n, fill);
const frames = (...ms: Buffer[]): Buffer => Buffer.concat(ms.map((m) => encodeFrame(m)));

/** Splits `buf` at the given offsets. */
function split(buf: Buffer, cuts: number[]): Buffer[] {
  const out: Buffer[] = [];
  let at = 0;
  for (const c of [...cuts, buf.length]) {
    out.push(buf.subarray(at, c));
    at = c;
  }
  return out;
}

describe('gRPC frames', () => {
  it('encodes a message as flag 0, big-endian length, bytes', () => {
    expect([...encodeFrame(Buffer.from([7, 8]))]).toEqual([0, 0, 0, 0, 2, 7, 8]);
    expect([...encodeFrame(new Uint8Array(0))]).toEqual([0, 0, 0, 0, 0]);
  });

  const stream = frames(msg(3, 1), msg(0, 0), msg(70_000, 2), msg(1, 3));
  const cases: Array<{ name: string; cuts: number[] }> = [
    { name: 'one chunk', cuts: [] },
    { name: 'split inside a header', cuts: [2] },
    { name: 'split right after a header', cuts: [5] },
    { name: 'split inside a large message, many times', cuts: [20, 100, 1000, 40_000, 70_000] },
    { name: 'every frame boundary', cuts: [8, 13, 70_018] },
    { name: 'byte by byte around boundaries', cuts: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14] },
  ];
  it.each(cases)('decodes the same messages whatever the chunking: $name', ({ cuts }) => {
    const d = new FrameDecoder();
    const got = split(stream, cuts).flatMap((c) => d.push(c));
    expect(got.map((m) => [m.length, m[0]])).toEqual([
      [3, 1],
      [0, undefined],
      [70_000, 2],
      [1, 3],
    ]);
    expect(got[2]?.every((b) => b === 2)).toBe(true);
    expect(d.idle).toBe(true);
  });

  it('returns a message inside one chunk as a view, without copying', () => {
    const chunk = frames(msg(10, 9));
    const [m] = new FrameDecoder().push(chunk);
    expect(m?.buffer).toBe(chunk.buffer);
  });

  it('is not idle while a frame is incomplete', () => {
    const d = new FrameDecoder();
    expect(d.push(frames(msg(10, 1)).subarray(0, 7))).toEqual([]);
    expect(d.idle).toBe(false);
  });

  it('refuses compressed messages', () => {
    const f = encodeFrame(Buffer.from([1]));
    f[0] = 1;
    expect(() => new FrameDecoder().push(f)).toThrow(FrameError);
  });
});
