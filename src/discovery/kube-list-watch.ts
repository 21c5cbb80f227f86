/**
 * KubeListWatch: keeps an exact view of one collection of Kubernetes objects (the pods matching a label
 * selector: kube-pod-watcher.ts; the InferenceObjectives and InferencePools of a namespace:
 * kube-objectives.ts, kube-inference-pool.ts), through the official client (@kubernetes/client-node):
 * LIST, then WATCH from the list's resourceVersion.
 *
 * Why not the client's own ListWatch informer: after a watch ends without an error it re-watches from the
 * last resourceVersion without listing, and after an error it stops for good (the caller must restart it).
 * A DELETED event lost in that gap is how a dead pod stayed routed for 22 hours in production-stack #1091.
 * This loop therefore RELISTS on every reconnect, whatever ended the watch:
 *   - the server closed it (its `timeoutSeconds`) or the client-side resync timer did (`resyncMs`, default
 *     5 min, +-10% jitter so a fleet of routers does not relist in step): a periodic full resync;
 *   - a `410 Gone` (resourceVersion too old, as an ERROR event in the stream or as the watch's status);
 *   - any other error or a dropped connection.
 * Each LIST replaces the whole view (`handler.synced(items)`): whatever was deleted while no watch was
 * running is absent from it, so the consumer drops it. Lists are paged (`limit` 500, `continue`); an expired
 * continue token (410) restarts the list.
 * A LIST page unanswered for `listTimeoutMs` (120 s, twice the apiserver's own request timeout) is abandoned
 * as a failed list: a dead apiserver host must not stall the loop for good.
 * Failures (a list, a watch that could not start or sent an ERROR other than 410) retry with exponential
 * backoff: 250 ms doubling to 5 s, +-20% jitter, reset once a watch delivered an event (or a bookmark) or
 * lived until the resync. A watch that ends normally relists at once, unless it ended before delivering
 * anything (a proxy or server cutting watches short): then the next relist waits a backoff too.
 *
 * Every timer is unref()ed; close() is idempotent, aborts the watch and stops the loop (a list in flight is
 * aborted).
 */
import { Observable, Watch, type ConfigurationOptions, type KubeConfig } from '@kubernetes/client-node';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED';

export interface ListWatchHandler<T> {
  /** A fresh LIST: the complete current set, replacing everything reported before. */
  synced(items: T[]): void;
  /** A watch event after the last `synced`. */
  event(type: WatchEventType, item: T): void;
  /** A list or watch failed; the next attempt starts in `retryInMs`. */
  failed?(err: unknown, phase: 'list' | 'watch', retryInMs: number): void;
  /** A watch ended; a relist follows. `reason`: 'resync' | 'closed_by_server' | 'gone' | 'error'. */
  watchEnded?(reason: WatchEndReason): void;
}

export type WatchEndReason = 'resync' | 'closed_by_server' | 'gone' | 'error';

/** One page of a LIST. */
export interface ListPage<T> {
  readonly items: T[];
  readonly metadata?: { readonly _continue?: string; readonly resourceVersion?: string };
}

export interface KubeListWatchOptions<T> {
  kubeConfig: KubeConfig;
  /** The collection's path, for the watch (e.g. `/api/v1/namespaces/llm/pods`). */
  path: string;
  /** One page of the LIST of that collection; `options` carries the abort signal (see `abortable`). */
  list(
    page: { limit: number; _continue?: string; labelSelector?: string },
    options: ConfigurationOptions,
  ): Promise<ListPage<T>>;
  /** API `labelSelector` text, e.g. `app=vllm,role=prefill` ('' or absent = every object). */
  labelSelector?: string;
  handler: ListWatchHandler<T>;
  /** Client-side bound of one watch, then a full relist. Default 300_000 ms. */
  resyncMs?: number;
  /** Backoff bounds. Defaults 250 ms and 5000 ms. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** Page size of a LIST. Default 500. */
  pageSize?: number;
  /** A LIST page unanswered this long is abandoned (a failed list). Default 120_000 ms. */
  listTimeoutMs?: number;
}

export const DEFAULT_KUBE_RESYNC_MS = 300_000;
/** Twice the apiserver's own limit on a non-watch request (--request-timeout, 60 s). */
export const DEFAULT_KUBE_LIST_TIMEOUT_MS = 120_000;

/** Request options of the official client (its object-parameter API) that abort the request with `signal`. */
export function abortable(signal: AbortSignal): ConfigurationOptions {
  return {
    middlewareMergeStrategy: 'append',
    middleware: [
      {
        pre: (ctx) => {
          ctx.setSignal(signal);
          return new Observable(Promise.resolve(ctx));
        },
        post: (rsp) => new Observable(Promise.resolve(rsp)),
      },
    ],
  };
}

interface HttpError {
  code?: unknown;
  statusCode?: unknown;
}

function messageOf(status: unknown): string {
  const m = (status as { message?: unknown } | undefined)?.message;
  return typeof m === 'string' && m !== '' ? m : 'watch ERROR event';
}

function statusOf(err: unknown): number | undefined {
  const e = err as HttpError | undefined;
  const code = typeof e?.statusCode === 'number' ? e.statusCode : e?.code;
  return typeof code === 'number' ? code : undefined;
}

export class KubeListWatch<T> {
  private readonly opts: KubeListWatchOptions<T>;
  private readonly watch: Watch;
  private readonly resyncMs: number;
  private readonly maxBackoffMs: number;
  private readonly initialBackoffMs: number;
  private readonly listTimeoutMs: number;
  private backoffMs: number;
  private closed = false;
  private running: Promise<void> | undefined;
  private controller: AbortController | undefined;
  /** Aborts the LIST in flight, on close. */
  private readonly listController = new AbortController();
  /** Resolves the current wait (backoff sleep or watch) early, on close. */
  private wake: (() => void) | undefined;
  private lists = 0;

  constructor(opts: KubeListWatchOptions<T>) {
    this.opts = opts;
    this.watch = new Watch(opts.kubeConfig);
    this.resyncMs = opts.resyncMs ?? DEFAULT_KUBE_RESYNC_MS;
    this.initialBackoffMs = opts.initialBackoffMs ?? 250;
    this.maxBackoffMs = opts.maxBackoffMs ?? 5000;
    this.backoffMs = this.initialBackoffMs;
    this.listTimeoutMs = opts.listTimeoutMs ?? DEFAULT_KUBE_LIST_TIMEOUT_MS;
    if (!(this.resyncMs > 0)) throw new RangeError(`resyncMs must be > 0, got ${this.resyncMs}`);
  }

  /** Completed LISTs so far (the first one plus every relist). */
  get listCount(): number {
    return this.lists;
  }

  /** Starts the loop (idempotent). Returns at once; the first `synced` call reports the initial list. */
  start(): void {
    if (this.running !== undefined || this.closed) return;
    this.running = this.loop();
  }

  /** Idempotent: stops the loop and aborts the watch. */
  async close(): Promise<void> {
    this.closed = true;
    this.listController.abort();
    this.controller?.abort();
    this.controller = undefined;
    this.wake?.();
    await this.running;
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      let list: { items: T[]; resourceVersion: string };
      try {
        list = await this.listAll();
      } catch (err) {
        if (this.closed) return;
        await this.fail(err, 'list');
        continue;
      }
      if (this.closed) return;
      this.lists++;
      this.opts.handler.synced(list.items);
      const ended = await this.watchFrom(list.resourceVersion);
      if (this.closed) return;
      // Only a watch that delivered something (or lived until the resync) ends a failure streak: a LIST
      // that works followed by a watch that is refused or ends at once must not relist in a tight loop.
      if (ended.worked) this.backoffMs = this.initialBackoffMs;
      if (ended.error !== undefined) {
        await this.fail(ended.error, 'watch');
      } else {
        this.opts.handler.watchEnded?.(ended.reason);
        if (!ended.worked && ended.reason === 'closed_by_server') await this.pause();
      }
    }
  }

  private async fail(err: unknown, phase: 'list' | 'watch'): Promise<void> {
    const delay = this.nextDelay();
    this.opts.handler.failed?.(err, phase, delay);
    if (phase === 'watch') this.opts.handler.watchEnded?.(statusOf(err) === 410 ? 'gone' : 'error');
    await this.sleep(delay);
  }

  private nextDelay(): number {
    const delay = Math.round(this.backoffMs * (0.8 + 0.4 * Math.random()));
    this.backoffMs = Math.min(this.maxBackoffMs, this.backoffMs * 2);
    return delay;
  }

  /** A watch the server ended before it delivered anything: wait a backoff, quietly, before relisting. */
  private async pause(): Promise<void> {
    await this.sleep(this.nextDelay());
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      timer.unref();
      this.wake = done;
    });
  }

  private async listAll(): Promise<{ items: T[]; resourceVersion: string }> {
    const items: T[] = [];
    let cont: string | undefined;
    const limit = this.opts.pageSize ?? 500;
    const labelSelector = this.opts.labelSelector || undefined;
    for (;;) {
      let page: ListPage<T>;
      // A page that never answers (a dead apiserver host: no RST, no TCP keepalive) must not stall the loop.
      const pageTimeout = new AbortController();
      const timer = setTimeout(() => pageTimeout.abort(), this.listTimeoutMs);
      timer.unref();
      try {
        page = await this.opts.list(
          { limit, _continue: cont, ...(labelSelector ? { labelSelector } : {}) },
          abortable(AbortSignal.any([this.listController.signal, pageTimeout.signal])),
        );
      } catch (err) {
        if (pageTimeout.signal.aborted && !this.closed) {
          throw new Error(`LIST ${this.opts.path} did not answer within ${this.listTimeoutMs} ms`, {
            cause: err,
          });
        }
        // An expired continue token: start the list over (a consistent snapshot needs one RV).
        if (cont !== undefined && statusOf(err) === 410) {
          items.length = 0;
          cont = undefined;
          continue;
        }
        throw err;
      } finally {
        clearTimeout(timer);
      }
      items.push(...page.items);
      cont = page.metadata?._continue || undefined;
      if (cont === undefined) return { items, resourceVersion: page.metadata?.resourceVersion ?? '' };
      if (this.closed) return { items, resourceVersion: '' };
    }
  }

  /** One watch; resolves when it ends (never rejects). */
  private watchFrom(
    resourceVersion: string,
  ): Promise<{ reason: WatchEndReason; error?: unknown; worked: boolean }> {
    return new Promise((resolve) => {
      let settled = false;
      let reason: WatchEndReason = 'closed_by_server';
      let worked = false;
      const resyncMs = Math.round(this.resyncMs * (0.9 + 0.2 * Math.random()));
      const finish = (error?: unknown): void => {
        if (settled) return;
        settled = true;
        clearTimeout(resync);
        this.wake = undefined;
        this.controller?.abort();
        this.controller = undefined;
        resolve(
          error === undefined || error === null ? { reason, worked } : { reason: 'error', error, worked },
        );
      };
      const resync = setTimeout(() => {
        reason = 'resync';
        worked = true;
        finish();
      }, resyncMs);
      resync.unref();
      this.wake = () => finish();
      this.watch
        .watch(
          this.opts.path,
          {
            resourceVersion,
            labelSelector: this.opts.labelSelector || undefined,
            allowWatchBookmarks: true,
            // The server ends the watch a little after the client-side resync would: a backstop.
            timeoutSeconds: Math.ceil(resyncMs / 1000) + 5,
          },
          (type: string, obj: unknown) => {
            if (settled) return;
            if (type === 'ADDED' || type === 'MODIFIED' || type === 'DELETED') {
              worked = true;
              this.opts.handler.event(type, obj as T);
            } else if (type === 'ERROR') {
              // A Status object. 410 Gone (resourceVersion too old): relist now. Anything else (e.g. 504
              // "Too large resource version" from a lagging watch cache) is a failure: relist after a backoff.
              if (statusOf(obj) === 410) {
                reason = 'gone';
                finish();
              } else {
                finish(Object.assign(new Error(messageOf(obj)), { statusCode: statusOf(obj) }));
              }
            } else {
              // BOOKMARK: only moves the resourceVersion, which this loop never reuses; but the watch works.
              worked = true;
            }
          },
          (err: unknown) => finish(err),
        )
        .then(
          (controller) => {
            if (settled) controller.abort();
            else this.controller = controller;
          },
          (err: unknown) => finish(err),
        );
    });
  }
}
