/**
 * ServiceRegistry: the set of self-registered (and static) workers, with registration generations.
 *
 * Keyed by (role, url): a prefill and a decode registration at the same URL are different entries.
 *
 * Lifetimes and generations (design §2). Every entry carries a `generation` drawn from ONE
 * registry-wide counter that only grows. A generation names one continuous registration lifetime:
 * - a registration of an unknown (role, url) starts a lifetime: new generation, event `registered`;
 * - a registration of a LIVE entry (`expiresAtMs > now`) is a heartbeat: same generation, expiry pushed
 *   to `now + ttlMs`, event `heartbeat`;
 * - a registration whose previous entry has ALREADY expired (`expiresAtMs <= now`), even if `cleanup()`
 *   has not removed it yet, starts a new lifetime: new, strictly larger generation, event `replaced`;
 * - a heartbeat that changes the `endpoint` (ip:port Envoy dials, e.g. the DNS name now resolves
 *   elsewhere) or the `zmqAddress` (the KV address peers use) is also a new lifetime (`replaced`):
 *   the persistent Worker built from an entry is immutable in those fields, so keeping the generation
 *   would pair the old Worker with a different process; so is a changed `bootstrapPort` (Mooncake),
 *   and a changed `metadata` (the Worker keeps its registration's metadata: P/D reads MoRI-IO's
 *   `tp_size` / `dp_size` from it, ports derive from it; vLLM builds its heartbeat once per process,
 *   so a changed one is another process);
 * - after `deregister`, the next registration is a new lifetime (`registered`);
 * - `restarted(role, url, generation)`: the process behind a live lifetime was seen to restart while
 *   its registration stayed (load/process-starts.ts: a static worker, a ZMQ worker back within its
 *   TTL), so it starts a new lifetime with the same registration (event `replaced`): what each source
 *   announced there is kept, so their next heartbeats are heartbeats of the new lifetime. Not for a
 *   `sourceOwned` entry: its source ends and replaces its own lifetimes (Kubernetes discovery tells a
 *   restarted container by its restartCount, kube-pod-membership.ts, and removes only the generation
 *   it registered).
 * Generation allocation and insertion happen in the same synchronous call, so no interleaving can
 * observe a generation that is not in the table.
 *
 * Several sources at one key (a registration names its `source`: vLLM's ZMQ heartbeats, an operator's
 * admin POSTs, static configuration, Kubernetes): each keeps announcing its own view, e.g. an admin
 * registrar adds `tp_size` that vLLM's heartbeat does not carry. While the key stays live, a
 * registration that repeats exactly what its source last announced at the key is a heartbeat of the
 * current lifetime, whichever source started it (expiry pushed, the entry unchanged): two sources
 * writing different views no longer start a new lifetime on every write. A source that announces
 * something else starts one with its registration, as above.
 *
 * MoRI-IO: `metadata.transfer_mode` is fixed by the first registration of a lifetime; a heartbeat
 * carrying a different value (including present vs absent) is rejected and changes nothing.
 *
 * Permanent entries (static configuration, the admin API's `permanent: true`) never expire
 * (`expiresAtMs = Infinity`), and permanence is sticky for the (role, url) until it is deregistered: a
 * later non-permanent registration does not make it expire, whether it is a heartbeat of the lifetime
 * or starts a new one (a vLLM heartbeat that adds a `zmq_address` to a static worker, a changed
 * endpoint): an operator's static worker stays when those heartbeats stop, and a heartbeat only
 * refreshes what it announces. Except a `sourceOwned` entry (Kubernetes discovery: permanent because
 * that source, not a TTL, ends it, and it removes only its own generation): a lifetime another
 * registration starts at its key is that registration's, permanent only if it says so.
 *
 * Snapshot cost: `snapshot(role)` runs before every routing decision, so each role caches its sorted,
 * frozen array of live entries. The cache is dropped when the role's membership or an entry's identity
 * changes, and is valid only while `now < min(expiresAtMs of the cached entries)`, so it can never
 * return an expired entry. A plain heartbeat (same generation, endpoint, zmqAddress and metadata)
 * does NOT drop the cache: the cached entry object then shows an `expiresAtMs` that lags the real one
 * (a lower bound), which at worst makes the cache rebuild earlier. `get()` always returns the current
 * entry. With 1,000 workers heartbeating every 3 s and a 5 s TTL, the cache is rebuilt about once
 * every couple of seconds instead of on every heartbeat.
 *
 * Times are in the injected clock's domain. The default clock is `performance.now()` (monotonic ms),
 * so a wall-clock step cannot expire or resurrect workers.
 *
 * `holdExpiry()` stops expiry for good (entries live at that moment stay live): a draining router
 * closes its ZMQ socket so the workers' heartbeats reach its replacement, and the workers it knows
 * must not vanish a TTL later while its drain still serves streams (they did: within the 5 s
 * default TTL every ZMQ-registered worker was gone, and the streams of the drain grace got 503).
 *
 * Change listeners (`onChange`) are told, synchronously and after the table is updated, whenever a
 * role's membership or an entry's identity changes (the same points that drop the snapshot cache);
 * a heartbeat that only extends expiry is not a change, and neither is an entry passing its expiry
 * until `cleanup()` removes it. The composition root reconciles the pools there.
 *
 * Pure: no timers, metrics or logging. Callers run `cleanup()` periodically (RegistryJanitor).
 */
import type { Role } from '../workers/role.js';

export interface Registration {
  role: Role;
  /** `http://host:port`: the key within a role. */
  url: string;
  /** `ip:port` (IPv6 as `[ip]:port`) that Envoy's ORIGINAL_DST cluster connects to. */
  endpoint: string;
  /** vLLM's KV / ZMQ address, when the worker announced one. */
  zmqAddress?: string;
  /** Connector metadata (e.g. MoRI-IO `transfer_mode`, tp/dp sizes). */
  metadata?: Record<string, unknown>;
  /** Never expires; sticky for the (role, url) until deregistered (see the module comment). */
  permanent?: boolean;
  /**
   * With `permanent`: the registering source ends this lifetime itself and removes only its own
   * generation (Kubernetes discovery), so a new lifetime another registration starts at the key does
   * not inherit the permanence. Fixed by the first registration of a lifetime.
   */
  sourceOwned?: boolean;
  /** Mooncake bootstrap server port (prefill instances); part of the identity like `endpoint`. */
  bootstrapPort?: number;
  /** Which source registers (`zmq`, `admin`, `static`, `kube`): see "Several sources" above. */
  source?: string;
}

export interface RegistryEntry extends Readonly<Registration> {
  readonly generation: number;
  /** `Infinity` when permanent. */
  readonly expiresAtMs: number;
  /** When this lifetime (generation) started. */
  readonly registeredAtMs: number;
}

/** `replaced` = a new generation for a (role, url) whose previous entry expired or changed identity. */
export type RegisterEvent = 'registered' | 'heartbeat' | 'replaced';

export type RegisterResult =
  { entry: RegistryEntry; event: RegisterEvent } | { rejected: 'transfer_mode_mismatch' };

export interface ServiceRegistryOptions {
  /** Lifetime of a non-permanent registration after its last heartbeat. Default 5000 ms (vLLM pings every 3 s). */
  ttlMs?: number;
  /** Monotonic milliseconds. Default `performance.now()`. */
  clock?: () => number;
}

export const DEFAULT_REGISTRY_TTL_MS = 5000;

interface RoleTable {
  readonly entries: Map<string, RegistryEntry>;
  /** Per key: what each source last announced there while the key stayed live (announcementOf). */
  readonly announced: Map<string, Map<string, string>>;
  /** Sorted live entries, or undefined when invalidated. */
  cache: readonly RegistryEntry[] | undefined;
  /** The cache is valid while `now < cacheValidUntilMs`. */
  cacheValidUntilMs: number;
}

const EMPTY: readonly RegistryEntry[] = Object.freeze([]);

function shallowEqualRecords(
  a: Readonly<Record<string, unknown>> | undefined,
  b: Readonly<Record<string, unknown>> | undefined,
): boolean {
  if (a === b) return true;
  const aKeys = a === undefined ? [] : Object.keys(a);
  const bKeys = b === undefined ? [] : Object.keys(b);
  if (aKeys.length !== bKeys.length) return false;
  for (const key of aKeys) {
    if (!Object.is(a?.[key], b?.[key])) return false;
  }
  return true;
}

/** What a source announces at a key, as a comparable string (metadata keys in any order). */
function announcementOf(reg: Registration): string {
  const metadata = reg.metadata === undefined ? undefined : Object.entries(reg.metadata).sort();
  return JSON.stringify([reg.endpoint, reg.zmqAddress, reg.bootstrapPort, metadata]);
}

function transferModeOf(metadata: Readonly<Record<string, unknown>> | undefined): unknown {
  return metadata?.['transfer_mode'];
}

/**
 * Metadata a Worker derives immutable fields from (worker.ts: bootstrapPort, metricsPort, kvEventsPort):
 * a live heartbeat that changes one is a new lifetime, like a changed `endpoint` or `bootstrapPort`.
 */
const WORKER_IDENTITY_METADATA = [
  'bootstrap_port',
  'bootstrapPort',
  'metrics_port',
  'kv_events_port',
] as const;

function sameWorkerIdentityMetadata(
  a: Readonly<Record<string, unknown>> | undefined,
  b: Readonly<Record<string, unknown>> | undefined,
): boolean {
  return WORKER_IDENTITY_METADATA.every((key) => Object.is(a?.[key], b?.[key]));
}

function compareByUrl(a: RegistryEntry, b: RegistryEntry): number {
  return a.url < b.url ? -1 : a.url > b.url ? 1 : 0;
}

export class ServiceRegistry {
  readonly ttlMs: number;
  private readonly clock: () => number;
  private readonly tables = new Map<Role, RoleTable>();
  private lastGeneration = 0;
  private readonly listeners = new Set<(role: Role) => void>();
  /** Set by holdExpiry(): the time every expiry is judged at from then on. */
  private heldAt: number | undefined;

  constructor(opts: ServiceRegistryOptions = {}) {
    const ttlMs = opts.ttlMs ?? DEFAULT_REGISTRY_TTL_MS;
    if (!(ttlMs > 0) || !Number.isFinite(ttlMs)) throw new RangeError(`ttlMs must be > 0, got ${ttlMs}`);
    this.ttlMs = ttlMs;
    this.clock = opts.clock ?? (() => performance.now());
  }

  /** Expiry stops: no entry live now expires from here on (see the module comment). Idempotent. */
  holdExpiry(): void {
    this.heldAt ??= this.clock();
  }

  /** The clock, or the time expiry was held at. */
  private now(): number {
    return this.heldAt ?? this.clock();
  }

  /** Calls `listener(role)` after every membership change of `role`. Returns the unsubscribe. */
  onChange(listener: (role: Role) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private changed(table: RoleTable, role: Role): void {
    table.cache = undefined;
    for (const listener of this.listeners) listener(role);
  }

  /** Registers or refreshes (role, url). See the module comment for the lifetime rules. */
  register(reg: Registration): RegisterResult {
    const now = this.now();
    const table = this.table(reg.role);
    const previous = table.entries.get(reg.url);
    const live = previous !== undefined && previous.expiresAtMs > now;
    const announcement = reg.source === undefined ? undefined : ([reg.source, announcementOf(reg)] as const);
    const announced = live ? table.announced.get(reg.url) : undefined;

    if (live && announcement !== undefined && announced?.get(announcement[0]) === announcement[1]) {
      // This source repeats its own last announcement: a heartbeat of whatever lifetime is current.
      return { entry: this.heartbeat(table, previous, reg, now), event: 'heartbeat' };
    }

    const sameIdentity =
      live &&
      previous.endpoint === reg.endpoint &&
      previous.zmqAddress === reg.zmqAddress &&
      previous.bootstrapPort === reg.bootstrapPort &&
      sameWorkerIdentityMetadata(previous.metadata, reg.metadata);
    if (sameIdentity && transferModeOf(previous.metadata) !== transferModeOf(reg.metadata)) {
      return { rejected: 'transfer_mode_mismatch' };
    }
    if (sameIdentity && shallowEqualRecords(previous.metadata, reg.metadata)) {
      this.announce(table, reg, announcement, announced);
      return { entry: this.heartbeat(table, previous, reg, now), event: 'heartbeat' };
    }

    // A live static entry's permanence carries over to the new lifetime at its key (module comment).
    const permanent =
      reg.permanent === true || (live && previous.permanent === true && previous.sourceOwned !== true);
    const entry = this.freezeEntry(reg, {
      generation: ++this.lastGeneration,
      registeredAtMs: now,
      expiresAtMs: permanent ? Infinity : now + this.ttlMs,
      permanent,
      sourceOwned: reg.permanent === true && reg.sourceOwned === true,
    });
    table.entries.set(reg.url, entry);
    this.announce(table, reg, announcement, announced);
    this.changed(table, reg.role);
    return { entry, event: previous === undefined ? 'registered' : 'replaced' };
  }

  /** The live `previous` kept (its generation and content), expiry pushed; permanence is sticky. */
  private heartbeat(
    table: RoleTable,
    previous: RegistryEntry,
    reg: Registration,
    now: number,
  ): RegistryEntry {
    const permanent = previous.permanent === true || reg.permanent === true;
    const entry = this.freezeEntry(previous, {
      generation: previous.generation,
      registeredAtMs: previous.registeredAtMs,
      expiresAtMs: permanent ? Infinity : now + this.ttlMs,
      permanent,
      sourceOwned: previous.sourceOwned === true,
    });
    table.entries.set(reg.url, entry);
    // A plain heartbeat only moves expiry forward: the cached snapshot stays correct (see header).
    if (previous.permanent !== entry.permanent) this.changed(table, reg.role);
    return entry;
  }

  /** Records what `reg.source` announced at the key; what sources announced before a gap is dropped. */
  private announce(
    table: RoleTable,
    reg: Registration,
    announcement: readonly [source: string, announced: string] | undefined,
    announced: Map<string, string> | undefined,
  ): void {
    const sources = announced ?? new Map<string, string>();
    if (announcement !== undefined) sources.set(...announcement);
    if (sources.size > 0) table.announced.set(reg.url, sources);
    else table.announced.delete(reg.url);
  }

  /**
   * A new lifetime for the live entry of (role, url) whose process restarted (module comment), if it
   * is still of `generation`: the new entry, else undefined (another lifetime began meanwhile, it
   * expired, or it is `sourceOwned`).
   */
  restarted(role: Role, url: string, generation: number): RegistryEntry | undefined {
    const now = this.now();
    const table = this.tables.get(role);
    const previous = table?.entries.get(url);
    if (table === undefined || previous === undefined) return undefined;
    if (previous.generation !== generation || previous.expiresAtMs <= now || previous.sourceOwned === true) {
      return undefined;
    }
    const entry = this.freezeEntry(previous, {
      generation: ++this.lastGeneration,
      registeredAtMs: now,
      expiresAtMs: previous.expiresAtMs,
      permanent: previous.permanent === true,
      sourceOwned: false,
    });
    table.entries.set(url, entry);
    this.changed(table, role);
    return entry;
  }

  /** Removes (role, url) whether live or expired. Returns whether an entry existed. */
  deregister(role: Role, url: string): boolean {
    const table = this.tables.get(role);
    if (table === undefined || !table.entries.delete(url)) return false;
    table.announced.delete(url);
    this.changed(table, role);
    return true;
  }

  /** Live entries of `role` (`expiresAtMs > now`), sorted by url. Frozen; do not hold across decisions. */
  snapshot(role: Role): readonly RegistryEntry[] {
    const table = this.tables.get(role);
    if (table === undefined) return EMPTY;
    const now = this.now();
    if (table.cache !== undefined && now < table.cacheValidUntilMs) return table.cache;
    const live: RegistryEntry[] = [];
    let validUntil = Infinity;
    for (const entry of table.entries.values()) {
      if (entry.expiresAtMs > now) {
        live.push(entry);
        if (entry.expiresAtMs < validUntil) validUntil = entry.expiresAtMs;
      }
    }
    live.sort(compareByUrl);
    table.cache = Object.freeze(live);
    table.cacheValidUntilMs = validUntil;
    return table.cache;
  }

  /** Removes and returns every expired entry (all roles). */
  cleanup(): RegistryEntry[] {
    const now = this.now();
    const removed: RegistryEntry[] = [];
    for (const [role, table] of this.tables) {
      let changed = false;
      for (const [url, entry] of table.entries) {
        if (entry.expiresAtMs <= now) {
          table.entries.delete(url);
          table.announced.delete(url);
          removed.push(entry);
          changed = true;
        }
      }
      if (changed) this.changed(table, role);
    }
    return removed;
  }

  /** Number of live entries of `role`. */
  size(role: Role): number {
    return this.snapshot(role).length;
  }

  /** The current live entry for (role, url), if any. */
  get(role: Role, url: string): RegistryEntry | undefined {
    const entry = this.tables.get(role)?.entries.get(url);
    return entry !== undefined && entry.expiresAtMs > this.now() ? entry : undefined;
  }

  private table(role: Role): RoleTable {
    let table = this.tables.get(role);
    if (table === undefined) {
      table = { entries: new Map(), announced: new Map(), cache: undefined, cacheValidUntilMs: -Infinity };
      this.tables.set(role, table);
    }
    return table;
  }

  private freezeEntry(
    reg: Registration,
    lifetime: {
      generation: number;
      registeredAtMs: number;
      expiresAtMs: number;
      permanent: boolean;
      sourceOwned: boolean;
    },
  ): RegistryEntry {
    const entry: RegistryEntry = {
      role: reg.role,
      url: reg.url,
      endpoint: reg.endpoint,
      ...(reg.zmqAddress !== undefined ? { zmqAddress: reg.zmqAddress } : {}),
      ...(reg.metadata !== undefined ? { metadata: Object.freeze({ ...reg.metadata }) } : {}),
      ...(reg.bootstrapPort !== undefined ? { bootstrapPort: reg.bootstrapPort } : {}),
      permanent: lifetime.permanent,
      ...(lifetime.sourceOwned ? { sourceOwned: true } : {}),
      generation: lifetime.generation,
      expiresAtMs: lifetime.expiresAtMs,
      registeredAtMs: lifetime.registeredAtMs,
    };
    return Object.freeze(entry);
  }
}
