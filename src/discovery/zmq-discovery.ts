/**
 * ZmqDiscovery: listens for vLLM self-registration heartbeats on a ZeroMQ ROUTER socket and feeds
 * them into the ServiceRegistry.
 *
 * Protocol (vLLM P2P NCCL / MoRI-IO connectors): each vLLM instance connects a DEALER socket whose
 * routing id is its zmq_address and sends one MessagePack frame every 3 s (see registration-message.ts).
 * The ROUTER receives `[identity, payload]`; we never reply. A message with any other number of
 * frames is malformed (`multipart`).
 *
 * Per message (synchronous; the receive loop never awaits per-message work):
 * 1. decode + validate (reject reasons from registration-message.ts);
 * 2. access control: ZeroMQ does not expose the peer's IP address to the application, so the only
 *    thing we can check is the CLAIMED http address: an IP literal must be inside `allow`; a DNS name
 *    is resolved and its address must be inside `allow` (`not_allowed`). This stops a misconfigured
 *    or foreign sender from steering traffic outside the allowed networks; it is NOT authentication
 *    (a sender can claim any allowed address). Bind the socket to a private interface / use network
 *    policy for real isolation;
 * 3. register `{role, url: http://host:port, endpoint: ip:port, zmqAddress, metadata}`.
 *
 * DNS: names are resolved off the receive path, by the router's one resolver (workers/endpoint.ts
 * `resolveHost`, IPv4 first, as static and admin registration), so one name is one endpoint whichever
 * way it registers. Answers live in a DnsCache (dns-cache.ts: 30 s fresh, then stale while a
 * background refresh runs; failures remembered 5 s as `dns_failed`; a failed refresh keeps the last
 * good address; at most 1,024 names). A message for a name without a usable answer waits in a
 * per-name queue (latest message per (role, url), at most 64 per name) while one lookup per name
 * runs, bounded to 64 names at once (`resolve_backlog` beyond) and to 5 s per lookup. A changed
 * address changes the entry's `endpoint`, which the registry treats as a new generation.
 *
 * Flood protection:
 * - `maxMessageSize = maxFrameBytes` (64 KiB): libzmq drops an oversized frame by disconnecting the
 *   peer; the application never sees the frame. The only signal is a socket `disconnect` event, which
 *   is reported through `hooks.onPeerDisconnect` (it also fires when a vLLM instance exits);
 * - `receiveHighWaterMark = 1000` messages per peer: beyond that libzmq stops reading from that peer;
 * - the loop yields to the event loop every 64 messages, so a flood cannot starve timers / gRPC;
 * - `handover = true`: a restarted vLLM with the same identity takes over the old connection instead
 *   of being refused while the old TCP connection lingers.
 *
 * Rejections call `hooks.onReject(reason)` for every message and are logged at warn at most once per
 * sender identity per `warnIntervalMs` (default 60 s), with the number suppressed since; the
 * per-sender map holds at most 1,024 identities (oldest evicted).
 *
 * `close()` is idempotent: it closes the socket with linger 0 (which ends the receive loop and the
 * event observer), clears DNS timers and waits for the loop to finish.
 */
import * as zmq from 'zeromq';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import { isIP } from 'node:net';
import type { Logger } from 'pino';
import type { CidrMatcher } from './cidr.js';
import { DnsCache } from './dns-cache.js';
import { LogThrottle } from '../observability/log-throttle.js';
import { formatEndpoint, resolveHost } from '../workers/endpoint.js';
import {
  DEFAULT_MAX_FRAME_BYTES,
  decodeHeartbeat,
  type DecodedHeartbeat,
  type RejectReason,
} from './registration-message.js';
import type { RegisterEvent, RegistryEntry, ServiceRegistry } from './service-registry.js';

export type DiscoveryRejectReason =
  RejectReason | 'multipart' | 'not_allowed' | 'dns_failed' | 'resolve_backlog' | 'transfer_mode_mismatch';

export interface ZmqDiscoveryHooks {
  onRegister?(entry: RegistryEntry, event: RegisterEvent): void;
  onReject?(reason: DiscoveryRejectReason): void;
  /** A peer connection dropped: a vLLM exit, or libzmq dropping an oversized frame. */
  onPeerDisconnect?(): void;
}

export interface ZmqDiscoveryOptions {
  /** `tcp://host:port`; port `0` or `*` picks a free port (see `start()`'s result). */
  bind: string;
  registry: ServiceRegistry;
  allow?: CidrMatcher;
  /** Default 64 KiB. */
  maxFrameBytes?: number;
  /** Resolves a DNS name to one IP address. Default the router's resolver (`resolveHost`). */
  resolve?: (host: string) => Promise<string>;
  logger: Logger;
  hooks?: ZmqDiscoveryHooks;
  /** Minimum interval between two warnings for one sender. Default 60 s. */
  warnIntervalMs?: number;
  /** Milliseconds, for rate limiting and the DNS cache. Default `performance.now()`. */
  clock?: () => number;
}

const RECEIVE_HIGH_WATER_MARK = 1000;
const YIELD_EVERY_MESSAGES = 64;
const DEFAULT_WARN_INTERVAL_MS = 60_000;
const MAX_WARN_SENDERS = 1024;
const DNS_TIMEOUT_MS = 5_000;
const DNS_MAX_INFLIGHT = 64;
const DNS_MAX_WAITING_PER_NAME = 64;

interface PendingMessage {
  identity: Buffer;
  decoded: DecodedHeartbeat;
}

/** Printable sender identity for logs: the zmq address vLLM uses, or hex for binary ids. */
function describeIdentity(identity: Buffer): string {
  const text = identity.toString('latin1');
  return /^[\x20-\x7e]{1,255}$/.test(text) ? text : `0x${identity.subarray(0, 64).toString('hex')}`;
}

/** Rewrites `tcp://host:0` to `tcp://host:*` (libzmq's "any free port"). */
function normaliseBind(bind: string): string {
  return bind.replace(/:0$/, ':*');
}

export class ZmqDiscovery {
  private readonly opts: ZmqDiscoveryOptions;
  private readonly maxFrameBytes: number;
  private readonly clock: () => number;
  private readonly resolve: (host: string) => Promise<string>;
  private socket: zmq.Router | undefined;
  private loop: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  private closed = false;
  private readonly warnThrottle: LogThrottle;
  private readonly dnsCache = new DnsCache();
  /** DNS name -> messages waiting for its lookup, latest per (role, url). */
  private readonly dnsWaiting = new Map<string, Map<string, PendingMessage>>();
  /** DNS names with a lookup in flight (first resolution or background refresh). */
  private readonly dnsInflight = new Set<string>();
  private readonly dnsTimers = new Set<NodeJS.Timeout>();

  constructor(opts: ZmqDiscoveryOptions) {
    this.opts = opts;
    this.maxFrameBytes = opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    this.warnThrottle = new LogThrottle(opts.warnIntervalMs ?? DEFAULT_WARN_INTERVAL_MS, MAX_WARN_SENDERS);
    this.clock = opts.clock ?? (() => performance.now());
    this.resolve = opts.resolve ?? resolveHost;
  }

  /** Binds and starts the receive loop. Resolves with the bound endpoint, e.g. `tcp://127.0.0.1:41234`. */
  async start(): Promise<string> {
    if (this.closed) throw new Error('ZmqDiscovery is closed');
    if (this.socket !== undefined) throw new Error('ZmqDiscovery already started');
    const socket = new zmq.Router({
      linger: 0,
      maxMessageSize: this.maxFrameBytes,
      receiveHighWaterMark: RECEIVE_HIGH_WATER_MARK,
      handover: true,
    });
    this.socket = socket;
    socket.events.on('disconnect', () => this.callHook(() => this.opts.hooks?.onPeerDisconnect?.()));
    try {
      await socket.bind(normaliseBind(this.opts.bind));
    } catch (err) {
      socket.close();
      this.closed = true;
      throw err;
    }
    if (this.closed) throw new Error('ZmqDiscovery closed during start');
    const endpoint = socket.lastEndpoint ?? this.opts.bind;
    this.loop = this.receiveLoop(socket);
    this.opts.logger.info({ endpoint }, 'zmq discovery listening');
    return endpoint;
  }

  /** Idempotent: closes the socket (linger 0), stops DNS work and waits for the receive loop to end. */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  private async doClose(): Promise<void> {
    this.closed = true;
    for (const timer of this.dnsTimers) clearTimeout(timer);
    this.dnsTimers.clear();
    this.dnsWaiting.clear();
    this.dnsInflight.clear();
    const socket = this.socket;
    if (socket !== undefined && !socket.closed) socket.close();
    await this.loop;
  }

  private async receiveLoop(socket: zmq.Router): Promise<void> {
    let sinceYield = 0;
    while (!this.closed && !socket.closed) {
      let message: Buffer[];
      try {
        message = await socket.receive();
      } catch (err) {
        if (this.closed || socket.closed) return;
        // Not expected from a ROUTER without receiveTimeout; log and keep serving after a yield.
        this.opts.logger.error({ err }, 'zmq discovery receive failed');
        await yieldToEventLoop();
        continue;
      }
      try {
        this.handleMessage(message);
      } catch (err) {
        this.opts.logger.error({ err }, 'zmq discovery message handling failed');
      }
      if (++sinceYield >= YIELD_EVERY_MESSAGES) {
        sinceYield = 0;
        await yieldToEventLoop();
      }
    }
  }

  private handleMessage(message: Buffer[]): void {
    const [identity, payload] = message;
    if (identity === undefined) return;
    if (payload === undefined || message.length !== 2) {
      this.reject(identity, 'multipart');
      return;
    }
    const decoded = decodeHeartbeat(payload, this.maxFrameBytes);
    if (!decoded.ok) {
      this.reject(identity, decoded.reason);
      return;
    }
    const { http } = decoded;
    if (http.kind !== 'dns') {
      this.admit(identity, decoded, http.host);
      return;
    }
    const cached = this.dnsCache.get(http.host, this.clock());
    switch (cached.state) {
      case 'stale':
        this.startLookup(http.host); // refresh in the background; serve the last answer meanwhile
        return this.admit(identity, decoded, cached.ip);
      case 'fresh':
        return this.admit(identity, decoded, cached.ip);
      case 'failed':
        return this.reject(identity, 'dns_failed', { host: http.host });
      case 'miss':
        return this.enqueueForLookup(identity, decoded);
    }
  }

  /** Checks `ip` against the allow list and registers. */
  private admit(identity: Buffer, decoded: DecodedHeartbeat, ip: string): void {
    if (this.opts.allow !== undefined && !this.opts.allow.allows(ip)) {
      this.reject(identity, 'not_allowed', { httpAddress: decoded.httpAddress, ip });
      return;
    }
    const endpoint = formatEndpoint(ip, decoded.http.port);
    const result = this.opts.registry.register({
      role: decoded.role,
      url: `http://${decoded.httpAddress}`,
      endpoint,
      zmqAddress: decoded.zmqAddress,
      metadata: decoded.metadata,
      source: 'zmq',
    });
    if ('rejected' in result) {
      this.reject(identity, result.rejected, { httpAddress: decoded.httpAddress });
      return;
    }
    const { entry, event } = result;
    if (event !== 'heartbeat') {
      this.opts.logger.info(
        { role: entry.role, url: entry.url, endpoint, generation: entry.generation, event },
        'worker registered via zmq discovery',
      );
    }
    this.callHook(() => this.opts.hooks?.onRegister?.(entry, event));
  }

  private enqueueForLookup(identity: Buffer, decoded: DecodedHeartbeat): void {
    const name = decoded.http.host;
    let waiting = this.dnsWaiting.get(name);
    if (waiting === undefined) {
      if (!this.startLookup(name)) {
        this.reject(identity, 'resolve_backlog');
        return;
      }
      waiting = new Map();
      this.dnsWaiting.set(name, waiting);
    }
    const key = `${decoded.role} ${decoded.httpAddress}`;
    if (!waiting.has(key) && waiting.size >= DNS_MAX_WAITING_PER_NAME) {
      this.reject(identity, 'resolve_backlog');
      return;
    }
    waiting.delete(key); // re-insert: the latest message per (role, url) wins
    waiting.set(key, { identity, decoded });
  }

  /**
   * Starts one lookup for `name` unless one is already running. Returns false when the in-flight
   * bound is reached (and nothing is running for `name`).
   */
  private startLookup(name: string): boolean {
    if (this.dnsInflight.has(name)) return true;
    if (this.dnsInflight.size >= DNS_MAX_INFLIGHT) return false;
    this.dnsInflight.add(name);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, rejectTimeout) => {
      timer = setTimeout(() => rejectTimeout(new Error('DNS lookup timed out')), DNS_TIMEOUT_MS);
      timer.unref();
      this.dnsTimers.add(timer);
    });
    // `new Promise` turns a synchronous throw of a custom resolver into a rejection.
    const lookupPromise = new Promise<string>((resolve) => resolve(this.resolve(name)));
    Promise.race([lookupPromise, timeout])
      .then(
        (ip) => this.finishLookup(name, typeof ip === 'string' && isIP(ip) !== 0 ? ip : undefined),
        () => this.finishLookup(name, undefined),
      )
      .catch((err: unknown) => this.opts.logger.error({ err }, 'zmq discovery DNS completion failed'))
      .finally(() => {
        if (timer !== undefined) {
          clearTimeout(timer);
          this.dnsTimers.delete(timer);
        }
      });
    return true;
  }

  private finishLookup(name: string, ip: string | undefined): void {
    this.dnsInflight.delete(name);
    if (this.closed) return;
    // A failed refresh keeps serving the last good answer until the next refresh attempt.
    const usable = this.dnsCache.record(name, ip, this.clock());
    const waiting = this.dnsWaiting.get(name);
    this.dnsWaiting.delete(name);
    if (waiting === undefined) return;
    for (const { identity, decoded } of waiting.values()) {
      if (usable === undefined) this.reject(identity, 'dns_failed', { host: name });
      else this.admit(identity, decoded, usable);
    }
  }

  private reject(
    identity: Buffer,
    reason: DiscoveryRejectReason,
    details: Record<string, unknown> = {},
  ): void {
    this.callHook(() => this.opts.hooks?.onReject?.(reason));
    const sender = describeIdentity(identity);
    const suppressed = this.warnThrottle.take(sender, this.clock());
    if (suppressed === undefined) return;
    this.opts.logger.warn({ sender, reason, suppressed, ...details }, 'zmq discovery message rejected');
  }

  private callHook(call: () => void): void {
    try {
      call();
    } catch (err) {
      this.opts.logger.error({ err }, 'zmq discovery hook threw');
    }
  }
}
