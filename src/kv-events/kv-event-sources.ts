/**
 * Where each worker's KV-event publishers are: explicit sources in the reference router's spelling,
 * `--kv-event-source WORKER_URL=ENDPOINT[,ENDPOINT...]` (one endpoint per data-parallel rank), replay
 * endpoints `--kv-event-replay WORKER_URL=ENDPOINT[,ENDPOINT...]` (same rank order), and a default rule
 * for every other worker: `tcp://<worker host>:<port + rank>` for `--kv-event-dp-size` ranks, where
 * port is the worker's own KV-events port when it has one (Kubernetes annotation `vllm.ai/kv-events-port`
 * or a registration's `kv_events_port` metadata), else `--kv-event-port`; replay at
 * `--kv-event-replay-port + rank` when set (vLLM offsets both by the rank).
 *
 * Pure: parsing throws a RangeError with the offending text; resolution is a lookup.
 */
export interface PublisherEndpoints {
  readonly endpoint: string;
  readonly replayEndpoint?: string;
}

export interface KvEventSourceRules {
  /** Normalised worker URL -> publishers (rank order). */
  readonly explicit: ReadonlyMap<string, readonly PublisherEndpoints[]>;
  /** Default rule port; 0 = no default rule (only explicit sources are subscribed). */
  readonly defaultPort: number;
  readonly defaultReplayPort: number;
  readonly dpSize: number;
}

const ENDPOINT = /^tcp:\/\/(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/;

/** Worker URL key: scheme://host:port, lower-cased, no trailing slash. */
export function workerKey(url: string): string {
  const u = new URL(url);
  const port = u.port || (u.protocol === 'https:' ? '443' : '80');
  return `${u.protocol}//${u.hostname.toLowerCase()}:${port}`;
}

function parseEndpoint(text: string, what: string): string {
  const m = ENDPOINT.exec(text.trim());
  const port = m === null ? NaN : Number(m[2]);
  if (m === null || !(port >= 1 && port <= 65535)) {
    throw new RangeError(`${what}: "${text}" is not tcp://host:port`);
  }
  return text.trim();
}

function parseSpec(spec: string, flag: string): [string, string[]] {
  const eq = spec.indexOf('=');
  if (eq <= 0) throw new RangeError(`${flag}: expected WORKER_URL=ENDPOINT[,ENDPOINT...], got "${spec}"`);
  let key: string;
  try {
    key = workerKey(spec.slice(0, eq));
  } catch {
    throw new RangeError(`${flag}: "${spec.slice(0, eq)}" is not a worker URL`);
  }
  const endpoints = spec
    .slice(eq + 1)
    .split(',')
    .map((e) => parseEndpoint(e, flag));
  return [key, endpoints];
}

export function parseKvEventSources(opts: {
  sources: readonly string[];
  replays: readonly string[];
  defaultPort: number;
  defaultReplayPort: number;
  dpSize: number;
}): KvEventSourceRules {
  const explicit = new Map<string, PublisherEndpoints[]>();
  for (const spec of opts.sources) {
    const [key, endpoints] = parseSpec(spec, '--kv-event-source');
    if (explicit.has(key)) throw new RangeError(`--kv-event-source: ${key} given twice`);
    explicit.set(
      key,
      endpoints.map((endpoint) => ({ endpoint })),
    );
  }
  for (const spec of opts.replays) {
    const [key, endpoints] = parseSpec(spec, '--kv-event-replay');
    const pubs = explicit.get(key);
    if (pubs === undefined || pubs.length !== endpoints.length) {
      throw new RangeError(
        `--kv-event-replay: ${key} needs a --kv-event-source with ${endpoints.length} endpoint(s)`,
      );
    }
    explicit.set(
      key,
      pubs.map((p, i) => ({ endpoint: p.endpoint, replayEndpoint: endpoints[i] as string })),
    );
  }
  const port = (v: number, what: string): number => {
    if (!Number.isInteger(v) || v < 0 || v > 65535)
      throw new RangeError(`${what} must be 0..65535, got ${v}`);
    return v;
  };
  if (!Number.isInteger(opts.dpSize) || opts.dpSize < 1 || opts.dpSize > 256) {
    throw new RangeError(`--kv-event-dp-size must be 1..256, got ${opts.dpSize}`);
  }
  return {
    explicit,
    defaultPort: port(opts.defaultPort, '--kv-event-port'),
    defaultReplayPort: port(opts.defaultReplayPort, '--kv-event-replay-port'),
    dpSize: opts.dpSize,
  };
}

/**
 * The publishers of the worker at `url`, or [] when it has no explicit source, no port of its own
 * (`ownPort`) and no default rule applies. `ranks`: the data-parallel ranks the pools schedule at that
 * URL (workers/data-parallel.ts); the default rule then covers at least that many.
 */
export function publishersOf(
  rules: KvEventSourceRules,
  url: string,
  ownPort?: number,
  ranks?: number,
): readonly PublisherEndpoints[] {
  let key: string;
  try {
    key = workerKey(url);
  } catch {
    return [];
  }
  const explicit = rules.explicit.get(key);
  if (explicit !== undefined) return explicit;
  const basePort = ownPort ?? rules.defaultPort;
  if (basePort === 0) return [];
  const host = new URL(key).hostname;
  const out: PublisherEndpoints[] = [];
  for (let rank = 0; rank < Math.max(rules.dpSize, ranks ?? 1); rank++) {
    const p = basePort + rank;
    if (p > 65535) break;
    const replay = rules.defaultReplayPort === 0 ? undefined : rules.defaultReplayPort + rank;
    out.push({
      endpoint: `tcp://${host}:${p}`,
      ...(replay !== undefined && replay <= 65535 ? { replayEndpoint: `tcp://${host}:${replay}` } : {}),
    });
  }
  return out;
}

/** True when any worker may have publishers (explicit sources or a default rule). */
export function hasKvEventSources(rules: KvEventSourceRules): boolean {
  return rules.explicit.size > 0 || rules.defaultPort !== 0;
}
