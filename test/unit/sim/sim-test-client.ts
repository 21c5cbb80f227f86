/** Small HTTP helpers for the simulator tests (undici against a real server on port 0). */
import { request } from 'undici';
import { afterEach } from 'vitest';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../../src/sim/simulator.js';

/**
 * For a test file's top level: a function that starts a simulator (no delays unless `timeScale` is
 * given) and closes it after the test that started it.
 */
export function simulatorsClosedAfterEach(): (opts?: SimulatorOptions) => Promise<Simulator> {
  const open: Simulator[] = [];
  afterEach(async () => {
    await Promise.all(open.splice(0).map((s) => s.close()));
  });
  return async (opts = {}) => {
    const s = await startSimulator({ timeScale: 0, ...opts });
    open.push(s);
    return s;
  };
}

export interface JsonResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  json: Record<string, unknown>;
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
  signal?: AbortSignal,
): Promise<JsonResponse> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
    signal,
  });
  return {
    status: res.statusCode,
    headers: res.headers,
    json: (await res.body.json()) as Record<string, unknown>,
  };
}

export async function getText(url: string): Promise<{ status: number; text: string }> {
  const res = await request(url);
  return { status: res.statusCode, text: await res.body.text() };
}

/** Splits an SSE body into its `data:` payloads (JSON-parsed, except `[DONE]`). */
export function sseEvents(text: string): unknown[] {
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: '))
    .map((e) => e.slice(6))
    .map((d) => (d === '[DONE]' ? d : (JSON.parse(d) as unknown)));
}

export async function postStream(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; events: unknown[] }> {
  const res = await request(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.statusCode, headers: res.headers, events: sseEvents(await res.body.text()) };
}

/** Reads a streamed body until it ends or the server cuts it: what arrived, and whether it was cut. */
export async function readUntilCut(
  body: AsyncIterable<unknown>,
): Promise<{ received: string; cut: boolean }> {
  let received = '';
  try {
    for await (const chunk of body) received += String(chunk);
  } catch {
    return { received, cut: true };
  }
  return { received, cut: false };
}

/** The kv_transfer_params a router sends with a NIXL prefill leg (what a prefill simulator accepts). */
export const NIXL_PREFILL = {
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
};

/** A 64-char-block prompt: `n` distinct blocks tagged `tag`. */
export function blockPrompt(tag: string, n: number): string {
  let out = '';
  for (let i = 0; i < n; i++) out += `${tag}-${i}-`.padEnd(64, '~');
  return out;
}
