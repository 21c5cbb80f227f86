/**
 * One HTTP call to a worker on behalf of a request the router answers itself for the whole fleet
 * (routing/lora-fanout.ts, routing/fleet-control.ts): the method, path and body the client sent, its
 * `authorization` (or `--worker-api-key`), a timeout; the answer's status and a short message. A
 * worker that cannot be reached answers status 0 with the error's code as its message.
 */
import { request, type Dispatcher } from 'undici';
import { joinUrl } from '../util/http-page.js';
import type { Worker } from '../workers/worker.js';

export interface WorkerCall {
  readonly url: string;
  readonly method: 'GET' | 'POST';
  /** Path and query string. */
  readonly path: string;
  readonly body?: Buffer;
  readonly authorization?: string;
  /** Timeout of the answer's headers and of its body, ms. */
  readonly timeoutMs: number;
}

export interface WorkerAnswer {
  /** 0 when the worker could not be reached. */
  readonly status: number;
  /** The answer's body (at most MAX_TEXT characters). */
  readonly text: string;
  /** vLLM's message: its JSON error's `message`, else the text (at most MAX_MESSAGE characters). */
  readonly message: string;
}

const MAX_MESSAGE = 300;
const MAX_TEXT = 64 * 1024;

export async function callWorker(agent: Dispatcher, call: WorkerCall): Promise<WorkerAnswer> {
  const auth = call.authorization;
  try {
    const res = await request(joinUrl(call.url, call.path), {
      method: call.method,
      dispatcher: agent,
      headers: {
        ...(call.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(auth ? { authorization: auth } : {}),
      },
      ...(call.body !== undefined ? { body: call.body } : {}),
      headersTimeout: call.timeoutMs,
      bodyTimeout: call.timeoutMs,
    });
    const text = (await res.body.text()).slice(0, MAX_TEXT);
    return { status: res.statusCode, text, message: messageOf(text) };
  } catch (err) {
    const message = (err as { code?: string }).code ?? (err as Error).message;
    return { status: 0, text: '', message };
  }
}

/** vLLM's answer text: its plain-text success line, or the message of its JSON error. */
export function messageOf(text: string): string {
  try {
    const j = JSON.parse(text) as { error?: unknown; message?: unknown; detail?: unknown };
    const e = j.error;
    const m =
      (typeof e === 'object' && e !== null ? (e as { message?: unknown }).message : e) ??
      j.message ??
      j.detail;
    if (typeof m === 'string') return m.slice(0, MAX_MESSAGE);
  } catch {
    // plain text
  }
  return text.slice(0, MAX_MESSAGE);
}

/**
 * The URLs of `workers` that `include` takes, each with the roles registered at it, in member order:
 * one call per URL (the roles of a P/D instance registered twice, and a data-parallel server's ranks,
 * are one process).
 */
export function rolesByUrl(
  workers: readonly Worker[],
  include: (w: Worker) => boolean,
): Map<string, string[]> {
  const byUrl = new Map<string, string[]>();
  for (const w of workers) {
    if (!include(w)) continue;
    const roles = byUrl.get(w.url);
    if (roles === undefined) byUrl.set(w.url, [w.role]);
    else if (!roles.includes(w.role)) roles.push(w.role);
  }
  return byUrl;
}
