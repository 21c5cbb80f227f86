/**
 * Which of several in-process router replicas routed a request: each replica's processed count
 * (summed over its workers) before and after it. The count moves when the router sees the response
 * end through ext_proc, which can trail the client's last byte by a moment: waited for, not slept.
 */
import { expect } from 'vitest';
import type { Router } from '../../src/router.js';
import { waitFor } from './wait-for.js';

const served = (routers: readonly Router[]): number[] =>
  routers.map((r) => r.workers().reduce((n, w) => n + w.processed, 0));

/** Sends one request with `send` (expects 200) and returns the index of the replica that routed it. */
export async function replicaThatServed(
  routers: readonly Router[],
  send: () => Promise<Response>,
): Promise<number> {
  const before = served(routers);
  const total = (counts: number[]) => counts.reduce((a, b) => a + b, 0);
  const res = await send();
  expect(res.status, await res.clone().text()).toBe(200);
  await res.text();
  let after = served(routers);
  await waitFor(() => total((after = served(routers))) > total(before));
  const moved = after.map((n, i) => n - before[i]!);
  expect(total(moved)).toBe(1);
  return moved.indexOf(1);
}
