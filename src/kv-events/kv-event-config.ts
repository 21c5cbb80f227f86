/**
 * The KV-event settings of a Config, parsed once: publisher rules (kv-event-sources.ts), tier credits
 * (`MEDIUM=credit`), tokenizer specs (`MODEL=PATH`) and the vLLM servers' chat flags per model
 * (tokenize/server-chat-flags.ts). Throws a RangeError naming the bad value; config.ts
 * turns it into a ConfigError at start-up.
 */
import { parseTokenizerSpecs } from '../tokenize/request-tokens.js';
import {
  parseServerChatFlags,
  type ServerChatFlagSettings,
  type ServerChatFlagSpecs,
} from '../tokenize/server-chat-flags.js';
import { hasKvEventSources, parseKvEventSources, type KvEventSourceRules } from './kv-event-sources.js';

export interface KvEventSettings extends ServerChatFlagSettings {
  readonly kvEventSource: readonly string[];
  readonly kvEventReplay: readonly string[];
  readonly kvEventPort: number;
  readonly kvEventReplayPort: number;
  readonly kvEventDpSize: number;
  readonly kvEventBlockSize: number;
  readonly kvIndexMaxBlocks: number;
  readonly kvTierCredit: readonly string[];
  readonly tokenizer: readonly string[];
  /** Kubernetes discovery: pods may carry their own KV-events port (annotation or flag). */
  readonly serviceDiscovery: boolean;
}

export interface KvEventSetup {
  readonly rules: KvEventSourceRules;
  /**
   * True when some worker may publish: explicit sources, a default port, or Kubernetes discovery (whose
   * pods carry their own port: `vllm.ai/kv-events-port` or `--service-discovery-kv-events-port`).
   */
  readonly enabled: boolean;
  readonly tierCredit: Readonly<Record<string, number>>;
  readonly tokenizers: ReadonlyMap<string, string>;
  readonly chatFlags: ServerChatFlagSpecs;
}

export function parseKvEventSettings(c: KvEventSettings): KvEventSetup {
  const rules = parseKvEventSources({
    sources: c.kvEventSource,
    replays: c.kvEventReplay,
    defaultPort: c.kvEventPort,
    defaultReplayPort: c.kvEventReplayPort,
    dpSize: c.kvEventDpSize,
  });
  const tierCredit: Record<string, number> = {};
  for (const spec of c.kvTierCredit) {
    const m = /^([A-Za-z0-9_.-]+)=([0-9.]+)$/.exec(spec.trim());
    const credit = m === null ? NaN : Number(m[2]);
    if (m === null || !(credit >= 0 && credit <= 1)) {
      throw new RangeError(`--kv-tier-credit: expected MEDIUM=0..1, got "${spec}"`);
    }
    tierCredit[(m[1] as string).toUpperCase()] = credit;
  }
  if (!Number.isInteger(c.kvEventBlockSize) || c.kvEventBlockSize < 0) {
    throw new RangeError(`--kv-event-block-size must be an integer >= 0, got ${c.kvEventBlockSize}`);
  }
  if (!Number.isInteger(c.kvIndexMaxBlocks) || c.kvIndexMaxBlocks < 1) {
    throw new RangeError(`--kv-index-max-blocks must be a positive integer, got ${c.kvIndexMaxBlocks}`);
  }
  return {
    rules,
    enabled: hasKvEventSources(rules) || c.serviceDiscovery,
    tierCredit,
    tokenizers: parseTokenizerSpecs(c.tokenizer),
    chatFlags: parseServerChatFlags(c),
  };
}
