/**
 * Composition of exact prefix routing for the router: KV-event subscriptions (when any worker may
 * publish), request tokenizers (`--tokenizer`), the exact PrefixSource and its metrics.
 *
 * Built by the wiring step without I/O; `start()` (a lifecycle step) loads the tokenizer files (a bad
 * one fails start-up) and subscribes to the current workers; `sync()` follows every registry change
 * (a new worker, a new generation, a departure); `close()` is idempotent.
 */
import type { Registry } from 'prom-client';
import type { Logger } from 'pino';
import { createKvEventMetrics } from '../observability/kv-event-metrics.js';
import { DEPARTED_SERIES_MS } from '../observability/metrics.js';
import { RequestTokenizer } from '../tokenize/request-tokens.js';
import type { Worker } from '../workers/worker.js';
import { parseKvEventSettings, type KvEventSettings } from './kv-event-config.js';
import { KvEventSubscriptions } from './kv-event-subscriptions.js';
import { KvPrefixSource } from './kv-prefix-source.js';

export interface ExactPrefix {
  /** Undefined when no worker can publish (no --kv-event-source / --kv-event-port). */
  readonly source: KvPrefixSource | undefined;
  readonly subscriptions: KvEventSubscriptions | undefined;
  fallback(reason: string): void;
  start(): void;
  /** Reconciles subscriptions with the current workers (no-op before start). */
  sync(): void;
  close(): Promise<void>;
}

export function createExactPrefix(
  config: KvEventSettings & {
    readonly kvEventTopic: string;
    readonly kvPendingTtlMs: number;
    readonly tokenizerCacheChars: number;
  },
  registry: Registry,
  workers: () => Iterable<Worker>,
  logger: Logger,
  clock: () => number = Date.now,
  /** A worker's block size from its scraped `vllm:cache_config_info`, when known. */
  scrapedBlockSize?: (worker: Worker) => number | undefined,
): ExactPrefix {
  const setup = parseKvEventSettings(config);
  const tokenizer = new RequestTokenizer();
  let subscriptions: KvEventSubscriptions | undefined;
  let source: KvPrefixSource | undefined;
  let started = false;
  const metrics = createKvEventMetrics(registry, () => subscriptions?.sizes() ?? new Map());
  if (setup.enabled) {
    subscriptions = new KvEventSubscriptions({
      rules: setup.rules,
      ...(config.kvEventTopic !== '' ? { topic: config.kvEventTopic } : {}),
      index: { maxBlocksPerWorker: config.kvIndexMaxBlocks, tierCredit: setup.tierCredit },
      // Stored blocks are no longer pending on their worker (kv-prefix-source.ts confirmStored).
      hooks: {
        ...metrics.hooks,
        stored: (worker, keys, indexKey) => source?.confirmStored(worker, keys, indexKey),
      },
      workers,
      clock,
    });
    source = new KvPrefixSource({
      subscriptions,
      tokenizer,
      blockSize: config.kvEventBlockSize,
      pendingTtlMs: config.kvPendingTtlMs,
      now: clock,
      ...(scrapedBlockSize !== undefined ? { scrapedBlockSize } : {}),
      // cache_aware's fallbacks (kv_aware counts its own through `fallback` below).
      onFallback: (reason) => metrics.fallback(reason),
    });
  }
  return {
    source,
    subscriptions,
    fallback: (reason) => metrics.fallback(reason),
    start: () => {
      tokenizer
        .loadSpecs(setup.tokenizers, { maxCachedChars: config.tokenizerCacheChars })
        .loadChatFlags(setup.chatFlags);
      started = true;
      subscriptions?.start();
      if (subscriptions !== undefined) {
        logger.info(
          {
            explicit: setup.rules.explicit.size,
            defaultPort: setup.rules.defaultPort,
            tokenizers: tokenizer.size,
          },
          'kv events: exact prefix routing enabled',
        );
      }
    },
    sync: () => {
      if (!started || subscriptions === undefined) return;
      subscriptions.sync(workers());
      // A worker that left takes its KV-event series with it (a restart keeps its key: kept).
      metrics.retain(new Set(subscriptions.sizes().keys()), clock(), DEPARTED_SERIES_MS);
    },
    close: async () => {
      await subscriptions?.close();
    },
  };
}
