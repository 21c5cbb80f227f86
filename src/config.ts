/**
 * Parses and validates configuration once — defaults, then the YAML file (`--config`), then CLI
 * flags (flags win) — into a frozen, typed Config. The option table lives in config-schema.ts.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { OPTIONS, type Config, type OptionSpec } from './config-schema.js';
import { parseLabelSelector } from './discovery/kube-pod-membership.js';
import { RouterBaseError } from './errors.js';

export type { Config };
import { parseKvEventSettings } from './kv-events/kv-event-config.js';
import { DEFAULT_MEDIA_TOKENS, mediaTokensFor } from './request/media-tokens.js';
import { MAX_FALLBACK_ENDPOINTS } from './routing/fallback-endpoints.js';
import { MAX_DATA_PARALLEL_SIZE } from './workers/data-parallel.js';
import { parseObjectiveSpecs } from './routing/objectives.js';

/** Invalid settings: startup fails (the CLI exits 2 with the message). */
export class ConfigError extends RouterBaseError<'invalid_config'> {
  constructor(message: string, options?: ErrorOptions) {
    super('invalid_config', message, options);
  }
}

export function defaultConfig(): Config {
  const out: Record<string, unknown> = {};
  for (const o of OPTIONS as readonly OptionSpec[])
    out[o.key] = Array.isArray(o.default) ? [...o.default] : o.default;
  return out as unknown as Config;
}

/**
 * Defaults bound to 127.0.0.1 on free ports (port 0): an embedded router for the demo, tests and
 * benchmarks. Read the bound ports from the started Router.
 */
export function loopbackConfig(overrides: Partial<Config> = {}): Config {
  return { ...defaultConfig(), host: '127.0.0.1', grpcPort: 0, adminPort: 0, ...overrides };
}

export type ParsedArgs = { help: true } | { help: false; config: Readonly<Config> };

/** Parses argv (without node and script) and the environment. Throws ConfigError on bad input. */
export function parseConfig(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): ParsedArgs {
  const specs = OPTIONS as readonly OptionSpec[];
  const options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean }> = {
    config: { type: 'string' },
    help: { type: 'boolean' },
  };
  for (const o of specs) {
    options[o.flag] =
      o.type === 'bool' ? { type: 'boolean' } : { type: 'string', multiple: o.type === 'list' };
    if (o.type === 'bool') options[`no-${o.flag}`] = { type: 'boolean' };
  }
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args: joinPrefillPorts(argv),
      options,
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new ConfigError((err as Error).message);
  }
  if (values.help) return { help: true };

  const config = defaultConfig() as unknown as Record<string, unknown>;
  if (typeof values.config === 'string') {
    let doc: unknown;
    try {
      doc = parseYaml(readFileSync(values.config, 'utf8'));
    } catch (err) {
      throw new ConfigError(`cannot read config file ${values.config}: ${(err as Error).message}`);
    }
    if (doc !== null && doc !== undefined) {
      if (typeof doc !== 'object' || Array.isArray(doc))
        throw new ConfigError('config file must be a YAML mapping');
      for (const [key, raw] of Object.entries(doc as Record<string, unknown>)) {
        const spec = specs.find((o) => o.key === key || o.flag === key);
        if (!spec) throw new ConfigError(`unknown setting "${key}" in ${values.config}`);
        config[spec.key] = coerce(spec, raw, `${values.config}: ${key}`);
      }
    }
  }
  if (env.VLLM_ROUTER_ADMIN_TOKEN && !values['admin-token']) config.adminToken = env.VLLM_ROUTER_ADMIN_TOKEN;
  if (env.VLLM_ROUTER_WORKER_API_KEY && !values['worker-api-key'])
    config.workerApiKey = env.VLLM_ROUTER_WORKER_API_KEY;
  for (const o of specs) {
    const v = values[o.flag];
    if (o.type === 'bool') {
      if (values[`no-${o.flag}`]) config[o.key] = false;
      else if (v) config[o.key] = true;
    } else if (v !== undefined) {
      config[o.key] = coerce(o, v, `--${o.flag}`);
    }
  }
  // A token read from a file (a Secret made with --from-file, `$(cat token)`) often ends in a
  // newline, which no Authorization header can carry (HTTP strips it): every admin write would be a 401.
  const token = String(config.adminToken ?? '');
  if (token !== token.trim()) {
    if (token.trim() === '') throw new ConfigError('the admin token is only whitespace');
    config.adminToken = token.trim();
  }
  const cfg = config as unknown as Config;
  validate(cfg);
  return { help: false, config: Object.freeze(cfg) };
}

function coerce(o: OptionSpec, raw: unknown, where: string): unknown {
  const fail = (what: string): never => {
    throw new ConfigError(`${where}: ${what}`);
  };
  switch (o.type) {
    case 'list': {
      const items = (Array.isArray(raw) ? raw : [raw]).map(prefillObject);
      return items
        .flatMap((x) => (o.splitCommas === false ? [String(x)] : String(x).split(',')))
        .map((s) => s.trim())
        .filter((s) => s.length > 0);
    }
    case 'bool':
      if (typeof raw === 'boolean') return raw;
      if (raw === 'true' || raw === 'false') return raw === 'true';
      return fail(`expected true or false, got ${JSON.stringify(raw)}`);
    case 'int': {
      const n = typeof raw === 'number' ? raw : Number(String(raw).replace(/_/g, ''));
      if (!Number.isSafeInteger(n) || n < 0)
        fail(`expected a non-negative integer, got ${JSON.stringify(raw)}`);
      return n;
    }
    case 'number': {
      const n = typeof raw === 'number' ? raw : Number(raw);
      if (!Number.isFinite(n) || n < 0) fail(`expected a non-negative number, got ${JSON.stringify(raw)}`);
      return n;
    }
    case 'enum': {
      const s = String(raw);
      if (!o.values?.includes(s)) fail(`expected one of ${o.values?.join(', ')}, got ${JSON.stringify(raw)}`);
      return s;
    }
    case 'string':
      if (typeof raw !== 'string' && typeof raw !== 'number') fail(`expected a string`);
      return String(raw);
  }
}

/** The longest delay a Node timer takes (2^31 - 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;

function validate(c: Config): void {
  for (const port of [c.grpcPort, c.adminPort]) {
    if (port > 65535) throw new ConfigError(`port ${port} is out of range`);
  }
  for (const url of [...c.workers, ...c.prefill.map((p) => parsePrefillArg(p).url), ...c.decode]) {
    parseWorkerUrl(url);
  }
  // A static worker of a role the mode never routes to would be listed and probed, and never sent a
  // request: a router with only such workers never turns ready.
  if (c.mode === 'pd' && c.workers.length > 0) {
    throw new ConfigError(
      '--worker is a regular worker, which --mode pd never routes to: use --prefill / --decode',
    );
  }
  if (c.mode !== 'pd' && (c.prefill.length > 0 || c.decode.length > 0)) {
    throw new ConfigError(
      '--prefill / --decode workers are routed only with --mode pd (regular mode uses --worker)',
    );
  }
  if (c.discoveryZmq && !/^tcp:\/\/[^\s/]+:(\d+|\*)$/.test(c.discoveryZmq)) {
    throw new ConfigError(`--discovery-zmq must look like tcp://host:port, got ${c.discoveryZmq}`);
  }
  validateKubeDiscovery(c);
  if (c.cacheThreshold > 1) throw new ConfigError('--cache-threshold must be within [0, 1]');
  if (c.intraNodeDataParallelSize < 1 || c.intraNodeDataParallelSize > MAX_DATA_PARALLEL_SIZE)
    throw new ConfigError(`--intra-node-data-parallel-size must be 1..${MAX_DATA_PARALLEL_SIZE}`);
  if (c.imageTokenPatch < 1) throw new ConfigError('--image-token-patch must be >= 1');
  try {
    mediaTokensFor(c.mediaTokens, DEFAULT_MEDIA_TOKENS);
  } catch (err) {
    throw new ConfigError((err as Error).message, { cause: err });
  }
  if (c.responseBodySample < 1) throw new ConfigError('--response-body-sample must be >= 1');
  if (c.responseBodyWatchMax < 1) throw new ConfigError('--response-body-watch-max must be >= 1');
  if (c.fallbackEndpoints > MAX_FALLBACK_ENDPOINTS) {
    throw new ConfigError(`--fallback-endpoints must be <= ${MAX_FALLBACK_ENDPOINTS}`);
  }
  if (c.flowControl && c.scrapeIntervalMs === 0) {
    throw new ConfigError('--flow-control needs the scraped metrics (--scrape-interval-ms > 0)');
  }
  if (c.flowPollMs === 0) throw new ConfigError('--flow-poll-ms must be > 0');
  if (c.prefillTimeoutMs === 0) throw new ConfigError('--prefill-timeout-ms must be > 0');
  // Node fires a timer set beyond 2^31-1 ms after 1 ms instead: a long timeout would act as none.
  for (const o of OPTIONS) {
    const v = (c as unknown as Record<string, unknown>)[o.key];
    if (o.key.endsWith('Ms') && typeof v === 'number' && v > MAX_TIMER_MS) {
      throw new ConfigError(`--${o.flag} must be <= ${MAX_TIMER_MS} (Node's longest timer, ~24.8 days)`);
    }
  }
  if (c.loadStaleMs === 0) throw new ConfigError('--load-stale-ms must be > 0');
  if (c.scrapeIntervalMs > 0 && c.loadStaleMs <= c.scrapeIntervalMs) {
    // Every sample would be stale before the next one arrives: workers read as unscraped for part of
    // each cycle, and flow control and admission (a stale sample means no room) hold for nothing.
    throw new ConfigError(
      `--load-stale-ms (${c.loadStaleMs}) must be above --scrape-interval-ms (${c.scrapeIntervalMs}): ` +
        'a sample would go stale before the next scrape replaces it',
    );
  }
  if (c.costWorkerPaceForgetMs === 0) throw new ConfigError('--cost-worker-pace-forget-ms must be > 0');
  try {
    parseObjectiveSpecs(c.objective);
  } catch (err) {
    throw new ConfigError((err as Error).message, { cause: err });
  }
  try {
    parseKvEventSettings(c);
  } catch (err) {
    throw new ConfigError((err as Error).message, { cause: err });
  }
}

function validateKubeDiscovery(c: Config): void {
  const selectors: Array<[string, readonly string[]]> = [
    ['--selector', c.selector],
    ['--prefill-selector', c.prefillSelector],
    ['--decode-selector', c.decodeSelector],
  ];
  for (const [flag, items] of selectors) {
    try {
      parseLabelSelector(items);
    } catch (err) {
      throw new ConfigError(`${flag}: ${(err as Error).message}`);
    }
  }
  for (const [flag, port] of [
    ['--service-discovery-port', c.serviceDiscoveryPort],
    ['--service-discovery-metrics-port', c.serviceDiscoveryMetricsPort],
    ['--service-discovery-kv-events-port', c.serviceDiscoveryKvEventsPort],
  ] as const) {
    if (port > 65535) throw new ConfigError(`${flag} ${port} is out of range`);
  }
  if (!c.serviceDiscovery) return;
  if (c.serviceDiscoveryPort === 0) throw new ConfigError('--service-discovery-port must be set');
  if (c.serviceDiscoveryResyncMs === 0) throw new ConfigError('--service-discovery-resync-ms must be > 0');
  const needed = c.mode === 'pd' ? selectors.slice(1) : selectors.slice(0, 1);
  // --inference-pool names the pods of the role it serves (regular; P/D: decode) when its flag is empty.
  const fromPool = c.inferencePool ? (c.mode === 'pd' ? '--decode-selector' : '--selector') : undefined;
  for (const [flag, items] of needed) {
    if (items.length === 0 && flag !== fromPool)
      throw new ConfigError(
        `--service-discovery in ${c.mode} mode needs ${flag} key=value (which pods are workers)` +
          (flag === '--prefill-selector' ? '' : ', or --inference-pool NAME (the pods the pool selects)'),
      );
  }
}

/**
 * `--prefill URL [BOOTSTRAP_PORT]`, the spelling of vLLM's Mooncake proxy and the reference router:
 * a port (or `none`) right after the URL joins it as one value `URL PORT`, which parsePrefillArg reads.
 */
function joinPrefillPorts(argv: readonly string[]): string[] {
  const out: string[] = [];
  const isPort = (t: string | undefined) => t !== undefined && /^(?:[0-9]{1,5}|none)$/i.test(t);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (
      a === '--prefill' &&
      argv[i + 1] !== undefined &&
      !argv[i + 1]!.startsWith('-') &&
      isPort(argv[i + 2])
    ) {
      out.push(a, `${argv[i + 1]} ${argv[i + 2]}`);
      i += 2;
    } else if (a.startsWith('--prefill=') && isPort(argv[i + 1])) {
      out.push(`${a} ${argv[i + 1]}`);
      i += 1;
    } else out.push(a);
  }
  return out;
}

/** YAML `prefill: [{url, bootstrapPort}]` as the flag's `URL PORT` string; anything else unchanged. */
function prefillObject(item: unknown): unknown {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) return item;
  const { url, bootstrapPort } = item as Record<string, unknown>;
  if (typeof url !== 'string') throw new ConfigError('prefill entries need a "url"');
  return bootstrapPort === undefined || bootstrapPort === null ? url : `${url} ${String(bootstrapPort)}`;
}

/** Splits one `--prefill` value `URL [BOOTSTRAP_PORT|none]`. */
export function parsePrefillArg(raw: string): { url: string; bootstrapPort?: number } {
  const [url = '', port, extra] = raw.trim().split(/\s+/);
  if (extra !== undefined) throw new ConfigError(`--prefill "${raw}": expected URL [BOOTSTRAP_PORT]`);
  if (port === undefined || port.toLowerCase() === 'none') return { url };
  const n = /^[0-9]{1,5}$/.test(port) ? Number(port) : NaN;
  if (!(n >= 1 && n <= 65535)) throw new ConfigError(`--prefill "${raw}": invalid bootstrap port ${port}`);
  return { url, bootstrapPort: n };
}

/** Accepts `http://host:port` (or bare `host:port`); returns the normalized URL and its parts. */
export function parseWorkerUrl(raw: string): { url: string; host: string; port: number } {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(raw) ? raw : `http://${raw}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new ConfigError(`invalid worker URL "${raw}"`);
  }
  if (u.protocol !== 'http:') throw new ConfigError(`worker URL "${raw}" must use http://`);
  if (u.pathname !== '/' || u.search || u.hash)
    throw new ConfigError(`worker URL "${raw}" must not have a path`);
  const port = u.port ? Number(u.port) : 80;
  if (port < 1) throw new ConfigError(`worker URL "${raw}" must have a port 1-65535`);
  const host = u.hostname.replace(/^\[|\]$/g, '');
  const url = `http://${u.host || `${u.hostname}:${port}`}`.replace(/\/$/, '');
  return { url: u.port ? url : `${url}:${port}`, host, port };
}

/** `--help` text, generated from the option table. */
export function helpText(): string {
  const lines = [
    'Usage: vllm-extproc-router [options]',
    '',
    'Envoy ext_proc service that routes OpenAI-style requests across vLLM workers.',
    '',
    '  --config FILE                       YAML file with any of the settings below (camelCase or flag names); flags win',
    '  --help                              Print this help',
  ];
  let group = '';
  for (const o of OPTIONS as readonly OptionSpec[]) {
    if (o.group !== group) {
      group = o.group;
      lines.push('', `${group}:`);
    }
    const arg = o.type === 'bool' ? '' : o.type === 'enum' ? ` <${o.values?.join('|')}>` : ` <${o.type}>`;
    // A switch that is on by default is turned off with its --no- form (a value is refused).
    const flag = o.type === 'bool' && o.default === true ? `  --[no-]${o.flag}` : `  --${o.flag}${arg}`;
    const def = Array.isArray(o.default) ? (o.default.length ? o.default.join(',') : '') : String(o.default);
    const help = `${o.help}${def !== '' ? ` (default: ${def})` : ''}`;
    lines.push(flag.length < 36 ? `${flag.padEnd(36)}${help}` : `${flag}\n${' '.repeat(36)}${help}`);
  }
  return lines.join('\n') + '\n';
}
