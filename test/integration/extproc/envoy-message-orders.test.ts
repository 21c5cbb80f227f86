/**
 * The ext_proc session under every message order Envoy 1.40's ext_proc filter can produce: a seeded,
 * bounded randomized test (deterministic per seed: each decision comes from the seed, the driver
 * reacts to the router's replies as Envoy does) kept as a regression test.
 *
 * The driver is a model of Envoy's filter (source/extensions/filters/http/ext_proc/ext_proc.cc and
 * processor_state.cc): per direction, the callback state Envoy waits in (headers, body, trailers),
 * which message it may send next in each body mode (BUFFERED: the whole body after the headers reply;
 * STREAMED: chunk by chunk, each answered in order, before the headers reply only with
 * `send_body_without_waiting_for_header_response`; FULL_DUPLEX_STREAMED: chunks and trailers without
 * waiting), and which reply it accepts in each state: a reply Envoy would count as spurious (fail
 * closed: its 500 to the client) fails the case, as does a message Envoy waits for in vain (its
 * message_timeout: a 504), a protocol-error answer from the router to an order Envoy can produce, and
 * a request Envoy would forward upstream without a destination (BUFFERED / FULL_DUPLEX_STREAMED).
 *
 * Each case draws an Envoy configuration (the project's envoy.yaml: BUFFERED / STREAMED with
 * `allow_mode_override`; the gateway's FULL_DUPLEX_STREAMED both ways with trailers; other mixes with
 * NONE / BUFFERED responses, trailers on or off, observability mode), a fleet (regular; P/D with the
 * prefill leg on real simulators: sequential, concurrent, sidecar), a request (inference, malformed,
 * too large, body-less, answered by the router itself, now or after calls of its own), an Envoy local
 * reply at any point of the request, an upstream response (2xx / 4xx / 5xx, end_of_stream on the
 * headers, empty chunks, trailers, served by another endpoint), a prefill held or failed, and a close
 * at any point (half-close alone, half-close + RST_STREAM NO_ERROR, RST_STREAM CANCEL). After each
 * case: every worker's load is exactly 0 (and was never negative), the router's session is gone, no
 * unhandled rejection or exception; after all, no socket or timer left.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BodySendMode,
  HeaderSendMode,
  type CommonResponse,
  type ProcessingResponse,
} from '../../../src/extproc/proto.js';
import { DESTINATION_HEADER } from '../../../src/extproc/headers.js';
import { SERVED_ENDPOINT_KEY, SUBSET_HINT_NAMESPACE, SUBSET_KEY } from '../../../src/extproc/lb-metadata.js';
import type { Router } from '../../../src/router.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import { EnvoySideStream, type EnvoyClose, type EnvoyRequest } from '../../support/envoy-side-stream.js';
import { startTestRouter } from '../../support/router-fixture.js';
import { waitFor } from '../../support/wait-for.js';

const SEEDS = process.env.FUZZ_SEEDS
  ? process.env.FUZZ_SEEDS.split(',').map(Number)
  : [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
const CASES_PER_SEED = 60;
/** Envoy's message_timeout stand-in: a reply that takes longer is a hang (the router never answers). */
const HANG_MS = 8000;
const MAX_BODY_BYTES = 8192;

const { NONE, STREAMED, BUFFERED, FULL_DUPLEX_STREAMED: FDS } = BodySendMode;

// ---------------------------------------------------------------------------------------------
// The fleets

type FleetName = 'regular' | 'pd-sequential' | 'pd-concurrent' | 'pd-sidecar';

interface Fleet {
  readonly name: FleetName;
  readonly router: Router;
  /** Endpoints (host:port) of the workers requests are routed to (regular, or decode). */
  readonly endpoints: readonly string[];
}

let regularSims: Simulator[] = [];
let prefillSims: Simulator[] = [];
let decodeSims: Simulator[] = [];
const fleets = new Map<FleetName, Fleet>();
let baseline: Record<string, number> = {};
const unhandled: unknown[] = [];
const onUnhandled = (err: unknown): void => {
  unhandled.push(err);
};

function handles(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) out[r] = (out[r] ?? 0) + 1;
  return out;
}

/** Sockets, servers and timers above the count before the fleets started. */
function leftover(): string[] {
  const now = handles();
  return ['TCPSocketWrap', 'TCPServerWrap', 'Timeout', 'Http2Session']
    .filter((k) => (now[k] ?? 0) > (baseline[k] ?? 0))
    .map((k) => `${k}: ${now[k]} > ${baseline[k] ?? 0}`);
}

beforeAll(async () => {
  baseline = handles();
  process.on('unhandledRejection', onUnhandled);
  process.on('uncaughtException', onUnhandled);
  const sim = { timeScale: 0, model: 'm' };
  regularSims = [await startSimulator(sim), await startSimulator(sim)];
  prefillSims = [
    await startSimulator({ ...sim, role: 'prefill' }),
    await startSimulator({ ...sim, role: 'prefill' }),
  ];
  decodeSims = [
    await startSimulator({ ...sim, role: 'decode' }),
    await startSimulator({ ...sim, role: 'decode' }),
  ];
  const common = { maxBodyBytes: MAX_BODY_BYTES, decisionHeader: true, responseBodySample: 2 };
  fleets.set('regular', {
    name: 'regular',
    router: await startTestRouter({
      ...common,
      workers: regularSims.map((s) => s.url),
      policy: 'round_robin',
      fallbackEndpoints: 1,
    }),
    endpoints: regularSims.map((s) => s.hostPort),
  });
  for (const dispatch of ['sequential', 'concurrent', 'sidecar'] as const) {
    fleets.set(`pd-${dispatch}`, {
      name: `pd-${dispatch}`,
      router: await startTestRouter({
        ...common,
        mode: 'pd',
        prefill: prefillSims.map((s) => s.url),
        decode: decodeSims.map((s) => s.url),
        prefillPolicy: 'round_robin',
        decodePolicy: 'round_robin',
        pdDispatch: dispatch,
        prefillTimeoutMs: 5000,
      }),
      endpoints: decodeSims.map((s) => s.hostPort),
    });
  }
});

afterAll(async () => {
  for (const f of fleets.values()) await f.router.close();
  await Promise.all([...regularSims, ...prefillSims, ...decodeSims].map((s) => s.close()));
  process.off('unhandledRejection', onUnhandled);
  process.off('uncaughtException', onUnhandled);
  await waitFor(() => leftover().length === 0, { timeoutMs: 10_000 }).catch(() => undefined);
  expect(leftover()).toEqual([]);
});

// ---------------------------------------------------------------------------------------------
// What one case does

type Rnd = () => number;
const pick = <T>(rnd: Rnd, xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
const chance = (rnd: Rnd, p: number): boolean => rnd() < p;
const int = (rnd: Rnd, lo: number, hi: number): number => lo + Math.floor(rnd() * (hi - lo + 1));

/** The ext_proc filter's configuration (what Envoy announces in protocol_config, and how it behaves). */
export interface FilterConfig {
  readonly requestBody: number;
  readonly responseBody: number;
  readonly requestTrailers: boolean;
  readonly responseTrailers: boolean;
  readonly allowModeOverride: boolean;
  readonly sendBodyWithoutWaiting: boolean;
  readonly observability: boolean;
}

type RequestKind =
  | 'completion'
  | 'chat'
  | 'messages'
  | 'malformed'
  | 'too_large'
  | 'inference_without_body'
  | 'unknown_model'
  | 'model_list'
  | 'routed_get'
  | 'other_post'
  | 'lora_load'
  | 'trailers_only';

interface Plan {
  readonly fleet: FleetName;
  readonly config: FilterConfig;
  readonly kind: RequestKind;
  readonly method: string;
  readonly path: string;
  /** undefined: request headers carry end_of_stream. */
  readonly chunks?: readonly Buffer[];
  /** The body ends with an empty chunk carrying end_of_stream (and, when set, end_of_stream_without_message). */
  readonly emptyLast?: 'plain' | 'without_message';
  readonly requestTrailers: boolean;
  readonly subset?: 'ok' | 'none';
  /** Envoy's own local reply, after this many request-side messages. */
  readonly localReplyAt?: number;
  readonly localStatus: number;
  readonly response: {
    readonly status: number;
    readonly headersEos: boolean;
    readonly chunks: readonly Buffer[];
    readonly emptyLast: boolean;
    readonly trailers: boolean;
    readonly servedOther: boolean;
  };
  /** Close the stream at this driver step (undefined: only at the natural end). */
  readonly closeAt?: number;
  readonly closeHow: EnvoyClose;
  readonly endHow: EnvoyClose;
  readonly waitBias: number;
  readonly prefill?: { hold: 'graceful' | 'reset' | 'cancel' | 'local' | 'none' } | { fault: 'one' | 'all' };
}

function filterConfig(rnd: Rnd): FilterConfig {
  const profile = pick(rnd, ['reference', 'reference', 'gateway', 'gateway', 'mixed', 'mixed', 'observe']);
  if (profile === 'reference') {
    // envoy/envoy.yaml, envoy-replicas*.yaml, the Istio EnvoyFilter.
    return {
      requestBody: BUFFERED,
      responseBody: STREAMED,
      requestTrailers: false,
      responseTrailers: false,
      allowModeOverride: true,
      sendBodyWithoutWaiting: false,
      observability: false,
    };
  }
  if (profile === 'gateway') {
    // deploy/kubernetes/inference-pool.yaml, Envoy Gateway's FullDuplexStreamed.
    return {
      requestBody: FDS,
      responseBody: FDS,
      requestTrailers: true,
      responseTrailers: true,
      allowModeOverride: chance(rnd, 0.5),
      sendBodyWithoutWaiting: false,
      observability: false,
    };
  }
  if (profile === 'observe') {
    return {
      requestBody: STREAMED,
      responseBody: STREAMED,
      requestTrailers: chance(rnd, 0.5),
      responseTrailers: chance(rnd, 0.5),
      allowModeOverride: false,
      sendBodyWithoutWaiting: false,
      observability: true,
    };
  }
  const requestBody = pick(rnd, [BUFFERED, BUFFERED, STREAMED, FDS]);
  const responseBody = pick(rnd, [STREAMED, STREAMED, BUFFERED, NONE, FDS]);
  return {
    requestBody,
    responseBody,
    // Envoy refuses FULL_DUPLEX_STREAMED without trailers SEND for that direction.
    requestTrailers: requestBody === FDS || chance(rnd, 0.4),
    responseTrailers: responseBody === FDS || chance(rnd, 0.4),
    allowModeOverride: chance(rnd, 0.6),
    sendBodyWithoutWaiting: chance(rnd, 0.3),
    observability: false,
  };
}

function split(rnd: Rnd, body: Buffer): Buffer[] {
  const n = int(rnd, 1, 4);
  const cuts = new Set<number>();
  for (let i = 1; i < n; i++) cuts.add(int(rnd, 1, Math.max(1, body.length - 1)));
  const at = [0, ...[...cuts].sort((a, b) => a - b), body.length];
  const out: Buffer[] = [];
  for (let i = 0; i + 1 < at.length; i++) out.push(body.subarray(at[i], at[i + 1]));
  return out.filter((c, i) => c.length > 0 || i === 0);
}

function requestFor(
  rnd: Rnd,
  kind: RequestKind,
): { method: string; path: string; body?: Buffer; headersEos: boolean } {
  const prompt = 'tell me about the sea '.repeat(int(rnd, 1, 25));
  const stream = chance(rnd, 0.6);
  const json = (o: unknown): Buffer => Buffer.from(JSON.stringify(o));
  switch (kind) {
    case 'completion':
      return {
        method: 'POST',
        path: '/v1/completions',
        body: json({ model: 'm', prompt, max_tokens: 4, stream }),
        headersEos: false,
      };
    case 'chat':
      return {
        method: 'POST',
        path: '/v1/chat/completions',
        body: json({ model: 'm', messages: [{ role: 'user', content: prompt }], max_tokens: 4, stream }),
        headersEos: false,
      };
    case 'messages':
      return {
        method: 'POST',
        path: '/v1/messages',
        body: json({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: prompt }], stream }),
        headersEos: false,
      };
    case 'unknown_model':
      return {
        method: 'POST',
        path: '/v1/completions',
        body: json({ model: 'no-such-model', prompt, max_tokens: 4 }),
        headersEos: false,
      };
    case 'malformed':
      return {
        method: 'POST',
        path: '/v1/completions',
        body: Buffer.from(`{"model": "m", "prompt": "${prompt}`),
        headersEos: false,
      };
    case 'too_large':
      return {
        method: 'POST',
        path: '/v1/completions',
        body: json({ model: 'm', prompt: 'x'.repeat(MAX_BODY_BYTES + 10) }),
        headersEos: false,
      };
    case 'inference_without_body':
      return { method: 'POST', path: '/v1/completions', headersEos: true };
    case 'model_list':
      return { method: 'GET', path: '/v1/models', headersEos: true };
    case 'routed_get':
      return { method: 'GET', path: '/health', headersEos: true };
    case 'other_post':
      return { method: 'POST', path: '/tokenize', body: json({ model: 'm', prompt }), headersEos: false };
    case 'lora_load':
      return {
        method: 'POST',
        path: '/v1/load_lora_adapter',
        body: json({ lora_name: 'a', lora_path: '/a' }),
        headersEos: false,
      };
    case 'trailers_only':
      return { method: 'POST', path: '/tokenize', headersEos: false };
  }
}

function makePlan(rnd: Rnd): Plan {
  const fleet = pick(rnd, ['regular', 'regular', 'pd-sequential', 'pd-concurrent', 'pd-sidecar'] as const);
  const config = filterConfig(rnd);
  const kind = pick(rnd, [
    'completion',
    'completion',
    'completion',
    'chat',
    'chat',
    'messages',
    'malformed',
    'too_large',
    'inference_without_body',
    'unknown_model',
    'model_list',
    'routed_get',
    'other_post',
    'lora_load',
    'trailers_only',
  ] as const);
  const req = requestFor(rnd, kind);
  const chunks = req.body ? split(rnd, req.body) : req.headersEos ? undefined : [];
  const requestTrailers = kind === 'trailers_only' || (!req.headersEos && chance(rnd, 0.15));
  const emptyLast =
    chunks && chunks.length > 0 && chance(rnd, 0.25)
      ? chance(rnd, 0.3)
        ? ('without_message' as const)
        : ('plain' as const)
      : undefined;
  const status = pick(rnd, [200, 200, 200, 200, 200, 400, 404, 429, 500, 503]);
  const sse = (i: number): Buffer => Buffer.from(`data: {"id":"x","choices":[{"text":"t${i}"}]}\n\n`);
  const nChunks = int(rnd, 0, 4);
  const response = {
    status,
    headersEos: chance(rnd, 0.15),
    chunks: Array.from({ length: nChunks }, (_, i) =>
      i === nChunks - 1 ? Buffer.from('data: [DONE]\n\n') : sse(i),
    ),
    emptyLast: chance(rnd, 0.2),
    trailers: chance(rnd, 0.15),
    servedOther: chance(rnd, 0.1),
  };
  const inference = kind === 'completion' || kind === 'chat' || kind === 'messages';
  let prefill: Plan['prefill'];
  if ((fleet === 'pd-sequential' || fleet === 'pd-concurrent') && inference && !config.observability) {
    if (chance(rnd, 0.35))
      prefill = { hold: pick(rnd, ['graceful', 'reset', 'cancel', 'local', 'none'] as const) };
    else if (chance(rnd, 0.2)) prefill = { fault: pick(rnd, ['one', 'all'] as const) };
  }
  return {
    fleet,
    config,
    kind,
    method: req.method,
    path: req.path,
    ...(chunks !== undefined ? { chunks } : {}),
    ...(emptyLast !== undefined ? { emptyLast } : {}),
    requestTrailers,
    ...(chance(rnd, 0.1) ? { subset: chance(rnd, 0.5) ? ('ok' as const) : ('none' as const) } : {}),
    ...(chance(rnd, 0.12) ? { localReplyAt: int(rnd, 1, 4) } : {}),
    localStatus: pick(rnd, [413, 408, 503]),
    response,
    ...(chance(rnd, 0.45) ? { closeAt: int(rnd, 0, 14) } : {}),
    closeHow: pick(rnd, ['graceful', 'reset', 'cancel'] as const),
    endHow: pick(rnd, ['graceful', 'reset'] as const),
    waitBias: pick(rnd, [0, 0.3, 0.7]),
    ...(prefill !== undefined ? { prefill } : {}),
  };
}

// ---------------------------------------------------------------------------------------------
// Envoy's ext_proc filter, as far as the order of messages and replies goes

type Cb = 'idle' | 'headers' | 'body' | 'trailers';

/** One direction's ProcessorState (decoding = request, encoding = response). */
class Direction {
  cb: Cb = 'idle';
  headersSent = false;
  headersAnswered = false;
  /** end_of_stream flags of the STREAMED / BUFFERED body messages awaiting their reply, in order. */
  readonly queued: boolean[] = [];
  /** FULL_DUPLEX_STREAMED chunks not echoed yet. */
  unechoed = 0;
  bodyReceived = false;
  bodyEnded = false;
  /** A message with end_of_stream, or the trailers, went out: the router has seen the end. */
  endSent = false;
  /**
   * Envoy no longer waits in this direction: a local reply aborted the request, or the response has
   * ended (the stream is destroyed right after); a late reply is still checked.
   */
  abandoned = false;
  bodyAnswered = false;
  trailersSent = false;
  trailersAnswered = false;
  readonly sent: Buffer[] = [];
  readonly echoed: Buffer[] = [];

  constructor(
    public mode: number,
    public sendTrailers: boolean,
    readonly name: 'request' | 'response',
  ) {}

  /** Envoy waits for a reply in this direction. */
  get waiting(): boolean {
    if (this.abandoned) return false;
    return this.cb !== 'idle' || (this.trailersSent && !this.trailersAnswered && this.mode === FDS);
  }

  /**
   * A reply is due now: in FULL_DUPLEX_STREAMED the router answers the request (headers, then the
   * whole body) once the body has ended, so Envoy goes on sending meanwhile.
   */
  get due(): boolean {
    if (!this.waiting) return false;
    if (this.mode !== FDS) return true;
    if (this.name === 'request') return this.endSent;
    // Response: each chunk is echoed as it comes.
    return this.cb === 'headers' || this.unechoed > 0 || (this.trailersSent && !this.trailersAnswered);
  }
}

const KINDS = [
  'request_headers',
  'request_body',
  'request_trailers',
  'response_headers',
  'response_body',
  'response_trailers',
  'immediate_response',
] as const;
type ReplyKind = (typeof KINDS)[number];

function replyKind(r: ProcessingResponse): ReplyKind | undefined {
  return KINDS.find((k) => (r as unknown as Record<string, unknown>)[k] != null);
}

function setsDestination(common: CommonResponse | null | undefined): boolean {
  return (common?.header_mutation?.set_headers ?? []).some((h) => h.header.key === DESTINATION_HEADER);
}

class EnvoyFilter {
  readonly dec: Direction;
  readonly enc: Direction;
  readonly errors: string[] = [];
  readonly trace: string[] = [];
  complete = false;
  immediate: { status: number; details: string } | undefined;
  routed = false;
  envoyClosed = false;
  /** The request went upstream (its decoding continued past the filter). */
  forwarded = false;
  localReplied = false;
  /** The router may end the stream with an error (a P/D leg failing mid-response). */
  serverResetAllowed = false;

  constructor(readonly cfg: FilterConfig) {
    this.dec = new Direction(cfg.requestBody, cfg.requestTrailers, 'request');
    this.enc = new Direction(cfg.responseBody, cfg.responseTrailers, 'response');
  }

  private fail(msg: string): void {
    this.errors.push(msg);
  }

  onReply(r: ProcessingResponse): void {
    const kind = replyKind(r);
    this.trace.push(`<- ${kind}`);
    if (this.complete || this.envoyClosed || this.cfg.observability) return; // Envoy ignores it
    if (kind === 'immediate_response') {
      const ir = r.immediate_response!;
      this.immediate = { status: ir.status?.code ?? 0, details: ir.details ?? '' };
      this.trace[this.trace.length - 1] += ` ${this.immediate.status} ${this.immediate.details}`;
      this.complete = true;
      return;
    }
    if (kind === undefined) return this.fail('a reply with no response set');
    const d = kind.startsWith('request') ? this.dec : this.enc;
    if (kind.endsWith('_headers')) {
      if (d.cb !== 'headers') return this.fail(`${kind} reply while Envoy waits for ${d.name} ${d.cb}`);
      const common = (r.request_headers ?? r.response_headers)?.response;
      if (d === this.enc && r.mode_override != null) this.modeOverride(r);
      if (d === this.dec && setsDestination(common)) this.routed = true;
      d.headersAnswered = true;
      if (d.mode === FDS) d.cb = d.bodyReceived ? 'body' : d.trailersSent ? 'trailers' : 'idle';
      else if (d.mode === STREAMED && this.cfg.sendBodyWithoutWaiting && d.queued.length > 0) d.cb = 'body';
      else d.cb = 'idle';
      return;
    }
    if (kind.endsWith('_body')) {
      const common = (r.request_body ?? r.response_body)?.response;
      if (d.cb !== 'body') return this.fail(`${kind} reply while Envoy waits for ${d.name} ${d.cb}`);
      const streamed = common?.body_mutation?.streamed_response;
      if (d === this.dec && setsDestination(common)) this.routed = true;
      if (d.mode === FDS) {
        if (streamed == null)
          return this.fail(`${kind} reply without streamed_response in FULL_DUPLEX_STREAMED`);
        d.echoed.push(Buffer.from(streamed.body ?? Buffer.alloc(0)));
        d.unechoed = Math.max(0, d.unechoed - 1);
        if (streamed.end_of_stream) {
          d.cb = 'idle';
          d.bodyAnswered = true;
        }
        return;
      }
      if (streamed != null)
        return this.fail(`${kind} reply with streamed_response outside FULL_DUPLEX_STREAMED`);
      const eos = d.queued.shift();
      if (eos === undefined) return this.fail(`${kind} reply with no body message outstanding`);
      if (eos) d.bodyAnswered = true;
      if (d.queued.length === 0) d.cb = 'idle';
      return;
    }
    // trailers
    if (!(d.cb === 'trailers' || d.mode === FDS)) {
      return this.fail(`${kind} reply while Envoy waits for ${d.name} ${d.cb}`);
    }
    if (!d.trailersSent) return this.fail(`${kind} reply to trailers Envoy never sent`);
    d.trailersAnswered = true;
    d.cb = 'idle';
  }

  /** Envoy 1.40 onReceiveMessage: mode_override honoured only on a header reply, and only so configured. */
  private modeOverride(r: ProcessingResponse): void {
    const cfg = this.cfg;
    if (
      !cfg.allowModeOverride ||
      cfg.sendBodyWithoutWaiting ||
      cfg.requestBody === FDS ||
      cfg.responseBody === FDS
    ) {
      return;
    }
    const m = r.mode_override!;
    this.enc.mode = m.response_body_mode ?? NONE;
    this.enc.sendTrailers = m.response_trailer_mode === HeaderSendMode.SEND;
    this.trace.push(`   (mode override: response body ${this.enc.mode}, trailers ${this.enc.sendTrailers})`);
  }
}

// ---------------------------------------------------------------------------------------------
// The driver

class Driver {
  readonly envoy: EnvoyFilter;
  private readonly stream: EnvoySideStream;
  private step = 0;
  private requestMessages = 0;
  private chunkIndex = 0;
  private responseChunkIndex = 0;
  private responseStarted = false;
  private responseTrailersSent = false;
  private readonly holds: Array<{ release(): void; reached(): Promise<void> }> = [];
  private firstMessage = true;

  constructor(
    private readonly rnd: Rnd,
    private readonly plan: Plan,
    private readonly fleet: Fleet,
    session: http2.ClientHttp2Session,
  ) {
    this.envoy = new EnvoyFilter(plan.config);
    this.stream = new EnvoySideStream(session, (r) => this.envoy.onReply(r));
  }

  private get trace(): string[] {
    return this.envoy.trace;
  }

  private send(msg: EnvoyRequest, what: string): void {
    const cfg = this.plan.config;
    if (this.firstMessage && !cfg.observability) {
      msg.protocol_config = {
        request_body_mode: cfg.requestBody,
        response_body_mode: cfg.responseBody,
        send_body_without_waiting_for_header_response: cfg.sendBodyWithoutWaiting,
      };
    }
    if (cfg.observability) msg.observability_mode = true;
    this.firstMessage = false;
    this.trace.push(`-> ${what}`);
    this.stream.send(msg);
  }

  async run(): Promise<void> {
    try {
      await this.drive();
    } finally {
      for (const h of this.holds) h.release();
      for (const s of prefillSims) s.clearFaults();
    }
  }

  private async drive(): Promise<void> {
    this.armPrefillFault();
    this.sendRequestHeaders();
    for (;;) {
      this.step++;
      if (this.envoy.envoyClosed) return;
      if (this.stream.closed && !this.envoy.envoyClosed) {
        this.serverEnded();
        return;
      }
      if (this.plan.closeAt === this.step) return this.close(this.plan.closeHow, 'at random');
      if (this.envoy.complete) return this.close(this.plan.endHow, 'after the immediate response');
      this.checkForwarded();
      const actions = this.actions();
      const waiting = this.envoy.dec.waiting || this.envoy.enc.waiting;
      const due = this.envoy.dec.due || this.envoy.enc.due;
      if (actions.length === 0 && !waiting && !this.envoy.cfg.observability) {
        return this.close(this.plan.endHow, 'at the end');
      }
      if (actions.length === 0 && this.envoy.cfg.observability)
        return this.close(this.plan.endHow, 'at the end');
      if (actions.length === 0 || (due && chance(this.rnd, this.plan.waitBias))) {
        if (!(await this.awaitActivity())) return;
        continue;
      }
      await pick(this.rnd, actions)();
    }
  }

  private serverEnded(): void {
    const e = this.envoy;
    this.trace.push(`<- end of stream (grpc-status ${this.stream.grpcStatus})`);
    const early =
      !e.complete && !e.serverResetAllowed && (e.dec.waiting || e.enc.waiting || this.actions().length > 0);
    if (early) {
      e.errors.push(
        `the router ended the stream (grpc-status ${this.stream.grpcStatus}) while Envoy was not done with it`,
      );
    }
    // Envoy's gRPC client is done with the stream: it ends its side.
    e.envoyClosed = true;
    this.stream.close('graceful');
  }

  private async awaitActivity(): Promise<boolean> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      this.stream.activity().then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), HANG_MS))),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.envoy.errors.push(
        `no reply in ${HANG_MS} ms while Envoy waits for request ${this.envoy.dec.cb} / response ${this.envoy.enc.cb} (Envoy: message_timeout, 504)`,
      );
      this.close('reset', 'after the hang');
      return false;
    }
    return true;
  }

  private close(how: EnvoyClose, why: string): void {
    this.trace.push(`-- close (${how}) ${why}`);
    this.envoy.envoyClosed = true;
    this.stream.close(how);
  }

  /** Waits for the router to finish the stream after Envoy closed it. */
  async finished(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = await Promise.race([
      this.stream.done.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), HANG_MS))),
    ]);
    clearTimeout(timer);
    if (timedOut) {
      this.envoy.errors.push('the router never ended a stream Envoy half-closed');
      this.stream.close('cancel');
    }
  }

  // --- what Envoy may send next

  private actions(): Array<() => void | Promise<void>> {
    const e = this.envoy;
    const cfg = e.cfg;
    const out: Array<() => void | Promise<void>> = [];
    if (e.complete || e.envoyClosed) return out;
    const dec = e.dec;
    const chunks = this.plan.chunks;
    // An upstream may answer before the request body has ended (STREAMED): the body goes on until
    // the response has ended.
    const requestOpen = !e.localReplied && !e.dec.abandoned;
    if (requestOpen && chunks !== undefined && !dec.bodyEnded && this.bodyMessages() > 0) {
      const mode = dec.mode;
      const canSend = cfg.observability
        ? mode === STREAMED
        : mode === FDS ||
          (mode === STREAMED && (dec.headersAnswered || cfg.sendBodyWithoutWaiting)) ||
          (mode === BUFFERED && dec.headersAnswered && dec.cb === 'idle');
      if (canSend) out.push(() => this.sendRequestBody());
    }
    const bodyDone = chunks === undefined || dec.bodyEnded || this.bodyMessages() === 0 || dec.mode === NONE;
    if (requestOpen && this.plan.requestTrailers && !dec.trailersSent && bodyDone && dec.sendTrailers) {
      const ready = cfg.observability || dec.mode === FDS || (dec.headersAnswered && dec.cb === 'idle');
      if (ready) out.push(() => this.sendRequestTrailers());
    }
    if (
      requestOpen &&
      !this.responseStarted &&
      this.plan.localReplyAt !== undefined &&
      this.requestMessages >= this.plan.localReplyAt &&
      !cfg.observability
    ) {
      out.push(() => this.sendLocalReply());
    }
    if (requestOpen && !this.responseStarted && this.forwardedNow()) {
      out.push(() => this.sendResponseHeaders(false));
    }
    if (this.responseStarted) this.responseActions(out);
    return out;
  }

  /** Body messages Envoy sends in this mode (BUFFERED: one; else one per chunk, plus an empty last). */
  private bodyMessages(): number {
    const chunks = this.plan.chunks ?? [];
    if (chunks.length === 0) return 0;
    if (this.envoy.dec.mode === BUFFERED) return 1;
    return chunks.length + (this.plan.emptyLast ? 1 : 0);
  }

  /** Envoy has continued the request past the filter (it goes upstream). */
  private forwardedNow(): boolean {
    const e = this.envoy;
    const dec = e.dec;
    if (e.cfg.observability) {
      return (
        dec.headersSent && (this.plan.chunks === undefined || dec.bodyEnded || this.bodyMessages() === 0)
      );
    }
    if (!dec.headersAnswered) return false;
    if (this.plan.chunks === undefined) return true;
    if (dec.mode === STREAMED || dec.mode === FDS || dec.mode === NONE) return true;
    // BUFFERED: after the body's reply, and the trailers' when Envoy sent them.
    if (this.bodyMessages() > 0 && !dec.bodyAnswered) return false;
    if (this.plan.requestTrailers && dec.sendTrailers && !dec.trailersAnswered) return false;
    return true;
  }

  private checkForwarded(): void {
    const e = this.envoy;
    if (e.forwarded || e.localReplied || e.complete || !this.forwardedNow()) return;
    e.forwarded = true;
    this.trace.push('   (request forwarded upstream)');
    // Fail closed: what Envoy forwards must carry the router's destination (STREAMED request bodies
    // cannot be routed on their body: Envoy sends the headers on before the body; refused).
    // A request without a body that ends with trailers, outside FULL_DUPLEX_STREAMED: the router cannot
    // route on the trailers (a trailers reply mutates trailers only), or never sees them (trailer mode
    // SKIP); Envoy forwards it with the untrusted destination header removed (no upstream: a 503).
    const unseenEnd = this.plan.kind === 'trailers_only' && e.dec.mode !== FDS;
    const checked = !e.cfg.observability && e.dec.mode !== STREAMED && !unseenEnd;
    if (checked && !e.routed) e.errors.push('Envoy forwarded the request upstream without a destination');
  }

  private responseActions(out: Array<() => void | Promise<void>>): void {
    const e = this.envoy;
    const enc = e.enc;
    const r = this.plan.response;
    const local = e.localReplied;
    const chunks = local ? [Buffer.from('local reply')] : r.chunks;
    const headersEos = local ? false : r.headersEos;
    const total =
      enc.mode === BUFFERED
        ? chunks.length > 0 || r.emptyLast
          ? 1
          : 0
        : chunks.length + (r.emptyLast ? 1 : 0);
    const bodyLeft = !headersEos && !enc.bodyEnded && total > 0;
    if (bodyLeft && enc.mode !== NONE) {
      const can = e.cfg.observability
        ? enc.mode === STREAMED
        : enc.mode === FDS ||
          (enc.mode === STREAMED && (enc.headersAnswered || e.cfg.sendBodyWithoutWaiting)) ||
          (enc.mode === BUFFERED && enc.headersAnswered && enc.cb === 'idle');
      if (can) out.push(() => this.sendResponseBody(chunks, total));
    }
    const trailers = !local && r.trailers && !headersEos;
    const bodyDone = headersEos || enc.bodyEnded || total === 0 || enc.mode === NONE;
    if (trailers && bodyDone && !this.responseTrailersSent && enc.sendTrailers) {
      const ready = e.cfg.observability || enc.mode === FDS || (enc.headersAnswered && enc.cb === 'idle');
      if (ready) out.push(() => this.sendResponseTrailers());
    }
  }

  // --- the messages

  private headerMap(map: Record<string, string>) {
    return { headers: Object.entries(map).map(([key, v]) => ({ key, raw_value: Buffer.from(v) })) };
  }

  private sendRequestHeaders(): void {
    const p = this.plan;
    const dec = this.envoy.dec;
    const msg: EnvoyRequest = {
      request_headers: {
        headers: this.headerMap({
          ':method': p.method,
          ':path': p.path,
          ':authority': 'gw',
          ':scheme': 'http',
          'content-type': 'application/json',
          'x-request-id': `fuzz-${Math.floor(this.rnd() * 1e9)}`,
          [DESTINATION_HEADER]: '6.6.6.6:6',
        }),
        end_of_stream: p.chunks === undefined,
      },
    };
    if (p.subset !== undefined) {
      const values =
        p.subset === 'ok'
          ? this.fleet.endpoints.map((e) => ({ stringValue: e }))
          : [{ stringValue: '9.9.9.9:9' }];
      msg.metadata_context = {
        filter_metadata: { [SUBSET_HINT_NAMESPACE]: { fields: { [SUBSET_KEY]: { listValue: { values } } } } },
      };
    }
    dec.headersSent = true;
    if (!this.envoy.cfg.observability) dec.cb = 'headers';
    if (p.chunks === undefined) dec.bodyEnded = true;
    this.requestMessages++;
    this.send(msg, `request_headers eos=${p.chunks === undefined}`);
  }

  /** The message that completes the request is about to go: hold or fail the prefill leg as planned. */
  private completesRequest(last: boolean): boolean {
    return last && 'hold' in (this.plan.prefill ?? {});
  }

  private async sendRequestBody(): Promise<void> {
    const p = this.plan;
    const dec = this.envoy.dec;
    const chunks = p.chunks ?? [];
    let body: Buffer;
    let eos: boolean;
    let withoutMessage = false;
    if (dec.mode === BUFFERED) {
      body = Buffer.concat(chunks);
      eos = !p.requestTrailers;
      this.chunkIndex = chunks.length + 1;
    } else if (this.chunkIndex < chunks.length) {
      body = chunks[this.chunkIndex] as Buffer;
      this.chunkIndex++;
      eos = this.chunkIndex === chunks.length && !p.emptyLast && !p.requestTrailers;
    } else {
      body = Buffer.alloc(0);
      this.chunkIndex++;
      eos = !p.requestTrailers;
      withoutMessage = p.emptyLast === 'without_message';
    }
    const last = this.chunkIndex >= this.bodyMessages() || dec.mode === BUFFERED;
    if (last) dec.bodyEnded = true;
    if (eos) dec.endSent = true;
    dec.bodyReceived = true;
    dec.sent.push(body);
    if (!this.envoy.cfg.observability) {
      if (dec.mode !== FDS) dec.queued.push(last);
      if (dec.cb !== 'headers') dec.cb = 'body';
    }
    this.requestMessages++;
    const hold = this.completesRequest(last && (!p.requestTrailers || dec.mode !== FDS));
    if (hold) this.armHold();
    this.send(
      {
        request_body: {
          body,
          end_of_stream: eos,
          ...(withoutMessage ? { end_of_stream_without_message: true } : {}),
        },
      },
      `request_body ${body.length}B eos=${eos}${withoutMessage ? ' without_message' : ''}`,
    );
    if (hold) await this.duringPrefill();
  }

  private async sendRequestTrailers(): Promise<void> {
    const dec = this.envoy.dec;
    dec.trailersSent = true;
    dec.bodyEnded = true;
    dec.endSent = true;
    if (!this.envoy.cfg.observability && dec.cb === 'idle') dec.cb = 'trailers';
    this.requestMessages++;
    const hold = this.completesRequest(dec.mode === FDS);
    if (hold) this.armHold();
    this.send({ request_trailers: { trailers: this.headerMap({ 'x-t': '1' }) } }, 'request_trailers');
    if (hold) await this.duringPrefill();
  }

  private sendLocalReply(): void {
    this.envoy.localReplied = true;
    this.sendResponseHeaders(true);
  }

  private sendResponseHeaders(local: boolean): void {
    const e = this.envoy;
    const r = this.plan.response;
    const status = local ? this.plan.localStatus : r.status;
    const eos = local ? false : r.headersEos;
    this.responseStarted = true;
    e.enc.headersSent = true;
    if (!e.cfg.observability) e.enc.cb = 'headers';
    if (eos) e.enc.bodyEnded = true;
    if (eos || local) e.dec.abandoned = true;
    const msg: EnvoyRequest = {
      response_headers: {
        headers: this.headerMap({ ':status': String(status), 'content-type': 'text/event-stream' }),
        end_of_stream: eos,
      },
    };
    if (!local && r.servedOther) {
      const other = this.fleet.endpoints[1] as string;
      msg.metadata_context = {
        filter_metadata: { 'envoy.lb': { fields: { [SERVED_ENDPOINT_KEY]: { stringValue: other } } } },
      };
    }
    this.send(msg, `response_headers ${status}${local ? ' (local reply)' : ''} eos=${eos}`);
  }

  private sendResponseBody(chunks: readonly Buffer[], total: number): void {
    const e = this.envoy;
    const enc = e.enc;
    const r = this.plan.response;
    let body: Buffer;
    const trailers = !e.localReplied && r.trailers;
    if (enc.mode === BUFFERED) {
      body = Buffer.concat(chunks);
      this.responseChunkIndex = total;
    } else {
      body = (chunks[this.responseChunkIndex] as Buffer | undefined) ?? Buffer.alloc(0);
      this.responseChunkIndex++;
    }
    const last = this.responseChunkIndex >= total;
    const eos = last && !trailers;
    if (last) enc.bodyEnded = true;
    enc.bodyReceived = true;
    enc.sent.push(body);
    if (!e.cfg.observability) {
      if (enc.mode !== FDS) enc.queued.push(last);
      else enc.unechoed++;
      if (enc.cb !== 'headers') enc.cb = 'body';
    }
    if (eos) e.dec.abandoned = true;
    this.send({ response_body: { body, end_of_stream: eos } }, `response_body ${body.length}B eos=${eos}`);
  }

  private sendResponseTrailers(): void {
    const enc = this.envoy.enc;
    this.responseTrailersSent = true;
    enc.trailersSent = true;
    enc.bodyEnded = true;
    if (!this.envoy.cfg.observability && enc.cb === 'idle') enc.cb = 'trailers';
    this.envoy.dec.abandoned = true;
    this.send(
      { response_trailers: { trailers: this.headerMap({ 'grpc-status': '0' }) } },
      'response_trailers',
    );
  }

  // --- the prefill leg

  private armPrefillFault(): void {
    const pf = this.plan.prefill;
    if (pf === undefined || !('fault' in pf)) return;
    this.trace.push(`   (prefill fault on ${pf.fault} prefill worker(s))`);
    const sims = pf.fault === 'all' ? prefillSims : prefillSims.slice(0, 1);
    for (const s of sims) s.injectFault({ status: 500 });
    this.envoy.serverResetAllowed = this.plan.fleet === 'pd-concurrent';
  }

  private armHold(): void {
    for (const s of prefillSims) this.holds.push(s.hold({ stream: false }));
  }

  /** The prefill leg is in flight (or the request was answered without one): act as planned. */
  private async duringPrefill(): Promise<void> {
    const pf = this.plan.prefill as { hold: string };
    let timer: NodeJS.Timeout | undefined;
    const reached = await Promise.race([
      Promise.race(this.holds.map((h) => h.reached())).then(() => true),
      this.stream.activity().then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), HANG_MS))),
    ]);
    clearTimeout(timer);
    this.trace.push(`   (prefill ${reached ? 'held' : 'not reached'}; then ${pf.hold})`);
    if (reached) {
      if (pf.hold === 'local') this.sendLocalReply();
      else if (pf.hold !== 'none') this.close(pf.hold as EnvoyClose, 'during the prefill');
    }
    for (const h of this.holds) h.release();
  }
}

// ---------------------------------------------------------------------------------------------

async function streamsActive(router: Router): Promise<number> {
  const m = await router.metrics.streamsActive.get();
  return m.values[0]?.value ?? 0;
}

async function runCase(seed: number, index: number, sessions: Map<FleetName, http2.ClientHttp2Session>) {
  const rnd = seededRandom(seed * 1_000_003 + index);
  const plan = makePlan(rnd);
  const fleet = fleets.get(plan.fleet)!;
  let session = sessions.get(plan.fleet);
  if (!session || session.closed || session.destroyed) {
    session = http2.connect(`http://127.0.0.1:${fleet.router.grpcPort}`);
    session.on('error', () => undefined);
    sessions.set(plan.fleet, session);
  }
  const driver = new Driver(rnd, plan, fleet, session);
  let minLoad = 0;
  const watch = setInterval(() => {
    for (const w of fleet.router.workers()) minLoad = Math.min(minLoad, w.load);
  }, 1);
  try {
    await driver.run();
    await driver.finished();
    await waitFor(async () => (await streamsActive(fleet.router)) === 0, { timeoutMs: HANG_MS }).catch(() =>
      driver.envoy.errors.push('the router kept the session open after Envoy closed the stream'),
    );
    await waitFor(() => fleet.router.workers().every((w) => w.load === 0), { timeoutMs: HANG_MS }).catch(
      () => undefined,
    );
  } finally {
    clearInterval(watch);
  }
  for (const w of fleet.router.workers()) minLoad = Math.min(minLoad, w.load);
  const e = driver.envoy;
  const errors = [...e.errors];
  const loads = fleet.router.workers().filter((w) => w.load !== 0);
  if (loads.length > 0) errors.push(`loads left: ${loads.map((w) => `${w.key}=${w.load}`).join(', ')}`);
  if (minLoad < 0) errors.push(`a load went negative (${minLoad})`);
  if (e.immediate && /internal_error/.test(e.immediate.details)) {
    errors.push(`the router answered a legal order with ${e.immediate.status} ${e.immediate.details}`);
  }
  // STREAMED request bodies are not supported (the router cannot route on them: Envoy sends the
  // headers on before the body): a request with a body is refused at its headers, saying so.
  if (e.cfg.requestBody === STREAMED && !e.cfg.observability && plan.chunks !== undefined) {
    if (e.dec.headersAnswered) {
      errors.push('the router answered the headers of a STREAMED request body instead of refusing it');
    } else if (e.immediate && !/unsupported_processing_mode/.test(e.immediate.details)) {
      errors.push(`a STREAMED request body was answered ${e.immediate.status} ${e.immediate.details}`);
    }
  }
  // FULL_DUPLEX_STREAMED: every body byte comes back (the regular fleet rewrites no body).
  if (plan.fleet === 'regular' && e.routed && e.dec.mode === FDS && e.dec.bodyAnswered) {
    if (!Buffer.concat(e.dec.echoed).equals(Buffer.concat(e.dec.sent))) {
      errors.push('the request body echoed in FULL_DUPLEX_STREAMED differs from the one Envoy sent');
    }
  }
  if (unhandled.length > 0) errors.push(`unhandled: ${unhandled.splice(0).map(String).join('; ')}`);
  return { plan, errors, trace: e.trace };
}

describe('ext_proc sessions under the message orders Envoy 1.40 produces', () => {
  for (const seed of SEEDS) {
    it(
      `seed ${seed}: every reply is the one Envoy waits for, and every load returns to 0`,
      { timeout: 300_000 },
      async () => {
        const sessions = new Map<FleetName, http2.ClientHttp2Session>();
        const failures: string[] = [];
        try {
          for (let i = 0; i < CASES_PER_SEED; i++) {
            if (process.env.FUZZ_CASE && Number(process.env.FUZZ_CASE) !== i) continue;
            const { plan, errors, trace } = await runCase(seed, i, sessions);
            if (errors.length > 0) {
              failures.push(
                [
                  `seed ${seed} case ${i}: ${errors.join(' | ')}`,
                  `  fleet ${plan.fleet}, ${JSON.stringify({ ...plan.config, kind: plan.kind, path: plan.path })}`,
                  ...trace.map((t) => `  ${t}`),
                ].join('\n'),
              );
            }
          }
        } finally {
          for (const s of sessions.values()) s.close();
        }
        expect(failures.slice(0, 3).join('\n\n')).toBe('');
      },
    );
  }
});
