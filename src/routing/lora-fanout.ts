/**
 * Runtime LoRA adapters for the whole fleet: `POST /v1/load_lora_adapter` and
 * `POST /v1/unload_lora_adapter` sent through Envoy are answered by the router, which sends the same
 * body to every selectable worker of every pool (vLLM started with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`).
 *
 * Why: passed on like any request, a load reached ONE worker. The router then sent the adapter's
 * requests to that worker and to its base model's siblings (served-models.ts: the siblings of a base
 * model are taken as interchangeable, as the endpoint picker does), which answered 404; and in P/D mode
 * the load reached one decode worker, never a prefill worker, so every prefill leg of the adapter
 * failed. Loading it everywhere makes the fleet serve it as one.
 *
 * Each worker gets the client's body and its `authorization` (or `--worker-api-key`), concurrently,
 * once per URL (a P/D instance registered as both roles is one process). Answer:
 *   - 200 when every worker took it. A load that a worker already has (vLLM's 400 "has already been
 *     loaded") and an unload of one it does not have (404) count as taken: the call is idempotent.
 *   - a 4xx (the first worker's message) when no worker took it and every refusal was a 4xx, as the
 *     client's error: the workers' status when they all gave the same one (vLLM's 400 for a bad body,
 *     its 404 for a `lora_path` with no adapter), else 400.
 *   - 502 otherwise (some took it, some failed or could not be reached): the message names the failed
 *     workers; the adapter stays where it was loaded, and a retry loads the rest.
 *   - 503 when there is no selectable worker.
 * Every answer lists each worker's status and message (`workers`), and the members left out because
 * they were not selectable (unhealthy, asleep, cordoned: `skipped`).
 * Then the answered workers' model lists are read again at once, so routing sees the change.
 *
 * Workers that join later: the router remembers each adapter some worker took (its load body, by
 * `lora_name`; an unload forgets it; at most MAX_REMEMBERED bodies of up to 64 KiB) and, when a
 * member appears (`sync`, on every registry change: a new URL, or a restarted process at a known
 * one, which lost its adapters), loads every remembered adapter on it, with `--worker-api-key` (a
 * client's credentials are not kept). Each replica remembers the loads it answered; a restarted
 * router remembers none. A member a load or an unload skipped (not selectable then) is the same process
 * when it is back in selection: it is sent the unloads it missed (it still holds those adapters: an
 * adapter swapped for a new version under its name would stay the old one there, vLLM refusing the new
 * load as "already been loaded"), then every remembered load. A member that was down (failed health
 * checks, an open circuit breaker) may be a new process when it is back (`recovered`: a static worker
 * keeps its registration across a restart): it is sent every remembered load.
 */
import { Agent } from 'undici';
import type { LocalAnswer } from '../extproc/dispatch.js';
import type { Worker } from '../workers/worker.js';
import { callWorker, rolesByUrl } from './worker-call.js';

export const LORA_PATHS: ReadonlySet<string> = new Set(['/v1/load_lora_adapter', '/v1/unload_lora_adapter']);

export interface LoraFanoutOptions {
  /** Every pool member (all roles). */
  readonly members: () => readonly Worker[];
  /** `--worker-api-key`: sent instead of the client's authorization when set. */
  readonly apiKey?: string;
  /** Timeout of one worker's answer, ms. */
  readonly timeoutMs: number;
  /** The workers that answered (their model lists should be read again). */
  readonly onAnswered?: (urls: readonly string[]) => void;
  /** A remembered adapter was loaded on a worker that joined (`ok`: it took it). */
  readonly onReplayed?: (url: string, loraName: string, ok: boolean, message: string) => void;
}

/** The most adapters remembered for workers that join (the oldest is forgotten first). */
export const MAX_REMEMBERED = 1024;

/** A load body larger than this is not remembered (vLLM's is a name and a path). */
const MAX_REMEMBERED_BODY = 64 * 1024;

const NO_UNLOADS: ReadonlyMap<string, Buffer> = new Map();

interface WorkerResult {
  readonly url: string;
  readonly roles: string[];
  /** 0 when the worker could not be reached. */
  readonly status: number;
  readonly message: string;
  readonly ok: boolean;
}

export class LoraFanout {
  private readonly agent = new Agent({ keepAliveTimeout: 4_000 });
  private closed = false;
  /** lora_name -> the load body some worker took. */
  private readonly remembered = new Map<string, Buffer>();
  /** `url generation` of the members seen by sync(). */
  private readonly known = new Set<string>();
  /**
   * URLs a load or unload skipped (not selectable then), with the unload bodies they missed by
   * `lora_name`: sent those, then the remembered loads, once selectable again.
   */
  private readonly owed = new Map<string, Map<string, Buffer>>();
  private synced = false;
  /** URLs a replay runs for now. */
  private readonly replaying = new Set<string>();

  constructor(private readonly opts: LoraFanoutOptions) {}

  /**
   * The answer to a runtime LoRA request, or undefined for any other request (and for one without a
   * body: the worker says what it lacks).
   */
  answer(
    method: string,
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Buffer | undefined,
  ): Promise<LocalAnswer> | undefined {
    if (method !== 'POST' || body === undefined) return undefined;
    const q = path.indexOf('?');
    const p = q === -1 ? path : path.slice(0, q);
    if (!LORA_PATHS.has(p)) return undefined;
    return this.fanOut(p, headers, body);
  }

  /**
   * Called on every membership change: loads every remembered adapter on the members that appeared
   * since the last call (the first call only records the members: nothing is remembered yet).
   */
  sync(): void {
    if (this.closed) return;
    const current = new Set<string>();
    const joined = new Map<string, ReadonlyMap<string, Buffer>>();
    for (const w of this.opts.members()) {
      const key = `${w.url} ${w.generation}`;
      current.add(key);
      if (!this.known.has(key) && this.synced) joined.set(w.url, NO_UNLOADS);
    }
    this.known.clear();
    for (const k of current) this.known.add(k);
    this.synced = true;
    // A member a load or unload skipped (cordoned, asleep, unhealthy) is the same process once
    // selectable again: it gets the unloads it missed, then the adapters.
    for (const [url, unloads] of this.owed) {
      const at = this.opts.members().filter((w) => w.url === url);
      if (at.length === 0) this.owed.delete(url);
      else if (at.some((w) => w.healthy)) {
        this.owed.delete(url);
        joined.set(url, unloads);
      }
    }
    for (const [url, unloads] of joined) {
      if (this.remembered.size > 0 || unloads.size > 0) void this.replay(url, unloads);
    }
  }

  /**
   * A member that was down (its health checks failed, or its circuit breaker opened) is selectable
   * again. It may be a new process at the same URL and registration (a static worker restarted:
   * a crash, an OOM kill), which lost the adapters loaded at run time: it is sent every remembered
   * load (a process that kept them answers "already been loaded", which counts as taken).
   */
  recovered(url: string): void {
    // One replay per process: the ranks of a data-parallel server, or its two roles, come back together.
    if (this.closed || this.remembered.size === 0 || this.replaying.has(url)) return;
    if (!this.owed.has(url)) this.owed.set(url, new Map());
    this.sync();
  }

  /** The names of the adapters a joining worker gets. */
  get rememberedAdapters(): string[] {
    return [...this.remembered.keys()];
  }

  private async replay(url: string, unloads: ReadonlyMap<string, Buffer>): Promise<void> {
    this.replaying.add(url);
    try {
      await this.replayOn(url, unloads);
    } finally {
      this.replaying.delete(url);
    }
  }

  private async replayOn(url: string, unloads: ReadonlyMap<string, Buffer>): Promise<void> {
    const auth = this.opts.apiKey ? `Bearer ${this.opts.apiKey}` : undefined;
    // The unloads it missed first (one it never had answers 404: already gone).
    for (const body of unloads.values()) {
      if (this.closed) return;
      await this.send(url, [], '/v1/unload_lora_adapter', body, auth, false);
    }
    // Read the remembered adapters afresh after each load: one unloaded meanwhile is not sent, one
    // loaded meanwhile (the worker may have been skipped, not selectable yet) is.
    const sent = new Map<string, Buffer>();
    for (;;) {
      if (this.closed) return;
      const next = [...this.remembered].find(([name, body]) => sent.get(name) !== body);
      if (next === undefined) break;
      const [name, body] = next;
      sent.set(name, body);
      const r = await this.send(url, [], '/v1/load_lora_adapter', body, auth, true);
      this.opts.onReplayed?.(url, name, r.ok, r.message);
    }
    this.opts.onAnswered?.([url]);
  }

  /** Remembers a load some worker took, or forgets an unloaded adapter. Returns the adapter's name. */
  private remember(load: boolean, body: Buffer): string | undefined {
    let name: unknown;
    try {
      name = (JSON.parse(body.toString('utf8')) as { lora_name?: unknown }).lora_name;
    } catch {
      return undefined;
    }
    if (typeof name !== 'string' || name === '') return undefined;
    this.remembered.delete(name);
    if (!load || body.length > MAX_REMEMBERED_BODY) return name;
    this.remembered.set(name, body);
    if (this.remembered.size > MAX_REMEMBERED) this.remembered.delete(this.remembered.keys().next().value!);
    return name;
  }

  /** A skipped member owes the remembered loads, and `unload` (name and body) when one skipped it. */
  private owe(url: string, unload: [string, Buffer] | undefined): void {
    let unloads = this.owed.get(url);
    if (unloads === undefined) this.owed.set(url, (unloads = new Map()));
    if (unload === undefined || unload[1].length > MAX_REMEMBERED_BODY) return;
    unloads.delete(unload[0]);
    unloads.set(unload[0], unload[1]);
    if (unloads.size > MAX_REMEMBERED) unloads.delete(unloads.keys().next().value!);
  }

  /** Aborts the calls in flight (their workers count as unreachable) and closes the connections. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.agent.destroy();
  }

  private async fanOut(
    path: string,
    headers: Readonly<Record<string, string>>,
    body: Buffer,
  ): Promise<LocalAnswer> {
    const load = path === '/v1/load_lora_adapter';
    const skipped: Array<{ url: string; role: string; reason: string }> = [];
    for (const w of this.opts.members()) {
      if (w.healthy || skipped.some((x) => x.url === w.url && x.role === w.role)) continue;
      skipped.push({
        url: w.url,
        role: w.role,
        reason: w.asleep ? 'asleep' : w.cordoned ? 'cordoned' : 'unhealthy',
      });
    }
    const byUrl = rolesByUrl(this.opts.members(), (w) => w.healthy);
    const details = load ? 'lora_load' : 'lora_unload';
    if (byUrl.size === 0 || this.closed) {
      return {
        status: 503,
        body: {
          error: {
            message: 'No workers available to load the adapter on',
            type: 'service_unavailable',
            code: 503,
          },
          skipped,
        },
        details,
      };
    }
    const auth = this.opts.apiKey ? `Bearer ${this.opts.apiKey}` : headers.authorization;
    const results = await Promise.all(
      [...byUrl].map(([url, roles]) => this.send(url, roles, path, body, auth, load)),
    );
    this.opts.onAnswered?.(results.filter((r) => r.status !== 0).map((r) => r.url));
    const failed = results.filter((r) => !r.ok);
    if (failed.length < results.length) {
      const name = this.remember(load, body);
      const unload: [string, Buffer] | undefined = !load && name !== undefined ? [name, body] : undefined;
      for (const x of skipped) if (!byUrl.has(x.url)) this.owe(x.url, unload);
    }
    const summary = { workers: results, ...(skipped.length > 0 ? { skipped } : {}) };
    if (failed.length === 0) {
      return {
        status: 200,
        body: { object: load ? 'lora_adapter.load' : 'lora_adapter.unload', ...summary },
        details,
      };
    }
    const clientError =
      failed.length === results.length && failed.every((r) => r.status >= 400 && r.status < 500);
    // One 4xx from every worker is that status (vLLM's 404 for a lora_path it finds no adapter at).
    const status = clientError
      ? failed.every((r) => r.status === failed[0]!.status)
        ? failed[0]!.status
        : 400
      : 502;
    const message = clientError
      ? failed[0]!.message
      : `${load ? 'loaded on' : 'unloaded from'} ${results.length - failed.length} of ${results.length} workers; ` +
        `failed: ${failed.map((r) => `${r.url} (${r.status === 0 ? r.message : `status ${r.status}`})`).join(', ')}`;
    return {
      status,
      body: {
        error: { message, type: clientError ? 'invalid_request_error' : 'server_error', code: status },
        ...summary,
      },
      details,
    };
  }

  private async send(
    url: string,
    roles: string[],
    path: string,
    body: Buffer,
    auth: string | undefined,
    load: boolean,
  ): Promise<WorkerResult> {
    const call = {
      url,
      method: 'POST',
      path,
      body,
      authorization: auth,
      timeoutMs: this.opts.timeoutMs,
    } as const;
    const { status, message } = await callWorker(this.agent, call);
    // Idempotent: an adapter already there (load) or already gone (unload) is where it should be.
    const already = load
      ? status === 400 && /already been loaded/i.test(message)
      : status === 404 && /cannot be found|not found/i.test(message);
    return { url, roles, status, message, ok: (status >= 200 && status < 300) || already };
  }
}
