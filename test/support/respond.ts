/**
 * Drives one response through a Dispatch as the ext_proc session does: headers (asking whether the
 * body is watched), the chunks when it is, the end. Returns whether the body was watched.
 */
import type { Dispatch } from '../../src/extproc/dispatch.js';

export function respond(d: Dispatch, status: number, chunks: Buffer[]): boolean {
  const watched = d.watchResponseBody?.(status) ?? true;
  d.onResponseStart?.(status, watched);
  if (watched) chunks.forEach((c, i) => d.transformResponseChunk?.(c, i === chunks.length - 1));
  d.finish({ kind: 'response', status });
  return watched;
}
