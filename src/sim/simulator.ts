/**
 * An in-process vLLM simulator: an OpenAI-compatible HTTP server (node:http) backed by a simulated
 * engine (engine.ts), prefix cache (prefix-cache.ts) and latency model (timing-model.ts), with vLLM's
 * P/D behaviour per KV connector (kv-transfer.ts), self-registration over ZMQ (zmq-registrar.ts),
 * fault injection (faults.ts), a "hold the stream until released" control (stream-hold.ts) and a record
 * of every generation request for tests.
 *
 * Endpoints: POST /v1/completions, POST /v1/chat/completions, POST /v1/responses (JSON or SSE; a Responses
 * request is a chat generation with another input and output shape, see responses-request.ts and
 * responses-format.ts), GET /v1/responses/{id} and POST /v1/responses/{id}/cancel (the in-memory
 * response store, responses-store.ts), POST /v1/messages (the Anthropic Messages API: a chat generation
 * with Anthropic's shapes, JSON or named SSE events; messages-api.ts), GET /health, GET /v1/models,
 * GET /load (`{"server_load": in-flight generation requests}`, what vLLM's load endpoint counts),
 * GET /metrics (vLLM names, see metrics-text.ts), POST /tokenize and POST /detokenize (vLLM's shapes, through
 * the pluggable tokenizer of sim-tokenizer.ts; see tokenize-api.ts), POST /v1/audio/transcriptions and
 * /v1/audio/translations (multipart forms, no engine time; audio-api.ts), POST /v1/embeddings (no
 * engine time; embeddings-api.ts), POST /sleep, POST /wake_up, GET /is_sleeping and POST /collective_rpc
 * reload_weights (vLLM's sleep mode; sleep-state.ts),
 * POST /pause, POST /resume and GET /is_paused (vLLM's pause of generation for RL weight updates;
 * pause-gate.ts), POST /reset_prefix_cache (and /reset_mm_cache, /reset_encoder_cache: no-ops),
 * POST /v1/load_lora_adapter and /v1/unload_lora_adapter (with `lora`; lora-adapters-api.ts).
 *
 * Request life cycle: body read -> record pushed (waitForRequests sees it) -> fault (if any) -> parse /
 * priority / P/D checks (400 on failure) -> optional injected delay -> engine: wait for a slot (by
 * `priority` first under `schedulingPolicy: 'priority'`), then at admission
 * the prefix-cache lookup fixes prompt/cached tokens and the TTFT, then tokens. A streaming response
 * sends its headers when the request enters the engine (as vLLM's StreamingResponse does) and one SSE
 * chunk per token per choice. `res.on('close')` is the single end path: it cancels the engine job and any
 * delay timer, marks an unfinished request 'aborted' (or 'reset' when the simulator cut the socket) and
 * decrements the in-flight count, so nothing outlives a request.
 *
 * Records cover generation requests only (not health checks or scrapes; the Responses store's id paths
 * go to `responseLookups` instead) and keep the latest
 * `maxRecords` (default 1000; each record holds the parsed body, so 8 simulators x 1000 x an 8 KB
 * prompt stay under ~100 MB) so long benchmarks do not grow without bound; `waitForRequests` counts
 * every request ever recorded.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Engine, type EngineJob, type SequenceSpec } from './engine.js';
import { PAUSE_MODES, PauseGate, type PauseMode } from './pause-gate.js';
import { isAudioPath, serveAudio } from './audio-api.js';
import { answerEmbeddings, EMBEDDINGS_PATH } from './embeddings-api.js';
import { answerLoraAdapter, isLoraAdapterPath } from './lora-adapters-api.js';
import { readBody } from './read-body.js';
import { FaultQueue, type Fault, type FaultOptions } from './faults.js';
import { HoldQueue, type HoldOptions, type OutputGate, type StreamHold } from './stream-hold.js';
import {
  checkDecodeRequest,
  prefillResponseParams,
  type KvConnector,
  type P2pAddresses,
} from './kv-transfer.js';
import { metricsText, sglangMetricsText, type SglangMetricsShape } from './metrics-text.js';
import { LoraSlots } from './lora-slots.js';
import {
  completionBody,
  errorBody,
  outputText,
  responseId,
  SSE_DONE,
  StreamFormatter,
  usageOf,
  type ResponseIdentity,
} from './openai-format.js';
import {
  newMessageItemId,
  parseResponsesRequest,
  responsesGeneration,
  type ResponsesTurn,
} from './responses-request.js';
import {
  completedResponse,
  responsesUsage,
  ResponsesStreamFormatter,
  type ResponseHead,
} from './responses-format.js';
import { ResponseStore } from './responses-store.js';
import {
  MESSAGES_PATH,
  MessagesStreamFormatter,
  messagesBody,
  messagesErrorBody,
  parseMessagesRequest,
} from './messages-api.js';
import { KvBlockUsage, type KvHold } from './kv-usage.js';
import { PrefixCache, type PrefixCacheOptions } from './prefix-cache.js';
import {
  choiceCount,
  parseGenerationRequest,
  type GenerationKind,
  type GenerationRequest,
  type ParseResult,
} from './sim-request.js';
import { CharTokenizer, type SimTokenizer } from './sim-tokenizer.js';
import {
  prefillComputeMs,
  prefillTtftMs,
  resolveTimingModel,
  transferTtftMs,
  type TimingModel,
} from './timing-model.js';
import { isTokenizationPath, serveTokenization } from './tokenize-api.js';
import { ZmqRegistrar } from './zmq-registrar.js';
import { KvEventPublisher, type KvEventPublisherOptions, type SimKvEvent } from './kv-event-publisher.js';
import { tokenizeBody, type BodyTokenizer } from '../tokenize/request-tokens.js';
import type { CacheChanges } from './prefix-cache.js';
import { KvSideChannel } from './kv-side-channel.js';
import { fetchRemoteKv } from './remote-kv-check.js';
import { laxBool } from '../request/lax-bool.js';
import { SleepState } from './sleep-state.js';

export type { Fault, FaultOptions } from './faults.js';
export type { HoldOptions, StreamHold } from './stream-hold.js';
export type { KvConnector } from './kv-transfer.js';
export type { SimTokenizer } from './sim-tokenizer.js';
export type SimulatorRole = 'regular' | 'prefill' | 'decode';

let lastProcessStart = 0;

/**
 * A start time for a new simulator: the wall clock in seconds, strictly later than the last one
 * given (two simulators started in the same millisecond are two processes).
 */
function nextProcessStart(): number {
  lastProcessStart = Math.max(Date.now() / 1000, lastProcessStart + 0.001);
  return lastProcessStart;
}

export interface SimulatorOptions {
  /** Default '127.0.0.1'. */
  host?: string;
  /** Default 0 (ephemeral). */
  port?: number;
  /** Default 'regular'. */
  role?: SimulatorRole;
  /** Served model name (GET /v1/models, metrics label, responses when the request names none). */
  model?: string;
  /**
   * More served names of the base model after `model` (vLLM `--served-model-name model alias..`):
   * listed by GET /v1/models, never taken for an adapter; the metrics label stays `model`.
   */
  aliases?: string[];
  /**
   * Answer a request for a model it does not serve with vLLM's 404 NotFoundError ("The model `x`
   * does not exist."): served are `model`, `aliases` and, with LoRA, `lora.modules`. Default false:
   * any name is served (as the base model, or with LoRA on as an adapter).
   */
  strictModels?: boolean;
  /**
   * vLLM's `--scheduling-policy`. `priority`: requests wait for a running slot by their body's
   * `priority` (lower first), then by arrival (run-queue.ts). `fcfs` (default): first come, first
   * served, and a request with a `priority` other than 0 gets vLLM's 400 ("Got priority N but
   * Priority scheduling is not enabled.").
   */
  schedulingPolicy?: SchedulingPolicy;
  /**
   * As `vllm serve --api-key`: every request under /v1 needs `Authorization: Bearer <key>`, else a 401
   * `{"error":"Unauthorized"}` (/health, /metrics and /tokenize stay open, as in vLLM).
   */
  apiKey?: string;
  /**
   * Serve `GET /metrics`. Default true. false: a 404, as from a server that exports no Prometheus
   * metrics (SGLang without --enable-metrics, a proxy in front of vLLM that forwards only /v1).
   */
  metrics?: boolean;
  /**
   * Write `/metrics` as SGLang does (`sglang:num_queue_reqs`, `sglang:num_running_reqs`,
   * `sglang:token_usage`, ... labelled by scheduler rank: metrics-text.ts `sglangMetricsText`) instead of
   * vLLM's names. Default: vLLM's page.
   */
  sglangMetrics?: SglangMetricsShape;
  /** Output tokens when the request has no max_tokens. Default 16. */
  defaultMaxTokens?: number;
  /** Multiplies every simulated delay. Default 1; 0 = no delays at all. */
  timeScale?: number;
  timing?: Partial<TimingModel>;
  cache?: Partial<PrefixCacheOptions>;
  /**
   * Running requests and the prefix cache share one pool of `cache.capacityBlocks` blocks, as in vLLM
   * (prefix-cache.ts): cached prefixes get the room running requests leave, and a waiting request
   * starts only when its blocks fit (first come, first served). Default false: the prefix cache is a
   * fixed LRU of that many blocks beside the running requests, and admission counts slots only.
   */
  sharedBlockPool?: boolean;
  /**
   * Serve LoRA adapters as vLLM with `--enable-lora --max-loras N` (lora-slots.ts): a request whose
   * `model` is not the served model names an adapter; at most `maxLoras` adapters run at once (the
   * others' requests wait, reported as waiting), an adapter not loaded costs `loadMs` (default 50,
   * scaled by timeScale) before its prefill, and `/metrics` carries `vllm:lora_requests_info` as vLLM
   * writes it (one series per combination of adapters seen, valued with the time it was last current).
   * `modules`: adapters GET /v1/models lists (vLLM `--lora-modules`), with `model` as their parent.
   * Default: LoRA off (every model name is served as the base model).
   */
  lora?: { maxLoras: number; loadMs?: number; modules?: string[] };
  /** P/D behaviour. Default 'nixl'. */
  kvConnector?: KvConnector;
  /**
   * Decode role: started as vLLM's `kv_both` instance (NIXL's usual role), which prefills a request
   * that carries no `kv_transfer_params` itself and serves it whole. Default false: such a request is
   * a routing mistake and gets a 400 (`decode worker requires kv_transfer_params`).
   */
  kvBoth?: boolean;
  /** ZMQ self-registration (prefill/decode roles only; a regular worker never registers). */
  register?: { zmq: string; intervalMs?: number; zmqAddress?: string; extra?: Record<string, unknown> };
  /** Name used in records, logs and NIXL `remote_engine_id`. Default `<role>-<host:port>`. */
  id?: string;
  /**
   * Prefill role, mooncake / nixl: port of the KV side channel (Mooncake bootstrap server `/query`,
   * NIXL side channel; kv-side-channel.ts). Default 0 (ephemeral).
   */
  bootstrapPort?: number;
  /** Prefill role: data-parallel ranks (engine ids; `X-data-parallel-rank` is checked). Default 1. */
  dpSize?: number;
  /**
   * Most recent records kept (each holds the parsed body). Default 1000; 0 keeps none (benchmarks).
   * waitForRequests counts every recorded request regardless.
   */
  maxRecords?: number;
  /**
   * Responses kept for `previous_response_id` and GET /v1/responses/{id} (responses-store.ts; the
   * oldest is dropped beyond it). Default 10,000; 0 stores none.
   */
  maxStoredResponses?: number;
  /**
   * What POST /tokenize and /detokenize use. Default: CharTokenizer with the prefix cache's
   * charsPerToken (ids consistent with the simulator's token counts).
   */
  tokenizer?: SimTokenizer;
  /**
   * `max_model_len` (`--max-model-len`), reported by /tokenize and on the /v1/models cards. When set,
   * a generation request whose prompt (counted by `tokenizer`) plus its max_tokens exceeds it gets
   * vLLM's 400. Default 131072, not enforced.
   */
  maxModelLen?: number;
  /**
   * Publish KV-cache events as vLLM does (kv-event-publisher.ts): the prefix cache then works on the
   * prompt's token ids from `tokenizer` (chat template included), stored blocks are published as
   * BlockStored, evictions as BlockRemoved, and AllBlocksCleared at start and on resetPrefixCache().
   */
  kvEvents?: KvEventPublisherOptions;
}

export type SchedulingPolicy = 'fcfs' | 'priority';

/**
 * The body's `priority` as vLLM takes it (an integer, default 0), or the 400 message: not an integer,
 * or not 0 while the policy is `fcfs`.
 */
export function requestPriority(body: unknown, policy: SchedulingPolicy): number | { error: string } {
  const raw = isObj(body) ? body.priority : undefined;
  if (raw === undefined || raw === null) return 0;
  if (typeof raw !== 'number' || !Number.isSafeInteger(raw)) return { error: 'priority must be an integer' };
  if (raw !== 0 && policy !== 'priority') {
    return { error: `Got priority ${raw} but Priority scheduling is not enabled.` };
  }
  return raw;
}

export interface RequestRecord {
  requestId: string;
  path: string;
  startMs: number;
  firstByteMs?: number;
  /** The order of this first byte among the simulator's (1, 2, ...): first bytes in one ms stay ordered. */
  firstByteSeq?: number;
  endMs?: number;
  outcome?: 'ok' | 'error' | 'aborted' | 'reset';
  status?: number;
  promptTokens: number;
  cachedTokens: number;
  completionTokens: number;
  stream: boolean;
  body: unknown;
  headers: Record<string, string>;
  /** p2pnccl: peer addresses parsed from the request id. */
  p2p?: P2pAddresses;
  /** Prefill role: the DP rank that served it (`X-data-parallel-rank`, default 0). */
  dpRank?: number;
  /** POST /v1/responses: the response id (the body's `request_id`, else `resp_<hex>`), once parsed. */
  responseId?: string;
}

/** One request to the Responses store's id paths (GET /v1/responses/{id}, POST .../cancel). */
export interface ResponseLookupRecord {
  method: string;
  path: string;
  /** The id in the path. */
  responseId: string;
  /** 200 (found), 404 (not in this simulator's store), 400 (cancel of a finished response), 405. */
  status: number;
  atMs: number;
}

export interface Simulator {
  readonly id: string;
  readonly url: string;
  readonly hostPort: string;
  readonly port: number;
  readonly role: SimulatorRole;
  readonly model: string;
  /** The registered ZMQ address (also the DEALER routing id); undefined when not registering. */
  readonly zmqAddress: string | undefined;
  /** Prefill role, mooncake / nixl: the KV side channel's port (Mooncake bootstrap port). */
  readonly bootstrapPort: number | undefined;
  /** Prefill role, mooncake / nixl: engine id per DP rank (fresh per start). */
  readonly engineIds: readonly string[];
  readonly records: readonly RequestRecord[];
  /**
   * Requests to GET /v1/responses/{id} and POST /v1/responses/{id}/cancel, the latest `maxRecords`
   * (they are not generation requests, so not in `records`): which simulator a lookup reached.
   */
  readonly responseLookups: readonly ResponseLookupRecord[];
  /** Whether this simulator's response store holds `id` (a completed response stored with `store`). */
  hasResponse(id: string): boolean;
  readonly cache: PrefixCache;
  readonly tokenizer: SimTokenizer;
  /** LoRA adapters loaded so far (0 without `lora`): what keeping an adapter's requests together saves. */
  readonly loraLoads: number;
  /** The KV-event publisher's bound endpoints, when `kvEvents` is set. */
  readonly kvEvents: { endpoint: string; replayEndpoint: string | undefined } | undefined;
  /** Empties the prefix cache (vLLM's /reset_prefix_cache), publishing AllBlocksCleared. */
  resetPrefixCache(): Promise<void>;
  /**
   * vLLM's sleep mode (`POST /sleep?level=N`, `POST /wake_up`, `GET /is_sleeping`, the
   * `vllm:engine_sleep_state` gauge): sleep empties the prefix cache (AllBlocksCleared) and, while
   * asleep, a generation request gets a 503 and is counted in `requestsWhileAsleep` (vLLM's engine
   * has no such guard on most releases: the request crashes it). Per memory tag (sleep-state.ts):
   * `wakeUp(['weights'])` leaves the KV cache asleep; after level 2 the woken weights hold no model
   * until `POST /collective_rpc {"method": "reload_weights"}` (`weightsDiscarded`).
   */
  sleep(level?: 1 | 2): Promise<void>;
  wakeUp(tags?: readonly string[]): void;
  /**
   * vLLM's pause of generation (`POST /pause`, `POST /resume`, `GET /is_paused`; pause-gate.ts): new
   * generation requests wait for resume(), counted waiting; `abort` cuts the requests running,
   * `wait` resolves once they have ended, `keep` lets them run; the prefix cache is emptied unless
   * `keep` or `clearCache` false.
   */
  pause(mode?: PauseMode, clearCache?: boolean): Promise<void>;
  resume(): void;
  readonly paused: boolean;
  /** Generation requests that arrived while paused (each waited for resume()). */
  readonly requestsWhilePaused: number;
  /** 0 awake, else the sleep level. */
  readonly sleepLevel: number;
  /** A level-2 sleep discarded the weights and they were not reloaded: the engine generates garbage. */
  readonly weightsDiscarded: boolean;
  /** Generation requests answered while `weightsDiscarded` (with garbage, as vLLM would). */
  readonly requestsWithoutWeights: number;
  /** Generation requests that arrived while asleep. */
  readonly requestsWhileAsleep: number;
  /** Its `process_start_time_seconds`: later than that of every simulator started before it. */
  readonly processStartSeconds: number;
  /** `GET /metrics` pages served. */
  readonly metricsReads: number;
  /** Generation requests whose response has not ended. */
  inFlight(): number;
  /** Engine counters (vLLM's num_requests_running / num_requests_waiting). */
  running(): number;
  waiting(): number;
  /** Every duration `scale` times from now on (a co-tenant job on its GPU starts or ends). */
  setTimeScale(scale: number): void;
  injectFault(fault: Fault, opts?: FaultOptions): void;
  clearFaults(): void;
  /**
   * Holds the next matching generation response(s) at a known point until `release()` (see
   * stream-hold.ts): tests synchronise on `reached()` instead of on token pacing.
   */
  hold(opts?: HoldOptions): StreamHold;
  /** Resolves when at least `n` generation requests have been recorded (ever). */
  waitForRequests(n: number): Promise<void>;
  /** Resolves when no generation request is in flight. */
  waitForIdle(): Promise<void>;
  findRecord(requestId: string): RequestRecord | undefined;
  stopRegistering(): void;
  startRegistering(): void;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 64 * 1024 * 1024;
/** vLLM's control posts the simulator answers (answerControl). */
const CONTROL_PATHS: ReadonlySet<string> = new Set([
  '/reset_prefix_cache',
  '/reset_mm_cache',
  '/reset_encoder_cache',
  '/pause',
  '/resume',
]);

interface Ctx {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly path: string;
  /** Arrival time (epoch ms), before the body is read. */
  readonly startMs: number;
  record?: RequestRecord;
  job?: EngineJob;
  /** KV blocks held from admission to the end of the request (kv_cache_usage_perc). */
  kv?: KvHold;
  delayTimer?: NodeJS.Timeout;
  ended: boolean;
  resetting: boolean;
  /** Streaming: SSE chunks written so far, and the chunk count after which to cut the socket. */
  chunks: number;
  resetAfter: number;
  /** A test hold on this response's output (stream-hold.ts). */
  gate?: OutputGate;
  /** Prefill role, mooncake: the transfer this leg produces (ended in onClose). */
  transferId?: string;
  /** Decode role: aborts the remote KV fetch when the request goes away. */
  kvFetch?: AbortController;
  /** Drops the request from the pause gate while it is held there (POST /pause). */
  unhold?: () => void;
}

/** A request's prompts as the prefix cache keys them (Simulator.cacheKeys). */
interface CacheKeys {
  /** Token mode (KV events): per prompt, its ids, cache salt and block hashes. */
  readonly tokens?: ReadonlyArray<{
    ids: ArrayLike<number>;
    salt: string | undefined;
    /** The LoRA adapter (BlockStored's lora_name); undefined for the base model. */
    loraName: string | undefined;
    hashes: number[];
  }>;
  /** Text mode: the prompts. */
  readonly texts?: readonly string[];
  /** Per prompt: its block hashes and prompt tokens. */
  readonly prompts: ReadonlyArray<{ hashes: number[]; tokens: number }>;
}

interface Waiter {
  readonly n: number;
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
}

class SimulatorServer implements Simulator {
  readonly host: string;
  readonly role: SimulatorRole;
  readonly model: string;
  /** Every served base name: `model`, then the aliases. */
  private readonly baseNames: readonly string[];
  readonly cache: PrefixCache;
  readonly kvUsage: KvBlockUsage;
  readonly tokenizer: SimTokenizer;
  readonly records: RequestRecord[] = [];
  readonly responseLookups: ResponseLookupRecord[] = [];
  id = '';
  port = 0;
  zmqAddress: string | undefined;

  private readonly server: Server;
  private readonly engine: Engine;
  private readonly loraSlots: LoraSlots | undefined;
  /** vllm:lora_requests_info's series, by their labels (running|waiting): the time each was last current. */
  private readonly loraSeries = new Map<string, { running: string; waiting: string; at: number }>();
  private readonly timing: Readonly<TimingModel>;
  private timeScale: number;
  private readonly defaultMaxTokens: number;
  private readonly connector: KvConnector;
  private readonly maxRecords: number;
  private readonly maxModelLen: number;
  private readonly faults = new FaultQueue();
  private readonly responses: ResponseStore;
  private readonly holds = new HoldQueue();
  private readonly sideTimers = new Set<NodeJS.Timeout>();
  private registrar: ZmqRegistrar | undefined;
  private kvPublisher: KvEventPublisher | undefined;
  kvEvents: { endpoint: string; replayEndpoint: string | undefined } | undefined;
  private side: KvSideChannel | undefined;
  private inFlightCount = 0;
  /** The generation requests in flight (a pause with mode=abort cuts them). */
  private readonly live = new Set<Ctx>();
  private readonly pauseGate = new PauseGate();
  /** POST /pause?mode=wait answers once the requests that were running have ended. */
  private pauseWaiters: Array<() => void> = [];
  private recordedTotal = 0;
  /** First bytes written so far (RequestRecord.firstByteSeq). */
  private firstBytes = 0;
  private requestWaiters: Waiter[] = [];
  private idleWaiters: Waiter[] = [];
  private promptTokensTotal = 0;
  private generationTokensTotal = 0;
  private nextBlockId = 0;
  private closing: Promise<void> | undefined;
  private readonly sleepState = new SleepState();
  /** This "process"'s start (`process_start_time_seconds`): later than every simulator's before it. */
  readonly processStartSeconds = nextProcessStart();
  /** `GET /metrics` pages served. */
  metricsReads = 0;
  requestsWhileAsleep = 0;
  requestsWithoutWeights = 0;
  requestsWhilePaused = 0;
  /** LoRA adapters served: `lora.modules`, then those loaded and unloaded at run time. */
  private readonly adapters: Set<string>;

  constructor(private readonly opts: SimulatorOptions) {
    this.host = opts.host ?? '127.0.0.1';
    this.role = opts.role ?? 'regular';
    this.model = opts.model ?? 'sim-model';
    this.baseNames = [this.model, ...(opts.aliases ?? []).filter((a) => a !== this.model)];
    this.defaultMaxTokens = opts.defaultMaxTokens ?? 16;
    this.timeScale = opts.timeScale ?? 1;
    this.connector = opts.kvConnector ?? 'nixl';
    this.maxRecords = opts.maxRecords ?? 1000;
    if (!Number.isInteger(this.defaultMaxTokens) || this.defaultMaxTokens < 1) {
      throw new RangeError('defaultMaxTokens must be a positive integer');
    }
    if (!(this.timeScale >= 0) || !Number.isFinite(this.timeScale))
      throw new RangeError('timeScale must be >= 0');
    if (!Number.isInteger(this.maxRecords) || this.maxRecords < 0) {
      throw new RangeError('maxRecords must be an integer >= 0');
    }
    this.adapters = new Set(opts.lora?.modules ?? []);
    this.responses = new ResponseStore(opts.maxStoredResponses);
    this.timing = resolveTimingModel(opts.timing);
    this.cache = new PrefixCache(opts.cache);
    this.kvUsage = new KvBlockUsage(this.cache.options.blockTokens, this.cache.options.capacityBlocks);
    if (opts.sharedBlockPool === true) this.cache.sharePool(this.kvUsage);
    this.tokenizer = opts.tokenizer ?? new CharTokenizer(this.cache.options.charsPerToken);
    this.maxModelLen = opts.maxModelLen ?? 131_072;
    if (opts.lora !== undefined) {
      const loadMs = opts.lora.loadMs ?? 50;
      if (!(loadMs >= 0) || !Number.isFinite(loadMs)) throw new RangeError('lora.loadMs must be >= 0');
      this.loraSlots = new LoraSlots(opts.lora.maxLoras);
      this.engine = new Engine(this.timing, this.timeScale, {
        slots: this.loraSlots,
        loadMs: loadMs * this.timeScale,
      });
    } else this.engine = new Engine(this.timing, this.timeScale);
    this.server = createServer({ keepAliveTimeout: 30_000 }, this.onRequest);
  }

  private markFirstByte(record: RequestRecord, atMs: number): void {
    record.firstByteMs = atMs;
    record.firstByteSeq = ++this.firstBytes;
  }

  /**
   * Runs every duration `scale` times from now on (steps and requests that start after the call), as a
   * GPU that a co-tenant job starts or stops sharing would; the LoRA load time keeps its start value.
   */
  setTimeScale(scale: number): void {
    if (!(scale >= 0) || !Number.isFinite(scale)) throw new RangeError('timeScale must be >= 0');
    this.timeScale = scale;
    this.engine.setTimeScale(scale);
  }

  get loraLoads(): number {
    return this.loraSlots?.loads ?? 0;
  }

  /** The current adapters as vLLM labels them, stamped now; older combinations keep their stamps. */
  private loraInfo():
    { maxLora: number; series: { running: string; waiting: string; at: number }[] } | undefined {
    const slots = this.loraSlots;
    if (slots === undefined) return undefined;
    const running = slots.runningAdapters().join(',');
    const waiting = this.engine.waitingAdapters().join(',');
    const key = `${running}|${waiting}`;
    const at = (performance.timeOrigin + performance.now()) / 1000;
    // As prometheus_client: a combination seen before keeps its place on the page (creation order)
    // and only its value moves, so the current one is not necessarily the last line.
    const seen = this.loraSeries.get(key);
    if (seen !== undefined) seen.at = at;
    else this.loraSeries.set(key, { running, waiting, at });
    // vLLM keeps every combination; keep the page bounded by dropping the longest-unseen one.
    while (this.loraSeries.size > 64) {
      let oldest: string | undefined;
      let oldestAt = Infinity;
      for (const [k, v] of this.loraSeries) if (v.at < oldestAt) [oldest, oldestAt] = [k, v.at];
      this.loraSeries.delete(oldest!);
    }
    return { maxLora: slots.maxLoras, series: [...this.loraSeries.values()] };
  }

  get bootstrapPort(): number | undefined {
    return this.side?.port;
  }

  get engineIds(): readonly string[] {
    return this.side?.engineIds ?? [];
  }

  get hostPort(): string {
    return `${this.host}:${this.port}`;
  }

  get url(): string {
    return `http://${this.hostPort}`;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(this.opts.port ?? 0, this.host, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
    this.port = (this.server.address() as AddressInfo).port;
    this.id = this.opts.id ?? `${this.role}-${this.hostPort}`;
    if (this.opts.kvEvents !== undefined) {
      const publisher = new KvEventPublisher(this.opts.kvEvents);
      this.kvPublisher = publisher;
      this.kvEvents = await publisher.start();
      // A fresh engine starts empty: subscribers that knew a previous process drop its blocks.
      void publisher.publish([{ type: 'cleared' }]);
    }
    if (this.role === 'prefill' && (this.connector === 'mooncake' || this.connector === 'nixl')) {
      this.side = new KvSideChannel({
        host: this.host,
        port: this.opts.bootstrapPort,
        dpSize: this.opts.dpSize,
      });
      await this.side.listen();
    }
    const reg = this.opts.register;
    if (reg && this.role !== 'regular') {
      this.zmqAddress = reg.zmqAddress ?? `${this.host}:${(this.port + 10_000) % 65_536}`;
      this.registrar = new ZmqRegistrar({
        endpoint: reg.zmq,
        type: this.role === 'prefill' ? 'P' : 'D',
        httpAddress: this.hostPort,
        zmqAddress: this.zmqAddress,
        intervalMs: reg.intervalMs ?? 3000,
        extra: reg.extra,
      });
      this.registrar.start();
    }
  }

  inFlight(): number {
    return this.inFlightCount;
  }

  running(): number {
    return this.engine.running;
  }

  waiting(): number {
    return this.engine.waiting + this.pauseGate.heldCount;
  }

  injectFault(fault: Fault, opts?: FaultOptions): void {
    this.faults.add(fault, opts);
  }

  clearFaults(): void {
    this.faults.clear();
  }

  hold(opts?: HoldOptions): StreamHold {
    return this.holds.add(opts);
  }

  waitForRequests(n: number): Promise<void> {
    if (this.recordedTotal >= n) return Promise.resolve();
    if (this.closing) return Promise.reject(new Error('simulator closed'));
    return new Promise((resolve, reject) => this.requestWaiters.push({ n, resolve, reject }));
  }

  waitForIdle(): Promise<void> {
    if (this.inFlightCount === 0) return Promise.resolve();
    return new Promise((resolve, reject) => this.idleWaiters.push({ n: 0, resolve, reject }));
  }

  get paused(): boolean {
    return this.pauseGate.paused;
  }

  async pause(mode: PauseMode = 'abort', clearCache = true): Promise<void> {
    this.pauseGate.pause();
    if (mode === 'abort') {
      for (const ctx of [...this.live]) if (ctx.job !== undefined && !ctx.ended) this.reset(ctx);
    }
    if (mode === 'wait') {
      await new Promise<void>((resolve) => {
        this.pauseWaiters.push(resolve);
        this.settlePauseWaiters();
      });
    }
    // vLLM empties the prefix cache once the engine is drained, except when it keeps the requests.
    if (clearCache && mode !== 'keep' && this.closing === undefined) await this.resetPrefixCache();
  }

  resume(): void {
    this.pauseGate.resume();
  }

  /** Answers the waiting pauses once nothing but held requests is in flight. */
  private settlePauseWaiters(): void {
    if (this.pauseWaiters.length === 0 || this.inFlightCount > this.pauseGate.heldCount) return;
    const waiters = this.pauseWaiters;
    this.pauseWaiters = [];
    for (const resolve of waiters) resolve();
  }

  hasResponse(id: string): boolean {
    return this.responses.has(id);
  }

  findRecord(requestId: string): RequestRecord | undefined {
    for (let i = this.records.length - 1; i >= 0; i--) {
      if (this.records[i]!.requestId === requestId) return this.records[i];
    }
    return undefined;
  }

  stopRegistering(): void {
    this.registrar?.stop();
  }

  startRegistering(): void {
    if (!this.closing) this.registrar?.start();
  }

  async resetPrefixCache(): Promise<void> {
    this.cache.clear();
    await this.kvPublisher?.publish([{ type: 'cleared' }]);
  }

  get sleepLevel(): number {
    return this.sleepState.level;
  }

  get weightsDiscarded(): boolean {
    return this.sleepState.weightsDiscarded;
  }

  async sleep(level: 1 | 2 = 1): Promise<void> {
    // vLLM's AsyncLLM.sleep resets the prefix cache before the engine sleeps.
    await this.resetPrefixCache();
    this.sleepState.sleep(level);
  }

  wakeUp(tags?: readonly string[]): void {
    this.sleepState.wakeUp(tags);
  }

  /**
   * The request's prompts as the prefix cache keys them, computed once (a shared-pool admission check
   * and the lookup both need them): the token ids of each prompt (a batched prompt's each on its own,
   * as vLLM runs them) when KV events are on and the request tokenizes, else the text of each prompt.
   */
  private cacheKeys(body: unknown, prompts: readonly string[], adapter: string | undefined): CacheKeys {
    const publisher = this.kvPublisher;
    // vLLM puts a LoRA request's adapter name in every block's extra keys (kv_cache_utils.py
    // _gen_lora_extra_hash_keys): no block is shared across adapters or with the base model.
    const loraKey = adapter === undefined ? '' : `\u0001${adapter}\u0001`;
    if (publisher !== undefined && isObj(body)) {
      const r = tokenizeBody(this.tokenizer as unknown as BodyTokenizer, body);
      const seqs = r.ok ? (r.batch ?? [r.ids]) : [];
      if (seqs.length === prompts.length) {
        const salt =
          typeof body.cache_salt === 'string' && body.cache_salt.length > 0 ? body.cache_salt : undefined;
        const seed = adapter === undefined ? salt : `${loraKey}${salt ?? ''}`;
        const tokens = seqs.map((ids) => ({
          ids,
          salt,
          loraName: adapter,
          hashes: this.cache.hashTokens(ids, seed),
        }));
        return {
          tokens,
          prompts: tokens.map((t) => ({ hashes: t.hashes, tokens: Math.max(1, t.ids.length) })),
        };
      }
    }
    // vLLM salts a request's first block with its cache_salt, so no block is shared across salts: the
    // text-keyed cache gets the same by opening the salted prompts with the salt.
    const salt = isObj(body) && typeof body.cache_salt === 'string' ? body.cache_salt : '';
    const open = `${loraKey}${salt === '' ? '' : `\u0000${salt}\u0000`}`;
    const texts = open === '' ? prompts : prompts.map((p) => `${open}${p}`);
    return {
      texts,
      prompts: texts.map((p) => ({ hashes: this.cache.hashText(p), tokens: this.cache.tokensOf(p) })),
    };
  }

  /**
   * Shared block pool: whether a request with these keys and `outputTokens` to generate can allocate
   * its blocks now. It needs a block for every prompt block except the leading ones running requests
   * already hold (shared, as vLLM shares a cached prefix's physical blocks), plus its output's blocks;
   * cached blocks nobody holds count as free (vLLM evicts them to allocate).
   */
  private fitsPool(keys: CacheKeys, outputTokens: number): boolean {
    const bt = this.cache.options.blockTokens;
    let need = Math.ceil(outputTokens / bt);
    for (const p of keys.prompts) {
      let shared = 0;
      while (shared < p.hashes.length && this.kvUsage.isHeld(p.hashes[shared]!)) shared++;
      need += Math.ceil(p.tokens / bt) - shared;
    }
    return need <= this.cache.options.capacityBlocks - this.kvUsage.usedBlocks();
  }

  /** Token-mode lookup (KV events on): inserts the prompt's blocks and publishes what changed. */
  private lookupTokens(
    publisher: KvEventPublisher,
    t: NonNullable<CacheKeys['tokens']>[number],
    held: number[],
  ): { promptTokens: number; cachedTokens: number } {
    const changes: CacheChanges = { stored: [], removed: [] };
    const lookup = this.cache.lookupAndInsertTokens(t.ids, held, changes, t.salt, t.hashes);
    const events: SimKvEvent[] = [];
    const blockSize = this.cache.options.blockTokens;
    if (changes.stored.length > 0) {
      // One BlockStored per run of consecutive new blocks (vLLM stores a request's new blocks together).
      let run: typeof changes.stored = [];
      const flush = (): void => {
        if (run.length === 0) return;
        const salted = run.some((b) => b.extraKeys !== undefined);
        events.push({
          type: 'stored',
          hashes: run.map((b) => BigInt(b.hash)),
          parent: run[0]!.parent === undefined ? undefined : BigInt(run[0]!.parent),
          tokens: run.flatMap((b) => b.tokens),
          blockSize,
          ...(t.loraName !== undefined ? { loraName: t.loraName } : {}),
          ...(salted ? { extraKeys: run.map((b) => b.extraKeys ?? null) } : {}),
        });
        run = [];
      };
      for (const b of changes.stored) {
        if (run.length > 0 && b.parent !== run[run.length - 1]!.hash) flush();
        run.push(b);
      }
      flush();
    }
    if (changes.removed.length > 0)
      events.push({ type: 'removed', hashes: changes.removed.map((h) => BigInt(h)) });
    if (events.length > 0) void publisher.publish(events);
    return lookup;
  }

  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.registrar?.close();
      void this.side?.close();
      this.engine.close();
      this.pauseGate.clear();
      for (const resolve of this.pauseWaiters) resolve();
      this.pauseWaiters = [];
      for (const t of this.sideTimers) clearTimeout(t);
      this.sideTimers.clear();
      const err = new Error('simulator closed');
      this.holds.close(err);
      for (const w of this.requestWaiters) w.reject(err);
      this.requestWaiters = [];
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    }).then(() => {
      // Sockets are destroyed; every response's 'close' has fired, so in-flight is 0 now.
      for (const w of this.idleWaiters) w.resolve();
      this.idleWaiters = [];
      return this.kvPublisher?.close();
    });
    return this.closing;
  }

  // ---- HTTP dispatch ----

  private readonly onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const key = this.opts.apiKey;
    if (key !== undefined && path.startsWith('/v1') && req.headers.authorization !== `Bearer ${key}`) {
      return sendJson(res, 401, JSON.stringify({ error: 'Unauthorized' }));
    }
    if (
      path === '/v1/completions' ||
      path === '/v1/chat/completions' ||
      path === '/v1/responses' ||
      path === MESSAGES_PATH
    ) {
      if (req.method === 'POST') return this.handleGeneration(req, res, path);
      return this.sendError(res, 405, `method ${req.method ?? ''} not allowed`);
    }
    const fault = this.faults.take(path);
    if (fault) return this.applySimpleFault(req, res, path, fault);
    this.answerSimple(req, res, path);
  };

  private answerSimple(req: IncomingMessage, res: ServerResponse, path: string): void {
    if (path.startsWith(RESPONSE_PATH_PREFIX)) return this.answerResponseLookup(req, res, path);
    if (req.method === 'POST' && isAudioPath(path)) {
      const strict = this.opts.strictModels === true;
      return serveAudio(req, res, this.model, strict ? (m) => this.serves(m) : undefined, MAX_BODY_BYTES);
    }
    if (req.method === 'POST' && isTokenizationPath(path)) {
      return serveTokenization(req, res, path, this.tokenizer, this.maxModelLen, MAX_BODY_BYTES);
    }
    if (isTokenizationPath(path)) return this.sendError(res, 405, `method ${req.method ?? ''} not allowed`);
    if (path === '/sleep' || path === '/wake_up') return this.answerSleep(req, res, path);
    if (path === '/collective_rpc') return this.answerCollectiveRpc(req, res);
    if (req.method === 'POST' && CONTROL_PATHS.has(path)) return this.answerControl(req, res, path);
    if (req.method === 'POST' && path === EMBEDDINGS_PATH) return this.serveEmbeddings(req, res, path);
    if (req.method === 'POST' && isLoraAdapterPath(path) && this.opts.lora !== undefined) {
      return readBody(req, MAX_BODY_BYTES, (raw) => {
        const a = raw === undefined ? undefined : answerLoraAdapter(path, raw, this.adapters);
        if (a === undefined) return sendJson(res, 413, errorBody(413, 'request body too large'));
        if (res.destroyed) return;
        res.writeHead(a.status, {
          'content-type': a.contentType,
          'content-length': Buffer.byteLength(a.body),
        });
        res.end(a.body);
      });
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      return this.sendError(res, path === '/health' ? 405 : 404, `no route ${req.method ?? ''} ${path}`);
    }
    switch (path) {
      case '/health':
        res.writeHead(200, { 'content-length': 0 }).end();
        return;
      case '/load':
        return sendJson(res, 200, JSON.stringify({ server_load: this.inFlightCount }));
      case '/is_sleeping':
        return sendJson(res, 200, JSON.stringify({ is_sleeping: this.sleepLevel > 0 }));
      case '/is_paused':
        return sendJson(res, 200, JSON.stringify({ is_paused: this.pauseGate.paused }));
      case '/v1/models':
        return sendJson(
          res,
          200,
          JSON.stringify({
            object: 'list',
            data: [
              ...this.baseNames.map((id) => modelCard(id, this.model, null, this.maxModelLen)),
              ...[...this.adapters].map((id) =>
                modelCard(id, `/adapters/${id}`, this.model, this.maxModelLen),
              ),
            ],
          }),
        );
      case '/metrics': {
        if (this.opts.metrics === false) return this.sendError(res, 404, `no route ${path}`);
        this.metricsReads += 1;
        const snapshot = {
          model: this.model,
          running: this.engine.running,
          waiting: this.engine.waiting + this.pauseGate.heldCount,
          kvCacheUsage: this.kvUsage.usage(),
          prefixCacheQueries: this.cache.queriedTokens,
          prefixCacheHits: this.cache.hitTokens,
          promptTokens: this.promptTokensTotal,
          generationTokens: this.generationTokensTotal,
          cacheConfig: {
            blockSize: this.cache.options.blockTokens,
            numGpuBlocks: this.cache.options.capacityBlocks,
          },
          ...(this.loraSlots ? { lora: this.loraInfo() } : {}),
          sleepLevel: this.sleepLevel,
          processStartSeconds: this.processStartSeconds,
        };
        const body =
          this.opts.sglangMetrics === undefined
            ? metricsText(snapshot)
            : sglangMetricsText(snapshot, this.opts.sglangMetrics);
        res.writeHead(200, {
          'content-type': 'text/plain; version=0.0.4; charset=utf-8',
          'content-length': Buffer.byteLength(body),
        });
        res.end(body);
        return;
      }
      default:
        return this.sendError(res, 404, `no route ${path}`);
    }
  }

  private applySimpleFault(req: IncomingMessage, res: ServerResponse, path: string, fault: Fault): void {
    if (!('delayMs' in fault)) req.resume(); // a delayed request keeps its body for the answer (/tokenize)
    if ('status' in fault) return this.sendError(res, fault.status, fault.message ?? 'injected fault');
    if ('resetAfterChunks' in fault) {
      req.socket.destroy();
      return;
    }
    if ('hang' in fault) return; // ends when the client aborts or close() destroys the socket
    const timer = setTimeout(() => {
      this.sideTimers.delete(timer);
      this.answerSimple(req, res, path);
    }, fault.delayMs).unref();
    this.sideTimers.add(timer);
    res.on('close', () => {
      clearTimeout(timer);
      this.sideTimers.delete(timer);
    });
  }

  /** POST /v1/embeddings (embeddings-api.ts), recorded in `records` like a generation request. */
  private serveEmbeddings(req: IncomingMessage, res: ServerResponse, path: string): void {
    const startMs = Date.now();
    readBody(req, MAX_BODY_BYTES, (raw) => {
      if (raw === undefined) return sendJson(res, 413, errorBody(413, 'request body too large'));
      const asleep = this.sleepLevel > 0;
      if (asleep) this.requestsWhileAsleep += 1;
      const answer = asleep
        ? {
            status: 503,
            body: errorBody(503, 'The engine is sleeping; POST /wake_up first.'),
            promptTokens: 0,
          }
        : answerEmbeddings(raw, {
            defaultModel: this.model,
            serves: this.opts.strictModels === true ? (m) => this.serves(m) : undefined,
            priority: (b) => requestPriority(b, this.opts.schedulingPolicy ?? 'fcfs'),
            tokensOf: (text) => this.tokenizer.encode(text).length,
          });
      let body: unknown;
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        body = raw.toString('utf8');
      }
      const headers = lowerHeaders(req);
      this.pushRecord({
        requestId: headers['x-request-id'] || randomUUID(),
        path,
        startMs,
        endMs: Date.now(),
        firstByteMs: Date.now(),
        firstByteSeq: ++this.firstBytes,
        outcome: answer.status === 200 ? 'ok' : 'error',
        status: answer.status,
        promptTokens: answer.promptTokens,
        cachedTokens: 0,
        completionTokens: 0,
        stream: false,
        body,
        headers,
      });
      sendJson(res, answer.status, answer.body);
    });
  }

  /** POST /sleep?level=1|2 and POST /wake_up, as vLLM serves them (with VLLM_SERVER_DEV_MODE=1). */
  private answerSleep(req: IncomingMessage, res: ServerResponse, path: string): void {
    req.resume();
    if (req.method !== 'POST') return this.sendError(res, 405, `method ${req.method ?? ''} not allowed`);
    if (path === '/wake_up') {
      this.wakeUp(new URL(req.url ?? '/', 'http://sim').searchParams.getAll('tags'));
      res.writeHead(200, { 'content-length': 0 }).end();
      return;
    }
    const raw = new URL(req.url ?? '/', 'http://sim').searchParams.get('level') ?? '1';
    if (raw !== '1' && raw !== '2') return this.sendError(res, 400, `sleep level must be 1 or 2, got ${raw}`);
    void this.sleep(raw === '1' ? 1 : 2).then(() => {
      if (!res.destroyed) res.writeHead(200, { 'content-length': 0 }).end();
    });
  }

  /**
   * POST /collective_rpc {"method": "reload_weights"} (VLLM_SERVER_DEV_MODE=1): loads the weights
   * again from the model's files into their woken memory (sleep-state.ts), answered as vLLM answers
   * one result per worker; a 500 while the weights' memory sleeps, or for a method the simulator has
   * not; a 400 without a method, as vLLM.
   */
  private answerCollectiveRpc(req: IncomingMessage, res: ServerResponse): void {
    if (req.method !== 'POST') {
      req.resume();
      return this.sendError(res, 405, `method ${req.method ?? ''} not allowed`);
    }
    readBody(req, MAX_BODY_BYTES, (raw) => {
      if (res.destroyed) return;
      let method: unknown;
      try {
        method = (JSON.parse((raw ?? Buffer.alloc(0)).toString('utf8')) as { method?: unknown }).method;
      } catch {
        return this.sendError(res, 400, 'JSON decode error');
      }
      if (method === undefined || method === null)
        return this.sendError(res, 400, "Missing 'method' in request body");
      if (method !== 'reload_weights') return this.sendError(res, 500, `no worker method ${String(method)}`);
      if (!this.sleepState.reloadWeights())
        return this.sendError(res, 500, 'the weights are asleep: POST /wake_up?tags=weights first');
      sendJson(res, 200, JSON.stringify({ results: [null] }));
    });
  }

  /**
   * vLLM's cache resets and pause of generation (served with VLLM_SERVER_DEV_MODE=1): POST
   * /reset_prefix_cache (AllBlocksCleared), /reset_mm_cache and /reset_encoder_cache (nothing to
   * empty here), /pause?mode=abort|wait|keep&clear_cache=BOOL (pause-gate.ts; `clear_cache` read as
   * pydantic reads a bool, `0`/`no`/`off` false; vLLM's 422 for another mode or value; the deprecated
   * `wait_for_inflight_requests=true` is mode=wait), /resume.
   */
  private answerControl(req: IncomingMessage, res: ServerResponse, path: string): void {
    req.resume();
    const params = new URL(req.url ?? '/', 'http://sim').searchParams;
    const ok = (body?: string): void => {
      if (res.destroyed) return;
      if (body === undefined) res.writeHead(200, { 'content-length': 0 }).end();
      else sendJson(res, 200, body);
    };
    switch (path) {
      case '/reset_prefix_cache':
        void this.resetPrefixCache().then(() => ok());
        return;
      case '/resume':
        this.resume();
        return ok(JSON.stringify({ status: 'resumed' }));
      case '/pause': {
        const legacyWait = params.get('wait_for_inflight_requests') === 'true';
        const mode = params.get('mode') ?? (legacyWait ? 'wait' : 'abort');
        if (!PAUSE_MODES.has(mode)) {
          return this.sendError(res, 422, `mode must be one of 'abort', 'wait', 'keep'; got '${mode}'`);
        }
        const clear = laxBool(params.getAll('clear_cache').at(-1) ?? 'true');
        if (clear === undefined) return this.sendError(res, 422, 'clear_cache must be a boolean');
        void this.pause(mode as PauseMode, clear).then(() => ok(JSON.stringify({ status: 'paused' })));
        return;
      }
      default:
        return ok();
    }
  }

  /**
   * GET /v1/responses/{id}: the stored response; POST /v1/responses/{id}/cancel: vLLM's 400 for a
   * response that is not running in the background (every stored one here). 404 when not stored.
   */
  private answerResponseLookup(req: IncomingMessage, res: ServerResponse, path: string): void {
    req.resume();
    const rest = path.slice(RESPONSE_PATH_PREFIX.length);
    const cancel = rest.endsWith('/cancel');
    const id = decodePathSegment(cancel ? rest.slice(0, -'/cancel'.length) : rest);
    if (id === undefined || id === '' || id.includes('/'))
      return this.sendError(res, 404, `no route ${path}`);
    const method = req.method ?? '';
    let status: number;
    const stored = this.responses.get(id);
    if (method !== (cancel ? 'POST' : 'GET')) {
      status = 405;
      this.sendError(res, status, `method ${method} not allowed`);
    } else if (stored === undefined) {
      status = 404;
      this.sendError(res, status, `Response with id '${id}' not found.`);
    } else if (cancel) {
      status = 400;
      this.sendError(res, status, 'Cannot cancel a synchronous response.');
    } else {
      status = 200;
      sendJson(res, status, stored.json);
    }
    if (this.maxRecords === 0) return;
    this.responseLookups.push({ method, path, responseId: id, status, atMs: Date.now() });
    if (this.responseLookups.length > this.maxRecords) this.responseLookups.shift();
  }

  /** vLLM's 400 for a prompt (plus the output tokens asked for) longer than max_model_len. */
  private contextError(request: GenerationRequest, body: unknown): string | undefined {
    const max = this.maxModelLen;
    let input = 0;
    for (const p of request.prompts) input = Math.max(input, this.tokenizer.encode(p).length);
    const b = isObj(body) ? body : {};
    const raw = b.max_tokens ?? b.max_completion_tokens ?? b.max_output_tokens;
    const asked = typeof raw === 'number' ? raw : 0;
    if (input > max) {
      return (
        `This model's maximum context length is ${max} tokens. However, your request has ${input} ` +
        'input tokens. Please reduce the length of the input messages.'
      );
    }
    if (input + asked > max) {
      return (
        `'max_tokens' or 'max_completion_tokens' is too large: ${asked}. This model's maximum context ` +
        `length is ${max} tokens and your request has ${input} input tokens (${asked} > ${max} - ${input}).`
      );
    }
    return undefined;
  }

  /** A base name, or (LoRA on) a listed adapter. */
  private serves(model: string): boolean {
    return this.baseNames.includes(model) || this.adapters.has(model);
  }

  private sendError(res: ServerResponse, status: number, message: string): void {
    sendJson(res, status, errorBody(status, message));
  }

  // ---- generation ----

  private handleGeneration(req: IncomingMessage, res: ServerResponse, path: string): void {
    const ctx: Ctx = {
      req,
      res,
      path,
      startMs: Date.now(),
      ended: false,
      resetting: false,
      chunks: 0,
      resetAfter: -1,
    };
    this.inFlightCount++;
    this.live.add(ctx);
    res.on('close', () => this.onClose(ctx));
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size <= MAX_BODY_BYTES) chunks.push(c);
    });
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) return this.finishError(ctx, 413, 'request body too large');
      this.onBody(ctx, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks));
    });
    req.on('error', () => undefined); // an abort surfaces as res 'close'
  }

  private onBody(ctx: Ctx, raw: Buffer): void {
    if (ctx.res.destroyed) return;
    const headers = lowerHeaders(ctx.req);
    const requestId = headers['x-request-id'] || randomUUID();
    const text = raw.toString('utf8');
    let body: unknown;
    let badJson = false;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
      badJson = true;
    }
    const record: RequestRecord = {
      requestId,
      path: ctx.path,
      startMs: ctx.startMs,
      promptTokens: 0,
      cachedTokens: 0,
      completionTokens: 0,
      stream: isObj(body) && body.stream === true,
      body,
      headers,
    };
    ctx.record = record;
    this.pushRecord(record);
    ctx.res.setHeader('x-request-id', requestId);

    // Prefill side channel: the transfer exists from the request's arrival, so a decode leg waiting
    // for it learns about a failure (an injected fault, a bad DP rank) at once.
    let badRank = false;
    if (this.side && !badJson) {
      const rank = dpRankOf(headers['x-data-parallel-rank'], this.side.engineIds.length);
      badRank = rank === undefined;
      record.dpRank = rank;
      const kv = isObj(body) && isObj(body.kv_transfer_params) ? body.kv_transfer_params : undefined;
      if (this.connector === 'mooncake' && typeof kv?.transfer_id === 'string') {
        ctx.transferId = kv.transfer_id;
        this.side.beginTransfer(kv.transfer_id, rank ?? 0);
      }
    }

    if (badJson) return this.finishError(ctx, 400, 'invalid JSON body');
    if (this.sleepLevel > 0) {
      this.requestsWhileAsleep += 1;
      return this.finishError(ctx, 503, 'The engine is sleeping; POST /wake_up first.');
    }
    if (this.weightsDiscarded) this.requestsWithoutWeights += 1;
    const fault = this.faults.take(ctx.path);
    if (fault && 'status' in fault)
      return this.finishError(ctx, fault.status, fault.message ?? 'injected fault');
    if (fault && 'hang' in fault) return;
    if (fault && 'resetAfterChunks' in fault) {
      if (fault.resetAfterChunks === 0 || !record.stream) return this.reset(ctx);
      ctx.resetAfter = fault.resetAfterChunks;
    }

    const kind = generationKind(ctx.path);
    const parsed: { ok: true; request: GenerationRequest } | { ok: false; error: string; status?: number } =
      kind === 'responses'
        ? this.parseResponses(body, record)
        : kind === 'messages'
          ? parseMessagesRequest(body)
          : parseGenerationRequest(kind, body, this.defaultMaxTokens, this.cache.options.charsPerToken);
    if (!parsed.ok) return this.finishError(ctx, parsed.status ?? 400, parsed.error);
    const request = parsed.request;
    if (this.opts.strictModels === true && request.model !== undefined && !this.serves(request.model)) {
      return this.finishError(ctx, 404, `The model \`${request.model}\` does not exist.`);
    }
    const tooLong = this.opts.maxModelLen !== undefined ? this.contextError(request, body) : undefined;
    if (tooLong !== undefined) return this.finishError(ctx, 400, tooLong);
    // vLLM's Messages request has no `priority`: whatever the body says, it is ignored.
    const priority = kind === 'messages' ? 0 : requestPriority(body, this.opts.schedulingPolicy ?? 'fcfs');
    if (typeof priority !== 'number') return this.finishError(ctx, 400, priority.error);

    let fromRemotePrefill = false;
    // kv_both: a decode worker serves a request without KV params whole, as a regular worker would.
    const local =
      this.role === 'decode' && this.opts.kvBoth === true && request.kvTransferParams === undefined;
    if (!local && (this.connector === 'p2pnccl' || this.role === 'decode')) {
      // vLLM's Responses API names the engine request after the body's `request_id`, not X-Request-Id.
      const engineId = kind === 'responses' ? (record.responseId ?? requestId) : requestId;
      const check = checkDecodeRequest(this.connector, request.kvTransferParams, engineId);
      if (check.ok && check.peer) record.p2p = check.peer;
      if (this.role === 'decode') {
        if (!check.ok) return this.finishError(ctx, 400, check.reason);
        fromRemotePrefill = true;
      }
    }
    if (badRank) return this.finishError(ctx, 400, 'X-data-parallel-rank out of range');

    const enter = (): void => this.enterEngine(ctx, record, request, fromRemotePrefill, priority);
    const go =
      fromRemotePrefill && (this.connector === 'mooncake' || this.connector === 'nixl')
        ? (): void => {
            ctx.kvFetch = new AbortController();
            void fetchRemoteKv(this.connector, request.kvTransferParams, ctx.kvFetch.signal).then(
              (failure) => {
                if (ctx.res.destroyed || ctx.ended) return;
                if (failure) this.finishError(ctx, failure.status, failure.reason);
                else enter();
              },
            );
          }
        : enter;
    if (fault && 'delayMs' in fault) {
      ctx.delayTimer = setTimeout(() => {
        ctx.delayTimer = undefined;
        go();
      }, fault.delayMs).unref();
    } else go();
  }

  /**
   * A Responses body as a chat generation: 400 when invalid, 404 when `previous_response_id` is not
   * in this simulator's store (vLLM's message), else the conversation rendered (responses-request.ts).
   */
  private parseResponses(
    body: unknown,
    record: RequestRecord,
  ): ParseResult | { ok: false; status: number; error: string } {
    const parsed = parseResponsesRequest(body, this.defaultMaxTokens);
    if (!parsed.ok) return parsed;
    record.responseId = parsed.input.id;
    const previousId = parsed.input.previousResponseId;
    const previous = previousId === undefined ? undefined : this.responses.get(previousId);
    if (previousId !== undefined && previous === undefined) {
      return { ok: false, status: 404, error: `Response with id '${previousId}' not found.` };
    }
    return responsesGeneration(parsed.input, previous);
  }

  private enterEngine(
    ctx: Ctx,
    record: RequestRecord,
    request: GenerationRequest,
    remote: boolean,
    priority: number,
  ): void {
    if (ctx.res.destroyed) return;
    const turn = request.turn;
    const ident: ResponseIdentity = {
      kind: request.kind,
      id: turn?.id ?? responseId(request.kind, record.requestId),
      created: Math.floor(Date.now() / 1000),
      model: request.model ?? this.model,
    };
    const choices = choiceCount(request);
    const formatter = !request.stream
      ? undefined
      : turn
        ? new ResponsesStreamFormatter(responseHead(turn, ident, request.maxTokens), newMessageItemId())
        : request.kind === 'messages'
          ? new MessagesStreamFormatter(ident.id, ident.model)
          : new StreamFormatter(ident);
    ctx.gate = this.holds.take(ctx.path, request.stream);
    if (formatter) {
      record.status = 200;
      ctx.res.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
      });
      ctx.res.flushHeaders();
      if (ctx.gate?.afterChunks === 0) ctx.gate.engage();
      // vLLM sends response.created and response.in_progress before the request reaches the engine.
      if (formatter instanceof ResponsesStreamFormatter) {
        ctx.res.cork();
        const sent = formatter.opening().every((e) => this.writeChunk(ctx, e));
        ctx.res.uncork();
        if (!sent) return;
      }
    } else ctx.gate?.engage(); // a JSON answer is held whole
    let blocks = 0;
    let keys: CacheKeys | undefined;
    // A Responses turn keys the cache by its conversation as a chat body: the ids a chat request gets.
    const keysOf = (): CacheKeys =>
      (keys ??= this.cacheKeys(turn?.chatBody ?? request.chatBody ?? record.body, request.prompts, adapter));
    const admit = (): number => {
      let prompt = 0;
      let cached = 0;
      const held: number[] = [];
      const k = keysOf();
      const publisher = this.kvPublisher;
      let tokenMode: { promptTokens: number; cachedTokens: number; blocks: number } | undefined;
      if (k.tokens !== undefined && publisher !== undefined) {
        tokenMode = { promptTokens: 0, cachedTokens: 0, blocks: 0 };
        for (const t of k.tokens) {
          const r = this.lookupTokens(publisher, t, held);
          tokenMode.promptTokens += r.promptTokens;
          tokenMode.cachedTokens += r.cachedTokens;
          tokenMode.blocks += Math.ceil(r.promptTokens / this.cache.options.blockTokens);
        }
      }
      // With KV events, what a text-keyed prompt evicts is published too: its subscribers indexed it.
      const removed: number[] | undefined = publisher !== undefined ? [] : undefined;
      for (let i = 0; i < (k.texts?.length ?? 0); i++) {
        const r = this.cache.lookupAndInsert(k.texts![i]!, held, k.prompts[i]!.hashes, removed);
        prompt += r.promptTokens;
        cached += r.cachedTokens;
        blocks += Math.ceil(r.promptTokens / this.cache.options.blockTokens);
      }
      if (removed !== undefined && removed.length > 0)
        void publisher!.publish([{ type: 'removed', hashes: removed.map((h) => BigInt(h)) }]);
      if (tokenMode !== undefined) {
        prompt = tokenMode.promptTokens;
        cached = tokenMode.cachedTokens;
        blocks = tokenMode.blocks;
      }
      const fullTokens = held.length * this.cache.options.blockTokens;
      ctx.kv = { hashes: held, tailTokens: prompt - fullTokens, generated: () => record.completionTokens };
      this.kvUsage.hold(ctx.kv);
      // A P/D decode gets the whole prompt's KV cache from the prefill worker (vLLM reports it cached).
      if (remote) cached = prompt;
      record.promptTokens = prompt;
      record.cachedTokens = cached;
      this.promptTokensTotal += prompt;
      return remote
        ? transferTtftMs(this.timing, prompt, this.timeScale)
        : prefillTtftMs(this.timing, prompt - cached, this.timeScale);
    };
    const adapter =
      this.loraSlots !== undefined && request.model !== undefined && !this.baseNames.includes(request.model)
        ? request.model
        : undefined;
    const spec: SequenceSpec = {
      admit,
      // A KV transfer (P/D decode) computes nothing; a local prefill computes its uncached tokens.
      computeMs: () =>
        remote ? 0 : prefillComputeMs(this.timing, record.promptTokens - record.cachedTokens, this.timeScale),
      ...(adapter === undefined ? {} : { adapter }),
      ...(priority === 0 ? {} : { priority }),
      ...(this.cache.sharesPool ? { fits: () => this.fitsPool(keysOf(), request.maxTokens * choices) } : {}),
      outputTokens: request.maxTokens,
      ...(choices === 1 ? {} : { sequences: choices }),
      onToken: (index, last) => {
        // A finished sequence frees its blocks before the engine starts the next (as vLLM frees them).
        if (last && ctx.kv) this.kvUsage.release(ctx.kv);
        if (ctx.ended || ctx.resetting) return;
        record.completionTokens = (index + 1) * choices;
        this.generationTokensTotal += choices;
        if (formatter) this.streamToken(ctx, record, request, formatter, index, last);
        else if (last) {
          const gate = ctx.gate;
          if (gate) gate.run(() => this.finishJson(ctx, record, request, ident, blocks));
          else this.finishJson(ctx, record, request, ident, blocks);
        }
      },
    };
    // While generation is paused (POST /pause), the request waits for POST /resume before the engine.
    ctx.unhold = this.pauseGate.admit(() => {
      if (!ctx.res.destroyed) ctx.job = this.engine.submit(spec);
    });
    if (this.pauseGate.paused) {
      this.requestsWhilePaused += 1;
      this.settlePauseWaiters();
    }
  }

  private streamToken(
    ctx: Ctx,
    record: RequestRecord,
    request: GenerationRequest,
    f: StreamFormatter | ResponsesStreamFormatter | MessagesStreamFormatter,
    index: number,
    last: boolean,
  ): void {
    if (index === 0) this.markFirstByte(record, Date.now());
    // One syscall per step even when a step writes several events (role chunk, usage, [DONE], end).
    ctx.res.cork();
    if (f instanceof ResponsesStreamFormatter)
      this.writeResponsesStep(ctx, record, request.turn!, f, index, last);
    else if (f instanceof MessagesStreamFormatter) this.writeMessagesStep(ctx, record, f, index, last);
    else this.writeStepChunks(ctx, record, request, f, index, last);
    ctx.res.uncork();
  }

  /** One step of a streamed Messages answer: message_start and the block's start with the first token. */
  private writeMessagesStep(
    ctx: Ctx,
    record: RequestRecord,
    f: MessagesStreamFormatter,
    index: number,
    last: boolean,
  ): void {
    if (index === 0 && !f.opening(record.promptTokens).every((e) => this.writeChunk(ctx, e))) return;
    if (!this.writeChunk(ctx, f.delta(index))) return;
    if (!last) return;
    const usage = { input_tokens: record.promptTokens, output_tokens: record.completionTokens };
    if (!f.closing(usage).every((e) => this.writeChunk(ctx, e))) return;
    this.endStream(ctx, record);
  }

  /**
   * One step of a streamed Responses answer: the item's opening events first, its closing ones last.
   * The turn is stored when its generation ends (before response.completed, even while a hold keeps it).
   */
  private writeResponsesStep(
    ctx: Ctx,
    record: RequestRecord,
    turn: ResponsesTurn,
    f: ResponsesStreamFormatter,
    index: number,
    last: boolean,
  ): void {
    if (index === 0 && !f.itemOpening().every((e) => this.writeChunk(ctx, e))) return;
    if (!this.writeChunk(ctx, f.delta(index))) return;
    if (!last) return;
    const text = outputText(record.completionTokens);
    const usage = responsesUsage(record.promptTokens, record.completionTokens, record.cachedTokens);
    const response = f.completed(text, usage);
    this.storeResponse(turn, JSON.stringify(response), text);
    if (!f.closing(text, response).every((e) => this.writeChunk(ctx, e))) return;
    this.endStream(ctx, record);
  }

  private writeStepChunks(
    ctx: Ctx,
    record: RequestRecord,
    request: GenerationRequest,
    f: StreamFormatter,
    index: number,
    last: boolean,
  ): void {
    const choices = choiceCount(request);
    for (let c = 0; c < choices; c++) {
      if (index === 0 && request.kind === 'chat' && !this.writeChunk(ctx, f.roleChunk(c))) return;
      if (!this.writeChunk(ctx, f.tokenChunk(c, index, last))) return;
    }
    if (!last) return;
    if (request.includeUsage) {
      const usage = usageOf(record.promptTokens, record.completionTokens, record.cachedTokens);
      if (!this.writeChunk(ctx, f.usageChunk(usage))) return;
    }
    if (!this.writeChunk(ctx, SSE_DONE)) return;
    this.endStream(ctx, record);
  }

  /** Ends a stream whose last event is written (or queued behind a hold). */
  private endStream(ctx: Ctx, record: RequestRecord): void {
    const end = (): void => {
      if (ctx.resetting) return; // a held write replayed on release hit an injected reset
      this.finishOk(ctx, record);
      ctx.res.end();
    };
    if (ctx.gate) ctx.gate.run(end);
    else end();
  }

  /** Keeps a completed Responses turn for follow-ups and GET, unless it asked for `store: false`. */
  private storeResponse(turn: ResponsesTurn, json: string, text: string): void {
    if (turn.store) this.responses.put(turn.id, { json, messages: turn.messages, outputText: text });
  }

  /** Writes one SSE event; returns false when an injected reset cut the socket after it. */
  private writeChunk(ctx: Ctx, chunk: string): boolean {
    if (ctx.gate?.isHolding) {
      ctx.gate.run(() => this.writeChunk(ctx, chunk)); // replayed in order on release
      return true;
    }
    if (ctx.resetting) return false;
    ctx.res.write(chunk);
    ctx.chunks++;
    if (ctx.chunks === ctx.gate?.afterChunks) ctx.gate.engage();
    if (ctx.chunks === ctx.resetAfter) {
      this.reset(ctx);
      return false;
    }
    return true;
  }

  private finishJson(
    ctx: Ctx,
    record: RequestRecord,
    request: GenerationRequest,
    ident: ResponseIdentity,
    blocks: number,
  ): void {
    let kv: Record<string, unknown> | undefined;
    if (this.role === 'prefill') {
      const blockIds: number[] = [];
      for (let i = 0; i < blocks; i++) {
        blockIds.push(this.nextBlockId);
        this.nextBlockId = (this.nextBlockId + 1) % this.cache.options.capacityBlocks;
      }
      const engineId = this.side?.engineIds[record.dpRank ?? 0] ?? this.id;
      kv = prefillResponseParams(this.connector, request.kvTransferParams, {
        engineId,
        host: this.host,
        port: this.side?.port ?? this.port,
        blockIds,
        bootstrapAddr: this.side?.addr,
      });
      if (kv && this.connector === 'nixl') this.side?.grantBlocks(engineId, blockIds);
    }
    let body: string;
    const turn = request.turn;
    if (turn) {
      const text = outputText(record.completionTokens);
      const usage = responsesUsage(record.promptTokens, record.completionTokens, record.cachedTokens);
      const head = responseHead(turn, ident, request.maxTokens);
      body = JSON.stringify(completedResponse(head, newMessageItemId(), text, usage, kv));
      this.storeResponse(turn, body, text);
    } else if (request.kind === 'messages') {
      const usage = { input_tokens: record.promptTokens, output_tokens: record.completionTokens };
      body = messagesBody(ident.id, ident.model, outputText(record.completionTokens), usage, kv);
    } else {
      const usage = usageOf(record.promptTokens, record.completionTokens, record.cachedTokens);
      body = completionBody(ident, choiceCount(request), request.maxTokens, usage, kv);
    }
    this.markFirstByte(record, Date.now());
    record.status = 200;
    this.finishOk(ctx, record);
    sendJson(ctx.res, 200, body);
  }

  private finishOk(ctx: Ctx, record: RequestRecord): void {
    ctx.ended = true;
    record.outcome = 'ok';
    record.endMs = Date.now();
  }

  private finishError(ctx: Ctx, status: number, message: string): void {
    ctx.ended = true;
    if (ctx.record) {
      ctx.record.outcome = 'error';
      ctx.record.status = status;
      ctx.record.endMs = Date.now();
      this.markFirstByte(ctx.record, ctx.record.endMs);
    }
    ctx.req.resume();
    if (ctx.path === MESSAGES_PATH) sendJson(ctx.res, status, messagesErrorBody(status, message));
    else this.sendError(ctx.res, status, message);
  }

  private reset(ctx: Ctx): void {
    ctx.resetting = true;
    ctx.res.uncork(); // hand the corked events to the socket first: the client must see all n of them
    ctx.req.socket.destroy();
  }

  /** The single end path of a generation request (finished, aborted, reset, or simulator closed). */
  private onClose(ctx: Ctx): void {
    this.inFlightCount--;
    this.live.delete(ctx);
    ctx.unhold?.();
    ctx.gate?.drop();
    ctx.kvFetch?.abort();
    if (ctx.transferId !== undefined) this.side?.endTransfer(ctx.transferId, ctx.record?.outcome === 'ok');
    // Blocks first: the engine's cancel starts waiting requests, which may need them (shared pool).
    if (ctx.kv) this.kvUsage.release(ctx.kv);
    if (ctx.job) this.engine.cancel(ctx.job);
    if (ctx.delayTimer) clearTimeout(ctx.delayTimer);
    ctx.delayTimer = undefined;
    const record = ctx.record;
    if (record && !ctx.ended) {
      record.outcome = ctx.resetting ? 'reset' : 'aborted';
      record.endMs = Date.now();
    }
    if (this.inFlightCount === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w.resolve();
    }
    this.settlePauseWaiters();
  }

  private pushRecord(record: RequestRecord): void {
    if (this.maxRecords > 0) {
      this.records.push(record);
      if (this.records.length > this.maxRecords)
        this.records.splice(0, this.records.length - this.maxRecords);
    }
    this.recordedTotal++;
    if (this.requestWaiters.length === 0) return;
    const keep: Waiter[] = [];
    for (const w of this.requestWaiters) {
      if (this.recordedTotal >= w.n) w.resolve();
      else keep.push(w);
    }
    this.requestWaiters = keep;
  }
}

const RESPONSE_PATH_PREFIX = '/v1/responses/';

function generationKind(path: string): GenerationKind {
  if (path === '/v1/chat/completions') return 'chat';
  if (path === MESSAGES_PATH) return 'messages';
  return path === '/v1/responses' ? 'responses' : 'completion';
}

function responseHead(turn: ResponsesTurn, ident: ResponseIdentity, maxTokens: number): ResponseHead {
  return {
    id: turn.id,
    createdAt: ident.created,
    model: ident.model,
    previousResponseId: turn.previousResponseId,
    store: turn.store,
    instructions: turn.instructions,
    maxOutputTokens: maxTokens,
  };
}

/** A percent-encoded path segment; undefined when malformed. */
function decodePathSegment(segment: string): string | undefined {
  try {
    return decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function sendJson(res: ServerResponse, status: number, body: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

function lowerHeaders(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(', ') : v;
  }
  return out;
}

/** `X-data-parallel-rank` as vLLM reads it: absent -> rank 0; out of range -> undefined (400). */
function dpRankOf(header: string | undefined, dpSize: number): number | undefined {
  if (header === undefined) return 0;
  const n = /^[0-9]+$/.test(header) ? Number(header) : -1;
  return n >= 0 && n < dpSize ? n : undefined;
}

function isObj(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export async function startSimulator(opts: SimulatorOptions = {}): Promise<Simulator> {
  const sim = new SimulatorServer(opts);
  try {
    await sim.listen();
  } catch (err) {
    await sim.close();
    throw err;
  }
  return sim;
}

/** One entry of GET /v1/models as vLLM writes it (`parent`: null for a served name, the base model for an adapter). */
function modelCard(
  id: string,
  root: string,
  parent: string | null,
  maxModelLen: number,
): Record<string, unknown> {
  return { id, object: 'model', created: 0, owned_by: 'vllm', root, parent, max_model_len: maxModelLen };
}
