/**
 * Decoding and validation of one vLLM self-registration (heartbeat) frame.
 *
 * Wire format (vLLM P2P NCCL connector, `p2p_nccl_engine.py` `ping()`; every 3 s): one MessagePack map
 *   {"type": "P" | "D", "http_address": "host:port", "zmq_address": "host:port"}
 * MoRI-IO adds `transfer_mode: "READ" | "WRITE"`, and its `zmq_address` is a comma-separated list of
 * `key:value` pairs such as `host:1.2.3.4,handshake:6301,notify:61005`; newer versions add tensor /
 * data parallel sizes under names we do not rely on. Every extra field whose value is a scalar
 * (string, number, boolean, null) is kept in `metadata`; nested values are ignored.
 *
 * Validation, in order (the first failure is the reason):
 * - `oversized`: frame longer than `maxBytes` (checked before decoding);
 * - `not_msgpack`: empty, truncated, trailing bytes, invalid MessagePack, or a value beyond the decoder
 *   limits below;
 * - `not_a_map`: valid MessagePack that is not a map;
 * - `missing_field`: `type`, `http_address` or `zmq_address` absent;
 * - `unknown_type`: `type` is not exactly "P" (prefill) or "D" (decode);
 * - `bad_address`: `http_address` is not `host:port` (host = dotted IPv4, bracketed IPv6, or a DNS
 *   name; port 1-65535, decimal) or `zmq_address` is neither `host:port` nor the MoRI key:value list;
 *   an unbracketed IPv6 (`::1:8000`) is ambiguous and rejected;
 * - `bad_transfer_mode`: `transfer_mode` present but not "READ"/"WRITE" (case-insensitive; stored
 *   upper-case).
 *
 * Decoder limits (so a hostile frame cannot make the decoder allocate much beyond its own size):
 * strings/binaries <= 512 bytes (addresses are far shorter), maps <= 32 entries, arrays <= 64,
 * extension payloads <= 16 bytes. `__proto__` keys are refused by @msgpack/msgpack itself.
 *
 * Pure: no I/O, no logging. DNS names are returned as such (lower-cased); the caller resolves them.
 */
import { decode } from '@msgpack/msgpack';
import { isIPv4, isIPv6 } from 'node:net';

export type RejectReason =
  | 'oversized'
  | 'not_msgpack'
  | 'not_a_map'
  | 'unknown_type'
  | 'missing_field'
  | 'bad_address'
  | 'bad_transfer_mode';

export type HostKind = 'ipv4' | 'ipv6' | 'dns';

/** A validated `host:port`. `host` has no brackets; `authority` is `host:port` with IPv6 bracketed. */
export interface HostPort {
  host: string;
  port: number;
  kind: HostKind;
  authority: string;
}

export type TransferMode = 'READ' | 'WRITE';

export interface DecodedHeartbeat {
  ok: true;
  role: 'prefill' | 'decode';
  /** Canonical `host:port` (IPv6 bracketed, DNS names lower-cased). */
  httpAddress: string;
  /** The parsed http address. */
  http: HostPort;
  /** The announced KV / ZMQ address, as sent. */
  zmqAddress: string;
  /** Extra scalar fields, including a normalised `transfer_mode` when present. */
  metadata: Record<string, unknown>;
}

export type DecodeResult = DecodedHeartbeat | { ok: false; reason: RejectReason };

/** Default upper bound of one frame; also used as the socket's `maxMessageSize`. */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024;

const DECODER_LIMITS = {
  maxStrLength: 512,
  maxBinLength: 512,
  maxArrayLength: 64,
  maxMapLength: 32,
  maxExtLength: 16,
} as const;

const WIRE_FIELDS = new Set(['type', 'http_address', 'zmq_address']);

const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const PORT = /^[0-9]{1,5}$/;
const ZMQ_KEY = /^[A-Za-z_][A-Za-z0-9_-]{0,31}$/;
const ZMQ_VALUE = /^[A-Za-z0-9._:[\]%-]{1,255}$/;

function fail(reason: RejectReason): { ok: false; reason: RejectReason } {
  return { ok: false, reason };
}

function isDnsName(name: string): boolean {
  if (name.length === 0 || name.length > 253) return false;
  const labels = (name.endsWith('.') ? name.slice(0, -1) : name).split('.');
  if (!labels.every((label) => DNS_LABEL.test(label))) return false;
  // WHATWG URL's "ends in a number" rule: a last label of decimal digits or `0x` + hex digits (even
  // just `0x`) makes the whole host an IPv4 address (`0x0` = 0.0.0.0, `1.0x1` = 1.0.0.1) or an invalid
  // URL (`a.0x1`), so `http://<name>:<port>` would not name this host. Found by a property test.
  return !/^(?:[0-9]+|0x[0-9a-f]*)$/.test(labels[labels.length - 1] ?? '');
}

/**
 * Parses `host:port` with host = dotted IPv4, `[IPv6]` or a DNS name. Returns undefined when invalid.
 * Exported for static configuration sources.
 */
export function parseHostPort(text: string): HostPort | undefined {
  if (text.length === 0 || text.length > 300) return undefined;
  let hostText: string;
  let portText: string;
  if (text.startsWith('[')) {
    const close = text.indexOf(']');
    if (close < 0 || text[close + 1] !== ':') return undefined;
    hostText = text.slice(1, close);
    portText = text.slice(close + 2);
  } else {
    const colon = text.lastIndexOf(':');
    if (colon <= 0) return undefined;
    hostText = text.slice(0, colon);
    portText = text.slice(colon + 1);
    if (hostText.includes(':')) return undefined; // unbracketed IPv6 is ambiguous
  }
  if (!PORT.test(portText)) return undefined;
  const port = Number(portText);
  if (port < 1 || port > 65535) return undefined;

  if (text.startsWith('[')) {
    if (hostText.includes('%') || !isIPv6(hostText)) return undefined;
    // Canonical form (lower case, zero compression) so one address always gives one registry key.
    const host = new URL(`http://[${hostText}]/`).hostname.slice(1, -1);
    return { host, port, kind: 'ipv6', authority: `[${host}]:${port}` };
  }
  if (isIPv4(hostText)) return { host: hostText, port, kind: 'ipv4', authority: `${hostText}:${port}` };
  const name = hostText.toLowerCase();
  if (!isDnsName(name)) return undefined;
  return { host: name, port, kind: 'dns', authority: `${name}:${port}` };
}

/** A `zmq_address`: `host:port`, or MoRI-IO's comma-separated key:value list. */
export function isValidZmqAddress(text: string): boolean {
  if (text.length === 0 || text.length > 512) return false;
  if (!text.includes(',')) return parseHostPort(text) !== undefined;
  const parts = text.split(',');
  if (parts.length > 16) return false;
  return parts.every((part) => {
    const colon = part.indexOf(':');
    return colon > 0 && ZMQ_KEY.test(part.slice(0, colon)) && ZMQ_VALUE.test(part.slice(colon + 1));
  });
}

function isScalar(value: unknown): boolean {
  return (
    value === null ||
    typeof value === 'string' ||
    typeof value === 'boolean' ||
    (typeof value === 'number' && Number.isFinite(value))
  );
}

/** Decodes and validates one heartbeat frame. Never throws. */
export function decodeHeartbeat(frame: Uint8Array, maxBytes: number = DEFAULT_MAX_FRAME_BYTES): DecodeResult {
  if (frame.byteLength > maxBytes) return fail('oversized');
  let value: unknown;
  try {
    value = decode(frame, DECODER_LIMITS);
  } catch {
    return fail('not_msgpack');
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value) || value instanceof Uint8Array) {
    return fail('not_a_map');
  }
  const map = value as Record<string, unknown>;
  const type = map['type'];
  const httpAddress = map['http_address'];
  const zmqAddress = map['zmq_address'];
  if (type === undefined || httpAddress === undefined || zmqAddress === undefined)
    return fail('missing_field');
  if (type !== 'P' && type !== 'D') return fail('unknown_type');
  if (typeof httpAddress !== 'string' || typeof zmqAddress !== 'string') return fail('bad_address');
  const http = parseHostPort(httpAddress);
  if (http === undefined || !isValidZmqAddress(zmqAddress)) return fail('bad_address');

  const metadata: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(map)) {
    if (WIRE_FIELDS.has(key) || !isScalar(field)) continue;
    metadata[key] = field;
  }
  if (map['transfer_mode'] !== undefined) {
    const mode = map['transfer_mode'];
    const upper = typeof mode === 'string' ? mode.toUpperCase() : undefined;
    if (upper !== 'READ' && upper !== 'WRITE') return fail('bad_transfer_mode');
    metadata['transfer_mode'] = upper satisfies TransferMode;
  }
  return {
    ok: true,
    role: type === 'P' ? 'prefill' : 'decode',
    httpAddress: http.authority,
    http,
    zmqAddress,
    metadata,
  };
}
