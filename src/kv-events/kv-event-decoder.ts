/**
 * Decoding of vLLM KV-cache event frames (vllm/distributed/kv_events.py).
 *
 * Wire format: one ZMQ multipart message per EventBatch, `[topic (utf-8), seq (8-byte big-endian
 * unsigned, from 0 per publisher), payload (msgpack EventBatch)]`.
 *
 * Two payload encodings have shipped, both accepted:
 * - array-like (msgspec `array_like=True`; what llm-d's decoder reads): batch `[ts, [events], rank?]`,
 *   event `[tag, field1, field2, ...]` in declaration order, trailing defaults possibly omitted;
 * - tagged maps (current vLLM): batch `{ts, events, data_parallel_rank?}`, event
 *   `{type: tag, field: value, ...}` with default-valued fields omitted.
 * Events: `BlockStored(block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
 * lora_name, extra_keys?, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?)`,
 * `BlockRemoved(block_hashes, medium, group_idx?)`, `AllBlocksCleared()`.
 * vLLM's offloading connector (CPU / storage tiers) publishes a BlockStored without tokens for a block
 * it copied to its tier when it has no payload of its own for it (`token_ids` empty, `block_size` 0,
 * no parent: kv_connector/v1/offloading/events.py `_placeholder_stored`): the block's engine hash, on
 * that medium. It decodes to an `offloaded` event (the blocks the worker already announced are now
 * held on that medium too), not an invalid one.
 *
 * Block hashes are 64-bit ints (`VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1`, the default; older vLLM
 * published Python's signed hash()) or digest bytes. They are normalised to one `EngineHash` value
 * usable as a Map key: a safe integer -> number, a larger int -> bigint, bytes -> a latin1 string
 * (one char per byte; nothing else decodes to a string, so the three never collide).
 *
 * What is skipped (counted per reason, never thrown):
 * - per frame: not 3 parts (`frame_parts`), seq not 8 bytes (`bad_seq`), payload over `maxPayloadBytes`
 *   (`oversized`), undecodable msgpack or over the decoder limits (`not_msgpack`), not a batch
 *   (`bad_batch`), more than `maxEventsPerBatch` events (`too_many_events`);
 * - per event: unknown tag (`unknown_type`, forwards compatible), a KV group that is not the full-
 *   attention prefix cache (`not_prefix`: group_idx other than 0/None, or a sliding-window spec), and
 *   malformed fields (`invalid_event`: e.g. token_ids not exactly hashes x block_size; vLLM only
 *   publishes full blocks). Unknown fields are ignored.
 *
 * Limits: token_ids / block_hashes arrays <= 1,048,576 entries, strings <= 4 KiB, bins <= 256 bytes
 * (a digest is 32), maps <= 64 keys; so a hostile frame cannot make the decoder allocate much more
 * than the frame's own size, and the frame size is capped by the caller (ZMQ maxMessageSize).
 *
 * Pure: no I/O, no logging, no metrics.
 */
import { Decoder } from '@msgpack/msgpack';

export type EngineHash = number | bigint | string;

export interface BlockStoredEvent {
  readonly type: 'stored';
  readonly hashes: readonly EngineHash[];
  readonly parent: EngineHash | undefined;
  /** All tokens of the stored blocks, in order: hashes.length * blockSize entries. */
  readonly tokens: readonly number[];
  readonly blockSize: number;
  /** "GPU" when absent (vLLM's MEDIUM_GPU). */
  readonly medium: string;
  readonly loraName: string | undefined;
  /**
   * Per-block extra keys other than the LoRA name (multimodal ids, cache salt, prompt-embedding
   * hashes) as canonical JSON, '' when none; undefined when the event carried none at all.
   */
  readonly extraKeys: readonly string[] | undefined;
}

/** Blocks the worker already announced (by engine hash), now also held on `medium` (see the header). */
export interface BlocksOffloadedEvent {
  readonly type: 'offloaded';
  readonly hashes: readonly EngineHash[];
  readonly medium: string;
}

export interface BlockRemovedEvent {
  readonly type: 'removed';
  readonly hashes: readonly EngineHash[];
  readonly medium: string;
}

export interface AllBlocksClearedEvent {
  readonly type: 'cleared';
}

export type KvEvent = BlockStoredEvent | BlocksOffloadedEvent | BlockRemovedEvent | AllBlocksClearedEvent;

export type FrameRejectReason =
  'frame_parts' | 'bad_seq' | 'oversized' | 'not_msgpack' | 'bad_batch' | 'too_many_events';
export type EventSkipReason = 'unknown_type' | 'not_prefix' | 'invalid_event';

export interface KvEventBatch {
  readonly ts: number;
  readonly rank: number | undefined;
  readonly events: KvEvent[];
  /** Events in the payload, including skipped ones. */
  readonly received: number;
  readonly skipped: Partial<Record<EventSkipReason, number>>;
}

export type DecodedFrame =
  | { readonly ok: true; readonly topic: string; readonly seq: number; readonly batch: KvEventBatch }
  | { readonly ok: false; readonly reason: FrameRejectReason; readonly seq?: number };

export interface DecoderLimits {
  /** Default 16 MiB. */
  maxPayloadBytes: number;
  /** Default 65,536. */
  maxEventsPerBatch: number;
}

export const DEFAULT_DECODER_LIMITS: Readonly<DecoderLimits> = Object.freeze({
  maxPayloadBytes: 16 * 1024 * 1024,
  maxEventsPerBatch: 65_536,
});

const msgpack = new Decoder({
  useBigInt64: true,
  maxStrLength: 4096,
  maxBinLength: 256,
  maxArrayLength: 1 << 20,
  maxMapLength: 64,
  maxExtLength: 0,
});

const MEDIUM_GPU = 'GPU';

/** Reads the 8-byte big-endian sequence frame; undefined unless exactly 8 bytes. */
export function readSeq(frame: Uint8Array): number | undefined {
  if (frame.length !== 8) return undefined;
  const view = new DataView(frame.buffer, frame.byteOffset, 8);
  return Number(view.getBigUint64(0, false));
}

export function encodeSeq(seq: number): Buffer {
  const out = Buffer.alloc(8);
  out.writeBigInt64BE(BigInt(seq));
  return out;
}

export function decodeFrame(
  parts: readonly Uint8Array[],
  limits: Readonly<DecoderLimits> = DEFAULT_DECODER_LIMITS,
): DecodedFrame {
  if (parts.length !== 3) return { ok: false, reason: 'frame_parts' };
  const seq = readSeq(parts[1] as Uint8Array);
  if (seq === undefined) return { ok: false, reason: 'bad_seq' };
  const result = decodePayload(parts[2] as Uint8Array, limits);
  if (!('events' in result)) return { ok: false, reason: result.reason, seq };
  return { ok: true, topic: Buffer.from(parts[0] as Uint8Array).toString('utf8'), seq, batch: result };
}

/** Decodes one msgpack EventBatch payload (also what the replay socket returns). */
export function decodePayload(
  payload: Uint8Array,
  limits: Readonly<DecoderLimits> = DEFAULT_DECODER_LIMITS,
): KvEventBatch | { reason: FrameRejectReason } {
  if (payload.length > limits.maxPayloadBytes) return { reason: 'oversized' };
  let value: unknown;
  try {
    value = msgpack.decode(payload);
  } catch {
    return { reason: 'not_msgpack' };
  }
  let ts: unknown;
  let rawEvents: unknown;
  let rank: unknown;
  if (Array.isArray(value)) {
    [ts, rawEvents, rank] = value as unknown[];
  } else if (isMap(value)) {
    ts = value.ts;
    rawEvents = value.events;
    rank = value.data_parallel_rank;
  } else {
    return { reason: 'bad_batch' };
  }
  if (typeof ts !== 'number' || !Array.isArray(rawEvents)) return { reason: 'bad_batch' };
  if (rawEvents.length > limits.maxEventsPerBatch) return { reason: 'too_many_events' };
  const events: KvEvent[] = [];
  const skipped: Partial<Record<EventSkipReason, number>> = {};
  for (const raw of rawEvents) {
    let event: KvEvent | EventSkipReason;
    try {
      event = decodeEvent(raw);
    } catch {
      // e.g. extra_keys nested deeper than JSON.stringify's recursion allows: never let a frame throw.
      event = 'invalid_event';
    }
    if (typeof event === 'string') skipped[event] = (skipped[event] ?? 0) + 1;
    else events.push(event);
  }
  return {
    ts,
    rank: typeof rank === 'number' && Number.isInteger(rank) ? rank : undefined,
    events,
    received: rawEvents.length,
    skipped,
  };
}

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

const STORED_FIELDS = [
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
  'kv_cache_spec_kind',
  'kv_cache_spec_sliding_window',
] as const;
const REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx'] as const;

/** An event as a field map, whichever encoding it came in. */
function fieldsOf(raw: unknown, names: readonly string[]): Record<string, unknown> {
  if (!Array.isArray(raw)) return raw as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (let i = 0; i < names.length && i + 1 < raw.length; i++) out[names[i] as string] = raw[i + 1];
  return out;
}

function decodeEvent(raw: unknown): KvEvent | EventSkipReason {
  let tag: unknown;
  if (Array.isArray(raw)) tag = raw[0];
  else if (isMap(raw)) tag = raw.type;
  else return 'invalid_event';
  switch (tag) {
    case 'BlockStored':
      return decodeStored(fieldsOf(raw, STORED_FIELDS));
    case 'BlockRemoved':
      return decodeRemoved(fieldsOf(raw, REMOVED_FIELDS));
    case 'AllBlocksCleared':
      return { type: 'cleared' };
    default:
      return typeof tag === 'string' ? 'unknown_type' : 'invalid_event';
  }
}

function notPrefixGroup(f: Record<string, unknown>): boolean {
  const g = f.group_idx;
  if (g !== undefined && g !== null && g !== 0) return true;
  const window = f.kv_cache_spec_sliding_window;
  if (window !== undefined && window !== null) return true;
  const kind = f.kv_cache_spec_kind;
  return typeof kind === 'string' && /sliding|chunked|mamba/i.test(kind);
}

function decodeStored(f: Record<string, unknown>): BlockStoredEvent | BlocksOffloadedEvent | EventSkipReason {
  if (notPrefixGroup(f)) return 'not_prefix';
  const hashes = hashList(f.block_hashes);
  const blockSize = f.block_size;
  const tokens = f.token_ids;
  if (hashes === undefined || hashes.length === 0) return 'invalid_event';
  if (Array.isArray(tokens) && tokens.length === 0 && (blockSize === 0 || blockSize === undefined)) {
    // The offloading connector's tier copy of blocks it has no payload for (see the header).
    const parent = f.parent_block_hash;
    const medium = mediumOf(f.medium);
    if ((parent !== undefined && parent !== null) || medium === undefined) return 'invalid_event';
    return { type: 'offloaded', hashes, medium };
  }
  if (typeof blockSize !== 'number' || !Number.isInteger(blockSize) || blockSize < 1) return 'invalid_event';
  if (!Array.isArray(tokens) || tokens.length !== hashes.length * blockSize) return 'invalid_event';
  for (let i = 0; i < tokens.length; i++) {
    const t: unknown = tokens[i];
    // Token ids are msgpack ints: non-negative integers below 2^32 (the `>>> 0` check).
    if (typeof t !== 'number' || t >>> 0 !== t) return 'invalid_event';
  }
  let parent: EngineHash | undefined;
  if (f.parent_block_hash !== undefined && f.parent_block_hash !== null) {
    parent = engineHash(f.parent_block_hash);
    if (parent === undefined) return 'invalid_event';
  }
  const medium = mediumOf(f.medium);
  if (medium === undefined) return 'invalid_event';
  const lora = f.lora_name;
  if (lora !== undefined && lora !== null && typeof lora !== 'string') return 'invalid_event';
  const loraName = typeof lora === 'string' && lora.length > 0 ? lora : undefined;
  let extraKeys: string[] | undefined;
  if (Array.isArray(f.extra_keys)) {
    if (f.extra_keys.length !== hashes.length) return 'invalid_event';
    extraKeys = f.extra_keys.map((k) => extraKeyText(k, loraName));
  }
  return {
    type: 'stored',
    hashes,
    parent,
    tokens: tokens as number[],
    blockSize,
    medium,
    loraName,
    extraKeys,
  };
}

function decodeRemoved(f: Record<string, unknown>): BlockRemovedEvent | EventSkipReason {
  if (notPrefixGroup(f)) return 'not_prefix';
  const hashes = hashList(f.block_hashes);
  const medium = mediumOf(f.medium);
  if (hashes === undefined || medium === undefined) return 'invalid_event';
  return { type: 'removed', hashes, medium };
}

function mediumOf(v: unknown): string | undefined {
  if (v === undefined || v === null) return MEDIUM_GPU;
  return typeof v === 'string' ? v.toUpperCase() : undefined;
}

function hashList(v: unknown): EngineHash[] | undefined {
  if (!Array.isArray(v)) return undefined;
  const out = new Array<EngineHash>(v.length);
  for (let i = 0; i < v.length; i++) {
    const h = engineHash(v[i]);
    if (h === undefined) return undefined;
    out[i] = h;
  }
  return out;
}

const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/** Normalises one engine block hash (see the header comment); undefined when it is not a hash. */
export function engineHash(v: unknown): EngineHash | undefined {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? v : undefined;
  if (typeof v === 'bigint') return v >= MIN_SAFE && v <= MAX_SAFE ? Number(v) : v;
  if (v instanceof Uint8Array) {
    return v.length > 0 ? Buffer.from(v.buffer, v.byteOffset, v.length).toString('latin1') : undefined;
  }
  return undefined;
}

/**
 * One block's extra keys without the LoRA name (the router seeds its keys with the LoRA name
 * already), as canonical JSON; '' when nothing else is left.
 */
function extraKeyText(k: unknown, loraName: string | undefined): string {
  if (k === null || k === undefined) return '';
  const items = Array.isArray(k) ? k : [k];
  const rest = items.filter((item) => !(loraName !== undefined && item === loraName));
  if (rest.length === 0) return '';
  return JSON.stringify(rest, (_key, value: unknown) => {
    if (typeof value === 'bigint') return value.toString();
    if (value instanceof Uint8Array) return Buffer.from(value).toString('hex');
    return value;
  });
}
