/**
 * Command line entry of the vLLM simulator: starts one simulator, logs its URL (pino JSON line) and
 * closes cleanly on SIGINT/SIGTERM.
 *
 *   npx tsx src/sim/cli.ts --port 8001 --role decode --model m --register tcp://127.0.0.1:5555 \
 *     --time-scale 1 [--host 127.0.0.1] [--kv-connector nixl|mooncake|moriio|p2pnccl] [--id name]
 *     [--max-tokens 16] [--zmq-address host:port] [--register-interval-ms 3000]
 *     [--transfer-mode READ|WRITE] [--cache-blocks 4096] [--shared-block-pool] [--max-running 64]
 *     [--overhead-ms 5]
 *     [--prefill-ms-per-token 0.05] [--itl-ms 10] [--itl-growth 0.02] [--kv-transfer-ms-per-token 0.005]
 *     [--prefill-lanes 0] [--max-num-batched-tokens 0] [--tokenizer DIR]
 *     [--kv-events tcp://*:5557] [--kv-events-replay tcp://*:5558]
 *     [--max-loras N] [--lora-load-ms 50] [--lora-modules a,b] [--aliases name,..] [--strict-models]
 *     [--api-key KEY] [--scheduling-policy fcfs|priority] [--bootstrap-port 8998]
 *     [--sglang-metrics]
 *
 * `--sglang-metrics` writes `/metrics` as SGLang with `--enable-metrics` does (`sglang:num_queue_reqs`,
 * `sglang:num_running_reqs`, `sglang:token_usage`, `sglang:max_total_num_tokens`, ...; metrics-text.ts).
 *
 * `--bootstrap-port N` (prefill role, mooncake / nixl) binds the KV side channel, the Mooncake bootstrap
 * server (`GET /query`), on N instead of an ephemeral port (the log line names it): the router's
 * `--prefill URL N` or the admin API's `bootstrapPort` must name it, and with `--register` the heartbeat
 * carries it as `bootstrap_port`.
 *
 * `--max-loras N` serves LoRA adapters as vLLM with `--enable-lora --max-loras N`: a request naming any
 * model other than `--model` runs with that adapter, at most N adapters at once, a load costing
 * `--lora-load-ms`; `/metrics` carries `vllm:lora_requests_info`. `--lora-modules` lists adapters in
 * GET /v1/models (vLLM `--lora-modules`), `--aliases` more served names of the base model (vLLM
 * `--served-model-name m alias..`), and `--strict-models` answers a request for any other model with
 * vLLM's 404 ("The model `x` does not exist."). `--api-key KEY` wants `Authorization: Bearer KEY` on
 * every /v1 request, as `vllm serve --api-key`. `--scheduling-policy priority` orders the requests
 * waiting for a running slot by their body's `priority` (lower first), as vLLM's; with the default
 * `fcfs`, a request whose `priority` is not 0 gets vLLM's 400.
 *
 * `--kv-events ENDPOINT` publishes KV-cache events as vLLM does (PUB socket bound there, vLLM's default
 * `tcp://*:5557`; `--kv-events-replay` adds the replay ROUTER); the prefix cache then works on token
 * ids from `--tokenizer DIR` (a Hugging Face tokenizer.json + tokenizer_config.json directory, e.g.
 * test/fixtures/tokenizer; the router's `--tokenizer MODEL=DIR` must name the same files), or from
 * the simulator's 4-characters-per-token tokenizer without one.
 *
 * `--shared-block-pool` makes running requests and the prefix cache share the `--cache-blocks` pool,
 * as vLLM does (cached prefixes get the room running requests leave; a waiting request starts when its
 * blocks fit).
 */
import { HfTokenizer } from '../tokenize/hf-tokenizer.js';
import { parseArgs } from 'node:util';
import { pino } from 'pino';
import { KV_CONNECTORS, type KvConnector } from './kv-transfer.js';
import { startSimulator, type SimulatorOptions, type SimulatorRole } from './simulator.js';
import type { TimingModel } from './timing-model.js';

const USAGE = `usage: npx tsx src/sim/cli.ts --port 8001 --role regular|prefill|decode --model m [--register tcp://host:port]
  [--time-scale 1] [--host 127.0.0.1] [--kv-connector nixl|mooncake|moriio|p2pnccl] [--id name]
  [--max-tokens 16] [--zmq-address host:port] [--register-interval-ms 3000] [--transfer-mode READ|WRITE]
  [--cache-blocks 4096] [--shared-block-pool] [--max-running 64] [--overhead-ms 5]
  [--prefill-ms-per-token 0.05] [--itl-ms 10] [--itl-growth 0.02] [--kv-transfer-ms-per-token 0.005]
  [--prefill-lanes 0] [--max-num-batched-tokens 0] [--tokenizer DIR]
  [--kv-events tcp://*:5557] [--kv-events-replay tcp://*:5558]
  [--max-loras N] [--lora-load-ms 50] [--lora-modules a,b] [--aliases name,..] [--strict-models]
  [--api-key KEY] [--scheduling-policy fcfs|priority] [--bootstrap-port 8998]
  [--sglang-metrics]
(src/sim/cli.ts's header says what each does)
`;

const COMMAND_LINE = {
  options: {
    help: { type: 'boolean' },
    host: { type: 'string' },
    port: { type: 'string' },
    role: { type: 'string' },
    model: { type: 'string' },
    id: { type: 'string' },
    'kv-connector': { type: 'string' },
    register: { type: 'string' },
    'register-interval-ms': { type: 'string' },
    'zmq-address': { type: 'string' },
    'transfer-mode': { type: 'string' },
    'time-scale': { type: 'string' },
    'max-tokens': { type: 'string' },
    'cache-blocks': { type: 'string' },
    'shared-block-pool': { type: 'boolean' },
    'max-running': { type: 'string' },
    'overhead-ms': { type: 'string' },
    'prefill-ms-per-token': { type: 'string' },
    'itl-ms': { type: 'string' },
    'itl-growth': { type: 'string' },
    'kv-transfer-ms-per-token': { type: 'string' },
    'prefill-lanes': { type: 'string' },
    'max-num-batched-tokens': { type: 'string' },
    tokenizer: { type: 'string' },
    'kv-events': { type: 'string' },
    'kv-events-replay': { type: 'string' },
    'max-loras': { type: 'string' },
    'lora-load-ms': { type: 'string' },
    'lora-modules': { type: 'string' },
    aliases: { type: 'string' },
    'strict-models': { type: 'boolean' },
    'api-key': { type: 'string' },
    'scheduling-policy': { type: 'string' },
    'bootstrap-port': { type: 'string' },
    'sglang-metrics': { type: 'boolean' },
  },
  strict: true,
} as const;

/** The command line, with a bad flag reported as one line and the usage (not a stack trace). */
function parseCommandLine() {
  try {
    return parseArgs(COMMAND_LINE);
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}`);
    process.exit(2);
  }
}

const { values } = parseCommandLine();
if (values.help) {
  process.stdout.write(USAGE);
  process.exit(0);
}

function num(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${v}`);
  return n;
}

function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

const role = values.role ?? 'regular';
if (role !== 'regular' && role !== 'prefill' && role !== 'decode') throw new Error(`bad --role ${role}`);
const schedulingPolicy = values['scheduling-policy'] ?? 'fcfs';
if (schedulingPolicy !== 'fcfs' && schedulingPolicy !== 'priority') {
  throw new Error(`bad --scheduling-policy ${schedulingPolicy} (fcfs or priority)`);
}
const connector = values['kv-connector'] ?? 'nixl';
if (!(KV_CONNECTORS as readonly string[]).includes(connector))
  throw new Error(`bad --kv-connector ${connector}`);

const timing = defined<Partial<TimingModel>>({
  overheadMs: num('overhead-ms', values['overhead-ms']),
  prefillMsPerToken: num('prefill-ms-per-token', values['prefill-ms-per-token']),
  baseItlMs: num('itl-ms', values['itl-ms']),
  itlGrowthPerSeq: num('itl-growth', values['itl-growth']),
  maxRunningSeqs: num('max-running', values['max-running']),
  kvTransferMsPerToken: num('kv-transfer-ms-per-token', values['kv-transfer-ms-per-token']),
  prefillLanes: num('prefill-lanes', values['prefill-lanes']),
  maxNumBatchedTokens: num('max-num-batched-tokens', values['max-num-batched-tokens']),
});
const cacheBlocks = num('cache-blocks', values['cache-blocks']);
const bootstrapPort = num('bootstrap-port', values['bootstrap-port']);
const registerExtra = defined<Record<string, unknown>>({
  transfer_mode: values['transfer-mode'],
  bootstrap_port: role === 'prefill' ? bootstrapPort : undefined,
});

for (const flag of ['lora-load-ms', 'lora-modules'] as const) {
  if (values[flag] !== undefined && values['max-loras'] === undefined)
    throw new Error(`--${flag} needs --max-loras`);
}
const list = (v: string | undefined): string[] | undefined =>
  v === undefined
    ? undefined
    : v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');
if (values['kv-events-replay'] !== undefined && values['kv-events'] === undefined) {
  throw new Error('--kv-events-replay needs --kv-events');
}

const options: SimulatorOptions = defined<SimulatorOptions>({
  tokenizer: values.tokenizer === undefined ? undefined : HfTokenizer.load(values.tokenizer),
  kvEvents:
    values['kv-events'] === undefined
      ? undefined
      : defined({ endpoint: values['kv-events'], replayEndpoint: values['kv-events-replay'] }),
  host: values.host,
  port: num('port', values.port),
  role: role as SimulatorRole,
  model: values.model,
  aliases: list(values.aliases),
  strictModels: values['strict-models'],
  schedulingPolicy,
  apiKey: values['api-key'],
  sglangMetrics: values['sglang-metrics'] === true ? {} : undefined,
  id: values.id,
  kvConnector: connector as KvConnector,
  timeScale: num('time-scale', values['time-scale']),
  bootstrapPort,
  defaultMaxTokens: num('max-tokens', values['max-tokens']),
  timing,
  cache: cacheBlocks === undefined ? undefined : { capacityBlocks: cacheBlocks },
  sharedBlockPool: values['shared-block-pool'],
  lora:
    values['max-loras'] === undefined
      ? undefined
      : (defined({
          maxLoras: num('max-loras', values['max-loras']),
          loadMs: num('lora-load-ms', values['lora-load-ms']),
          modules: list(values['lora-modules']),
        }) as NonNullable<SimulatorOptions['lora']>),
  register:
    values.register === undefined
      ? undefined
      : (defined({
          zmq: values.register,
          intervalMs: num('register-interval-ms', values['register-interval-ms']),
          zmqAddress: values['zmq-address'],
          extra: Object.keys(registerExtra).length === 0 ? undefined : registerExtra,
        }) as NonNullable<SimulatorOptions['register']>),
});

const log = pino({ name: 'vllm-sim' });
const sim = await startSimulator(options);
log.info(
  {
    url: sim.url,
    id: sim.id,
    role: sim.role,
    model: sim.model,
    zmqAddress: sim.zmqAddress,
    bootstrapPort: sim.bootstrapPort,
    kvEvents: sim.kvEvents,
  },
  'simulator listening',
);

let stopping = false;
const shutdown = (signal: string): void => {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'simulator closing');
  sim.close().then(
    () => process.exit(0),
    (err: unknown) => {
      log.error({ err }, 'simulator close failed');
      process.exit(1);
    },
  );
};
process.on('SIGINT', () => shutdown('SIGINT'));
process.on('SIGTERM', () => shutdown('SIGTERM'));
