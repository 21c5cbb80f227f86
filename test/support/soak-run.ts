/**
 * The chaos soak (issue 7): real Envoy, the router (in-process, or replicas: below), 8 simulated
 * workers, a concurrent streaming load, and faults, for a bounded duration. Shared by `npm run soak` (bench/soak.ts) and the
 * short CI version (test/e2e/soak.test.ts).
 *
 * Load: `concurrency` client loops (default 32) send completions, chat completions (30%), Anthropic
 * Messages API requests (10%) and Responses API requests (15%) through Envoy until the deadline; 70% stream. Each prompt starts with a unique tag (`soak<n>`) so a simulator
 * record can be traced back to its client.
 *
 * Faults, per request (seeded PRNG):
 *  - abortRate (30%): the client aborts at a random point: after 0-4 response chunks, or after a random
 *    0-400 ms timer (which may fire before the response headers);
 *  - resetRate (10%): a `resetAfterChunks` fault (1-4) is queued on a random live worker (regular or
 *    decode): the next generation request there is reset mid-stream (before the headers when it does
 *    not stream, which Envoy turns into a 503);
 *  - timeoutRate (5%, pd mode): a `delayMs` fault longer than Envoy's ext_proc message_timeout (2 s)
 *    is queued on a random prefill worker: the router waits for that prefill leg while Envoy gives up
 *    on the ext_proc message, answers the client itself and cancels the ext_proc stream. (Envoy
 *    strips a client's `x-envoy-upstream-rq-timeout-ms`, and the rendered config has no route
 *    timeout option, so the regular run has no Envoy-timeout fault.)
 * Chaos, every `chaosIntervalMs` (default 1 s), on a worker no other action holds (at most 2 at once,
 * and never the last free worker of a role), in turn: kill it and restart it on the same port after
 * 0.1-2x the TTL (so sometimes it expires and re-registers as a new generation), or stop its
 * heartbeats for 0.5-2.5x the TTL (it expires, then re-registers), or (one router) put it to sleep
 * through the admin API (`POST /workers/sleep`: cordon, drain, vLLM's sleep) for 0.2-1.5 s and wake
 * it (`POST /workers/wake_up`): no request may reach it asleep (`sleeps.requestsWhileAsleep`). The
 * kinds take turns rather than follow a coin, and the run goes on (at most a minute more) until one
 * of each has completed: on a loaded CI host a short run once fit only silences.
 *
 * The router runs with active health checks (1 s) and circuit breakers (2 s cool-down) on, so their
 * reactions to the chaos are part of the run (`no_workers` in `routerOutcomes` counts the requests
 * that found a whole role unselectable).
 *
 * Client outcomes: `ok` (200 and a complete body), `http_error` (a status >= 400; clear when its
 * body is not empty, or when it is Envoy's empty-bodied 504 local reply to an ext_proc message
 * timeout, which Envoy's `message_timeouts` stat must account for), `aborted` (by the client), `reset` (the connection broke after the headers;
 * `explained` when the simulator recorded an injected reset for that tag or the worker was killed
 * while serving it, or, fail-closed, a router replica crashed while it was in flight), and the violations: `no_status` (the request failed before any HTTP status
 * without the client aborting) and `stuck` (no end after 30 s).
 *
 * Accounting: Envoy opens one ext_proc stream per request it hands to the router
 * (`http.llm.ext_proc.streams_started`); the router counts each stream exactly once when it ends
 * (`vllm_router_requests_total`, summed over route and outcome). So routerTotal == envoyStreams, and
 * sent - envoyStreams is the number of requests Envoy never passed to the router: only clients that
 * aborted before their response headers can be among them (`abortedBeforeHeaders` bounds it).
 *
 * KV events (`kvEvents`): the simulators tokenize with the fixture tokenizer, keep 64-block prefix
 * caches (so they evict all along) and publish KV events with a replay endpoint, on ports fixed per
 * worker (soak-fleet.ts); the router subscribes and routes in exact mode. The chaos then also kills
 * publishers mid-batch, restarts them on the same endpoints (sequence from 0, AllBlocksCleared) and,
 * through silenced heartbeats, re-registers workers as new generations (empty index, replay). Once the
 * fleet is quiet, the router's index of every live worker must hold as many blocks as the worker's
 * cache (`kvIndex.mismatches`; checked to catch a 1% loss of BlockRemoved events within 15 s).
 *
 * Replicas (`replicas` >= 2): the routers are the real CLI as child processes on ports
 * fixed for the run (soak-routers.ts), behind Envoy's health checks, outlier detection, stream retries
 * and session hashing (30% of requests carry an `x-session-id`), as the generated
 * envoy/envoy-replicas*.yaml. The fleet heartbeats to every replica. Every `replicaChaosIntervalMs`
 * (default 4 s), once Envoy has every replica in rotation, a random replica is in turn SIGKILLed (a
 * crash; restarted 0.2-1.5 s later) or SIGTERMed (a rolling restart: it drains, exits, and starts
 * again). Fail-closed, a request in flight at a crash may fail (a 503 or a cut stream: the ones the
 * dead replica had answered); nothing else may, and with `failOpen` not even those. At the end every
 * replica must be back, know every worker, show loads of 0 and (KV events) an index equal to the
 * workers' caches: a restarted replica rebuilds it by replay. A replica's counters die with it, so
 * the books below are checked with one router only.
 *
 * Memory: process.memoryUsage() every second (after a full GC when the runtime allows it, so the heap
 * figure is live data, not garbage); the slopes are least-squares over the samples after warm-up.
 * Everything (router, simulators, clients) runs in this one process, so the slope is an upper bound
 * for the router's own growth (with replicas, the routers are not in it).
 */
import { fileURLToPath } from 'node:url';
import v8 from 'node:v8';
import vm from 'node:vm';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { HfTokenizer } from '../../src/tokenize/hf-tokenizer.js';
import { reservePorts } from './free-ports.js';
import { SoakFleet, type FleetRole, type FleetWorker, type SoakFleetKvEvents } from './soak-fleet.js';
import { SoakRouters, type SoakReplica } from './soak-routers.js';
import { linearSlope, randomInt, seededRandom } from './soak-stats.js';

export interface SoakOptions {
  mode: 'regular' | 'pd';
  durationS: number;
  concurrency?: number;
  workers?: number;
  seed?: number;
  abortRate?: number;
  resetRate?: number;
  timeoutRate?: number;
  /** Samples before this are not used for the memory slope. Default min(20, durationS / 4). */
  warmupS?: number;
  chaosIntervalMs?: number;
  ttlMs?: number;
  heartbeatMs?: number;
  /** Progress lines (one every 10 s). */
  log?: (line: string) => void;
  /**
   * Exact prefix routing under the chaos: the workers publish KV events (fixed ports, replay
   * endpoints, small caches) and the router subscribes and tokenizes with the fixture tokenizer.
   * After the run, each worker's index must converge to the worker's own cache (`kvIndex`).
   */
  kvEvents?: boolean;
  /**
   * Router replicas behind Envoy. 1 (the default): the router runs in this process.
   * More: each is the real CLI as a child process, and the replica chaos kills or drains one of them
   * every `replicaChaosIntervalMs` (default 4 s) and starts it again on the same ports; the run then
   * lasts at least until one replica was crashed and one drained (at most 60 s past `durationS`).
   */
  replicas?: number;
  replicaChaosIntervalMs?: number;
  /** Envoy fails open (`failure_mode_allow`, fallback to its own balancing over the workers). */
  failOpen?: boolean;
  /**
   * Fallback endpoints: Envoy's worker cluster is the override_host policy over the fleet's fixed
   * ports with one retry, and the router names one fallback endpoint (`--fallback-endpoints 1`), so a
   * request routed to a killed worker is served by the next one and its load follows (`failovers`).
   */
  fallback?: boolean;
}

export interface SoakSummary {
  mode: 'regular' | 'pd';
  seed: number;
  durationS: number;
  concurrency: number;
  workers: number;
  requests: number;
  ok: number;
  httpErrors: Record<string, number>;
  /** The first body seen for each error status (what the client was told). */
  httpErrorSamples: Record<string, string>;
  unclearHttpErrors: number;
  aborts: { total: number; beforeHeaders: number };
  resets: { injected: number; observed: number; explained: number; unexplained: number };
  /** clientSaw504: Envoy's empty-bodied 504 local replies (each must be one of Envoy's message timeouts). */
  timeouts: { prefillDelaysInjected: number; envoyMessageTimeouts: number; clientSaw504: number };
  violations: { noStatus: number; stuck: number; samples: string[] };
  restarts: number;
  heartbeatPauses: number;
  /**
   * One router: the sleep chaos. `slept` workers were put to sleep (and woken); `skipped` counts the
   * attempts the router declined by status (404: not registered at that moment; 409: the drain did
   * not finish in time, nothing slept); `requestsWhileAsleep` must be 0; `errors` are other answers.
   */
  sleeps?: SleepStats;
  /** Every live replica's loads once the fleet is quiet (`replica` is its index). */
  finalLoads: Array<{ replica: number; url: string; role: string; load: number }>;
  /** Per live replica, the workers it knows once the fleet is quiet (each must know all of them). */
  workersKnown: number[];
  simulatorsInFlight: number;
  routerStreamsActive: number;
  routerAlive: boolean;
  /**
   * With replicas: the replica chaos. `inFlightAtCrash` counts the client requests in flight at a
   * SIGKILL; fail-closed, those the dead replica held may fail (`failedAtCrash` of them did), and
   * fail-open none may;
   * `errors` are chaos actions that went wrong (a replica that would not drain or start).
   */
  replicas?: {
    count: number;
    failOpen: boolean;
    kills: number;
    drains: number;
    restarts: number;
    inFlightAtCrash: number;
    failedAtCrash: number;
    /** Streams drained replicas handed back to Envoy (their log), which must complete all the same. */
    releasedAtDrain: number;
    errors: string[];
    /** What the replica chaos did, when (seconds into the run). */
    events: string[];
  };
  /** Envoy's view of its connections to the router (reconnects, resets). */
  envoyRouterCluster: Record<string, number>;
  /** With `fallback`: requests the router saw served on another endpoint than the one it chose. */
  failovers?: number;
  /**
   * With `kvEvents`: once the fleet is quiet, the router's index of each worker against the blocks
   * the worker's cache holds (`mismatches` must be empty), and the event counters over the run.
   */
  kvIndex?: {
    workers: Array<{ replica: number; url: string; indexed: number; cached: number }>;
    mismatches: Array<{ replica: number; url: string; indexed: number; cached: number }>;
    applied: number;
    dropped: Record<string, number>;
    gaps: number;
    replays: Record<string, number>;
    resets: Record<string, number>;
  };
  /**
   * The books. With replicas the router side is the sum over the replicas alive at the end, whose
   * counters started at their last start: it cannot equal Envoy's streams, and is not checked.
   * One router: it counts every ext_proc stream Envoy opened once, plus at most one more per stream
   * Envoy retried (`retry_on: reset`: a stream reset before the router answered may have reached it;
   * its retry is a second gRPC stream of the same request).
   */
  accounting: {
    sent: number;
    envoyExtProcStreams: number;
    /** Envoy's ext_proc stream retries (cluster.vllm_router.upstream_rq_retry). */
    envoyStreamRetries: number;
    routerRequestsTotal: number;
    notReachingRouter: number;
    routerOutcomes: Record<string, number>;
    checked: boolean;
  };
  memory: {
    samples: number;
    warmupS: number;
    gc: boolean;
    heapUsedStartMB: number;
    heapUsedEndMB: number;
    rssStartMB: number;
    rssEndMB: number;
    heapSlopeBytesPerS: number;
    rssSlopeBytesPerS: number;
  };
}

const TIMING = { overheadMs: 5, baseItlMs: 15, prefillMsPerToken: 0.02 };
const TOKENIZER_DIR = fileURLToPath(new URL('../fixtures/tokenizer', import.meta.url));
/** Blocks per worker with KV events: a few of the soak's ~14-block prompts, so caches evict all along. */
const KV_CACHE_BLOCKS = 64;
/**
 * Tokenizer piece caches (router and simulators) with KV events: ~600 of the soak's unique prompts,
 * so they are full within seconds, as the tree below, and growth after warm-up is not a cache filling.
 */
const TOKENIZER_CACHE_CHARS = 256 * 1024;
const MESSAGE_TIMEOUT_S = 2;
const ENVOY_ROUTER_CLUSTER_STATS = [
  'upstream_cx_total',
  'upstream_cx_destroy_remote_with_active_rq',
  'upstream_cx_protocol_error',
  'upstream_rq_retry',
  'upstream_rq_retry_success',
  'upstream_rq_retry_overflow',
  'upstream_rq_retry_limit_exceeded',
  'upstream_cx_connect_fail',
  'upstream_cx_none_healthy',
  'upstream_rq_pending_failure_eject',
  'outlier_detection.ejections_enforced_total',
  'upstream_rq_tx_reset',
  'upstream_rq_rx_reset',
  'http2.rx_reset',
  'http2.tx_reset',
  'http2.goaway_sent',
];
const SAFETY_TIMEOUT_MS = 30_000;
/** With replicas, 30% of requests carry a session key, which Envoy hashes over the replicas. */
const SESSION_HEADER = 'x-session-id';
const PREFIXES = Array.from({ length: 8 }, (_, i) => `System prompt ${i}: `.padEnd(400, `ctx${i} `));

/** The tools every chat request carries (an agent's: the routing text and the simulators render them). */
const SOAK_TOOLS = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Reads a file of the repository.',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

/** A chat request's messages: the question (first: its tag is read there), a tool call and its result. */
function agentTurn(text: string, tag: string): unknown[] {
  const call = {
    id: `call_${tag}`,
    type: 'function',
    function: { name: 'read_file', arguments: '{"path": "a.ts"}' },
  };
  return [
    { role: 'user', content: text },
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: `${tag}: export const a = 1;` },
  ];
}

type AbortPlan = { chunks: number } | { ms: number } | undefined;
type ClientOutcome = 'ok' | 'http_error' | 'aborted' | 'reset' | 'no_status' | 'stuck';

export async function runSoak(opts: SoakOptions): Promise<SoakSummary> {
  const seed = opts.seed ?? 7;
  const rand = seededRandom(seed);
  const concurrency = opts.concurrency ?? 32;
  const size = opts.workers ?? 8;
  const ttlMs = opts.ttlMs ?? 1500;
  const heartbeatMs = opts.heartbeatMs ?? 300;
  const abortRate = opts.abortRate ?? 0.3;
  const resetRate = opts.resetRate ?? 0.1;
  const timeoutRate = opts.timeoutRate ?? 0.05;
  const warmupS = opts.warmupS ?? Math.min(20, opts.durationS / 4);
  const log = opts.log ?? (() => undefined);
  const target: FleetRole = opts.mode === 'regular' ? 'regular' : 'decode';
  const kv = opts.kvEvents === true ? await kvFleet(size) : undefined;
  const replicaCount = opts.replicas ?? 1;
  const failOpen = opts.failOpen === true;
  const fallback = opts.fallback === true;

  let routers: SoakRouters | undefined;
  let envoy: EnvoyHandle | undefined;
  let fleet: SoakFleet | undefined;
  const gc = exposeGc();
  const memory: Array<{ t: number; heap: number; rss: number }> = [];
  let memTimer: NodeJS.Timeout | undefined;
  try {
    routers = await SoakRouters.start(
      routerArgs(opts.mode, ttlMs, kv, replicaCount > 1, fallback),
      replicaCount,
    );
    const r = routers;
    const inFlight = new Set<string>();
    fleet = await SoakFleet.start({
      mode: opts.mode,
      routers: {
        adminPorts: () => r.live().map((x) => x.adminPort),
        discoveryEndpoint: r.discoveryEndpoint,
      },
      size,
      heartbeatMs,
      timing: TIMING,
      tagOf,
      clientInFlight: (tag) => inFlight.has(tag),
      ...(kv !== undefined ? { kvEvents: kv } : {}),
    });
    const f = fleet;
    const everyReplicaKnowsAll = async () =>
      (await Promise.all(r.live().map((x) => r.workers(x)))).every((ws) => ws.length === size);
    await until(everyReplicaKnowsAll, 15_000, 'every worker registered');
    envoy = await startEnvoy({
      routers: r.endpoints(),
      messageTimeout: `${MESSAGE_TIMEOUT_S}s`,
      // Replicas: Envoy health-checks them (a draining or restarting one gets no new streams) and
      // hashes sessions, else prompt openings, over them, as the generated envoy/envoy-replicas*.yaml do.
      ...(r.replicated
        ? { routerHealthCheck: true, replicaAffinityHeader: SESSION_HEADER, replicaPrefixKey: true }
        : {}),
      ...(failOpen
        ? { failOpen: { fallbackWorkers: f.workers.map((w) => ({ host: '127.0.0.1', port: w.port })) } }
        : {}),
      ...(fallback
        ? { fallback: { workers: f.workers.map((w) => ({ host: '127.0.0.1', port: w.port })), retries: 1 } }
        : {}),
    });
    const e = envoy;
    // In rotation: passing Envoy's health check and not ejected by its outlier detection.
    const allReplicasHealthy = async () => {
      const stats = await e.stats(
        'cluster\\.vllm_router\\.(membership_healthy|outlier_detection\\.ejections_active)$',
      );
      return (
        stat(stats, 'cluster.vllm_router.membership_healthy') === replicaCount &&
        stat(stats, 'cluster.vllm_router.outlier_detection.ejections_active') === 0
      );
    };
    if (r.replicated) await until(allReplicasHealthy, 15_000, 'every replica healthy in Envoy');
    const url = `http://127.0.0.1:${envoy.listenerPort}`;

    const t0 = performance.now();
    const deadline = t0 + opts.durationS * 1000;
    const sample = () => {
      gc?.();
      const m = process.memoryUsage();
      memory.push({ t: (performance.now() - t0) / 1000, heap: m.heapUsed, rss: m.rss });
    };
    sample();
    memTimer = setInterval(sample, 1000);
    memTimer.unref();

    // ---- client load ----
    const counts = {
      sent: 0,
      ok: 0,
      aborted: 0,
      abortedBeforeHeaders: 0,
      resetsInjected: 0,
      resets: 0,
      explained: 0,
      unclear: 0,
      envoyTimeoutReplies: 0,
      prefillDelays: 0,
      noStatus: 0,
      stuck: 0,
      failedAtCrash: 0,
    };
    // Fail-closed: the requests in flight when a replica was SIGKILLed (the ones it held may fail).
    const inFlightAtCrash = new Set<string>();
    let inFlightAtCrashTotal = 0;
    const crashExplains = (tag: string): boolean => {
      if (!inFlightAtCrash.has(tag)) return false;
      counts.failedAtCrash++;
      return true;
    };
    const httpErrors: Record<string, number> = {};
    const errorSamples: Record<string, string> = {};
    const violationSamples: string[] = [];
    const elapsed = () => ((performance.now() - t0) / 1000).toFixed(2);
    const violation = (s: string) => {
      if (violationSamples.length < 20) violationSamples.push(`${s} (t=${elapsed()} s)`);
    };

    const explainReset = (tag: string): boolean => {
      if (f.killedInFlight.has(tag)) return true;
      for (const sim of f.live(target)) {
        for (let i = sim.records.length - 1; i >= 0; i--) {
          const rec = sim.records[i]!;
          if (tagOf(rec.body) === tag) return rec.outcome === 'reset';
        }
      }
      return false;
    };

    const one = async (n: number): Promise<ClientOutcome> => {
      const tag = `soak${n}`;
      const stream = rand() < 0.7;
      // One draw for the kind: chat 30%, Responses API 15% (its body is rewritten: the response id),
      // completions the rest.
      const kind = rand();
      const chat = kind < 0.3;
      const responses = kind >= 0.85;
      const messages = kind >= 0.75 && !responses;
      const maxTokens = randomInt(rand, 4, 24);
      const text = `${tag} ${PREFIXES[randomInt(rand, 0, PREFIXES.length - 1)]} question ${rand()}`;
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (r.replicated && rand() < 0.3) headers[SESSION_HEADER] = `user${randomInt(rand, 0, 15)}`;
      if (rand() < resetRate) {
        const sims = f.live(target);
        if (sims.length > 0) {
          pick(rand, sims).injectFault({ resetAfterChunks: randomInt(rand, 1, 4) });
          counts.resetsInjected++;
        }
      }
      if (opts.mode === 'pd' && rand() < timeoutRate) {
        const sims = f.live('prefill');
        if (sims.length > 0) {
          pick(rand, sims).injectFault({ delayMs: MESSAGE_TIMEOUT_S * 1000 + 1000 });
          counts.prefillDelays++;
        }
      }
      const abortPlan: AbortPlan =
        rand() < abortRate
          ? rand() < 0.6
            ? { chunks: randomInt(rand, 0, 4) }
            : { ms: randomInt(rand, 0, 400) }
          : undefined;
      const body = chat
        ? {
            model: 'sim-model',
            messages: agentTurn(text, tag),
            tools: SOAK_TOOLS,
            max_tokens: maxTokens,
            stream,
          }
        : responses
          ? { model: 'sim-model', input: text, max_output_tokens: maxTokens, stream }
          : messages
            ? {
                model: 'sim-model',
                system: [{ type: 'text', text: `x-anthropic-billing-header: cch=${tag};` }],
                messages: [{ role: 'user', content: text }],
                max_tokens: maxTokens,
                stream,
              }
            : { model: 'sim-model', prompt: text, max_tokens: maxTokens, stream };
      const path = chat
        ? '/v1/chat/completions'
        : responses
          ? '/v1/responses'
          : messages
            ? '/v1/messages'
            : '/v1/completions';

      const ac = new AbortController();
      let clientAborted = false;
      let gotHeaders = false;
      let safetyFired = false;
      let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
      // undici: aborting the signal does not always settle a pending read() of a body that already
      // arrived in full; cancelling the reader does.
      const stop = () => {
        ac.abort();
        reader?.cancel().catch(() => undefined);
      };
      const abort = () => {
        if (clientAborted) return;
        clientAborted = true;
        if (!gotHeaders) counts.abortedBeforeHeaders++;
        stop();
      };
      const safety = setTimeout(() => {
        safetyFired = true;
        stop();
      }, SAFETY_TIMEOUT_MS);
      const abortTimer = abortPlan && 'ms' in abortPlan ? setTimeout(abort, abortPlan.ms) : undefined;
      counts.sent++;
      inFlight.add(tag);
      try {
        const res = await fetch(`${url}${path}`, {
          method: 'POST',
          headers,
          body: JSON.stringify(body),
          signal: ac.signal,
        });
        gotHeaders = true;
        if (res.status !== 200) {
          const errText = await res.text();
          clearTimeout(abortTimer);
          httpErrors[res.status] = (httpErrors[res.status] ?? 0) + 1;
          errorSamples[res.status] ??= errText.slice(0, 160);
          if (errText.length === 0 && res.status === 504 && res.headers.get('server') === 'envoy') {
            counts.envoyTimeoutReplies++;
          } else if (errText.length === 0 && crashExplains(tag)) {
            // Envoy's empty local reply to an ext_proc stream its replica's crash broke.
          } else if (errText.length === 0) {
            counts.unclear++;
            violation(`${tag}${keyed(headers)}: ${res.status} with an empty body`);
          }
          return 'http_error';
        }
        reader = res.body!.getReader();
        const decoder = new TextDecoder();
        let all = '';
        let chunks = 0;
        if (abortPlan && 'chunks' in abortPlan && abortPlan.chunks === 0) abort();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          all += decoder.decode(value, { stream: true });
          chunks++;
          if (abortPlan && 'chunks' in abortPlan && chunks >= abortPlan.chunks) abort();
        }
        clearTimeout(abortTimer);
        if (clientAborted) {
          counts.aborted++;
          return 'aborted';
        }
        if (safetyFired) {
          counts.stuck++;
          violation(`${tag}: no end after ${SAFETY_TIMEOUT_MS} ms`);
          return 'stuck';
        }
        const complete = responses
          ? stream
            ? all.includes('event: response.completed')
            : completedResponse(all)
          : messages
            ? stream
              ? all.includes('event: message_stop')
              : all.includes('"type":"message"')
            : stream
              ? all.includes('data: [DONE]')
              : all.includes('"choices"');
        if (complete) {
          counts.ok++;
          return 'ok';
        }
        violation(`${tag}: 200 with an incomplete body`);
        counts.noStatus++;
        return 'no_status';
      } catch (err) {
        clearTimeout(abortTimer);
        if (clientAborted) {
          counts.aborted++;
          return 'aborted';
        }
        if (safetyFired) {
          counts.stuck++;
          violation(`${tag}: no end after ${SAFETY_TIMEOUT_MS} ms`);
          return 'stuck';
        }
        if (gotHeaders) {
          counts.resets++;
          if (explainReset(tag) || crashExplains(tag)) counts.explained++;
          else violation(`${tag}${keyed(headers)}: unexplained reset (${(err as Error).message})`);
          return 'reset';
        }
        if (crashExplains(tag)) return 'no_status';
        counts.noStatus++;
        violation(
          `${tag}: failed before any status: ${(err as Error).message} ${String((err as Error).cause ?? '')}`,
        );
        return 'no_status';
      } finally {
        clearTimeout(safety);
        clearTimeout(abortTimer);
        f.killedInFlight.delete(tag);
        inFlightAtCrash.delete(tag);
        inFlight.delete(tag);
      }
    };

    // The run also lasts (at most a minute more) until the worker chaos has completed a restart and a
    // heartbeat pause, and with replicas until the replica chaos has crashed one replica and drained
    // one: on a starved machine the first actions can take most of a short run.
    const running = (): boolean => {
      const now = performance.now();
      if (now < deadline) return true;
      if (now >= deadline + 60_000) return false;
      if (f.restarts === 0 || f.heartbeatPauses === 0) return true;
      if (sleeps !== undefined && sleeps.slept === 0) return true;
      return r.replicated && (r.kills === 0 || r.drains === 0);
    };
    // One router: the sleep chaos goes through its admin API (a cordon is local to one replica).
    const sleeps: SleepStats | undefined = r.replicated
      ? undefined
      : { slept: 0, skipped: {}, requestsWhileAsleep: 0, errors: [] };
    let seq = 0;
    const clients = Array.from({ length: concurrency }, async () => {
      while (running()) await one(seq++);
    });

    // ---- chaos ----
    const actions = new Set<Promise<void>>();
    let chaosActions = 0;
    const kinds = sleeps === undefined ? 2 : 3;
    const chaosTimer = setInterval(() => {
      const free = f.workers.filter((w) => !w.busy);
      if (f.workers.length - free.length >= 2) return;
      const candidates = free.filter((w) => free.filter((x) => x.role === w.role).length > 1);
      if (candidates.length === 0) return;
      const w = pick(rand, candidates);
      w.busy = true;
      const kind = chaosActions++ % kinds;
      const action =
        kind === 0
          ? killAndRestart(f, w, randomInt(rand, 100, 2 * ttlMs))
          : kind === 1
            ? silence(f, w, randomInt(rand, ttlMs / 2, 2.5 * ttlMs))
            : sleepAndWake(r.all()[0]!.adminPort, w, randomInt(rand, 200, 1500), sleeps!);
      const p = action.finally(() => {
        w.busy = false;
        actions.delete(p);
      });
      actions.add(p);
    }, opts.chaosIntervalMs ?? 1000);
    chaosTimer.unref();

    // ---- replica chaos: in turn a crash (SIGKILL) and a rolling restart (SIGTERM: drain, exit) of a
    // random replica, then a start on the same ports; one at a time, never the last replica up ----
    const replicaErrors: string[] = [];
    const replicaEvents: string[] = [];
    let replicaAction: Promise<void> | undefined;
    const replicaTimer = r.replicated
      ? setInterval(() => {
          const up = r.live();
          if (replicaAction !== undefined || up.length < 2) return;
          const victim = pick(rand, up);
          const crash = r.kills <= r.drains; // alternate: crash, rolling restart, crash, ...
          const downMs = randomInt(rand, 200, 1500);
          const event = (what: string) =>
            replicaEvents.push(`t=${elapsed()} s: replica ${victim.index} ${what}`);
          replicaAction = (async () => {
            const before = await e.stats(
              'cluster\\.vllm_router\\.(membership_healthy|outlier_detection\\.ejections_active)$',
            );
            event(
              `in Envoy: healthy ${stat(before, 'cluster.vllm_router.membership_healthy')}, ejected ${stat(before, 'cluster.vllm_router.outlier_detection.ejections_active')}; ${await routerHosts(e.adminPort)}`,
            );
            if (crash) {
              // Fail-open: Envoy carries on without the replica, so nothing in flight may fail.
              if (!failOpen) for (const tag of inFlight) inFlightAtCrash.add(tag);
              inFlightAtCrashTotal += inFlight.size;
              event('SIGKILL');
              await r.kill(victim.index);
              await sleep(downMs);
            } else {
              event('SIGTERM');
              await r.drain(victim.index);
              event('drained and exited');
            }
            await r.restart(victim.index);
            event('started');
            // The next action waits until Envoy has this replica back in rotation: with one replica
            // down and the other still warming up, a crash would leave none (Envoy's 503).
            await until(allReplicasHealthy, 30_000, 'replica healthy again in Envoy');
            event(`in rotation in Envoy (healthy, not ejected); ${await routerHosts(e.adminPort)}`);
          })()
            .catch((err: unknown) => void replicaErrors.push(String(err)))
            .finally(() => {
              replicaAction = undefined;
            });
        }, opts.replicaChaosIntervalMs ?? 4000)
      : undefined;
    replicaTimer?.unref();

    const progress = setInterval(() => {
      log(
        JSON.stringify({
          t: Math.round((performance.now() - t0) / 1000),
          sent: counts.sent,
          ok: counts.ok,
          aborted: counts.aborted,
          resets: counts.resets,
          restarts: f.restarts,
          heapMB: mb(process.memoryUsage().heapUsed),
        }),
      );
    }, 10_000);
    progress.unref();

    await Promise.all(clients);
    clearInterval(chaosTimer);
    clearInterval(replicaTimer);
    clearInterval(progress);
    clearInterval(memTimer);
    await Promise.all([...actions, replicaAction]);

    // ---- settle and check ----
    for (const w of f.workers) {
      if (!w.heartbeating) f.resumeHeartbeats(w);
      if (!w.sim) await f.restart(w);
    }
    for (const replica of r.all()) {
      if (!replica.up)
        await r.restart(replica.index).catch((err: unknown) => replicaErrors.push(String(err)));
    }
    const live = r.live();
    const loadsOf = async () =>
      (
        await Promise.all(
          live.map(async (x) => (await r.workers(x)).map((w) => ({ replica: x.index, ...w }))),
        )
      ).flat();
    const streamsActive = async () =>
      (await Promise.all(live.map((x) => r.metricSum(x, 'vllm_router_extproc_streams_active')))).reduce(
        (a, b) => a + b,
        0,
      );
    await until(everyReplicaKnowsAll, 15_000, 'every worker registered again').catch(() => undefined);
    await until(async () => (await loadsOf()).every((w) => w.load === 0), 10_000, 'loads 0').catch(
      () => undefined,
    );
    await until(() => f.sims().every((s) => s.inFlight() === 0), 10_000, 'simulators idle').catch(
      () => undefined,
    );
    await until(async () => (await streamsActive()) === 0, 10_000, 'ext_proc streams closed').catch(
      () => undefined,
    );

    const kvIndex = kv !== undefined ? await settleKvIndex(r, live, f) : undefined;

    const envoyStats = await envoy.stats('ext_proc');
    const clusterStats = await envoy.stats('cluster\\.vllm_router\\.');
    const envoyRouterCluster: Record<string, number> = {};
    for (const name of ENVOY_ROUTER_CLUSTER_STATS) {
      envoyRouterCluster[name] = stat(clusterStats, `cluster.vllm_router.${name}`);
    }
    const envoyStreams = stat(envoyStats, 'http.llm.ext_proc.streams_started');
    const outcomes: Record<string, number> = {};
    for (const x of live) {
      for (const [k, v] of Object.entries(await r.metricByLabel(x, 'vllm_router_requests_total', 'outcome')))
        outcomes[k] = (outcomes[k] ?? 0) + v;
    }
    const routerTotal = Object.values(outcomes).reduce((a, b) => a + b, 0);
    let failovers = 0;
    if (fallback) for (const x of live) failovers += await r.metricSum(x, 'vllm_router_failovers_total');
    const alive =
      live.length === replicaCount && (await Promise.all(live.map((x) => r.alive(x)))).every(Boolean);

    const after = memory.filter((m) => m.t >= warmupS);
    const first = after[0] ?? memory[0]!;
    const last = after.at(-1) ?? memory.at(-1)!;
    return {
      mode: opts.mode,
      seed,
      durationS: opts.durationS,
      concurrency,
      workers: size,
      requests: counts.sent,
      ok: counts.ok,
      httpErrors,
      httpErrorSamples: errorSamples,
      unclearHttpErrors: counts.unclear,
      aborts: { total: counts.aborted, beforeHeaders: counts.abortedBeforeHeaders },
      resets: {
        injected: counts.resetsInjected,
        observed: counts.resets,
        explained: counts.explained,
        unexplained: counts.resets - counts.explained,
      },
      timeouts: {
        prefillDelaysInjected: counts.prefillDelays,
        envoyMessageTimeouts: stat(envoyStats, 'http.llm.ext_proc.message_timeouts'),
        clientSaw504: counts.envoyTimeoutReplies,
      },
      violations: { noStatus: counts.noStatus, stuck: counts.stuck, samples: violationSamples },
      restarts: f.restarts,
      heartbeatPauses: f.heartbeatPauses,
      ...(sleeps !== undefined ? { sleeps } : {}),
      finalLoads: (await loadsOf()).map((w) => ({
        replica: w.replica,
        url: w.url,
        role: w.role,
        load: w.load,
      })),
      workersKnown: await Promise.all(live.map(async (x) => (await r.workers(x)).length)),
      simulatorsInFlight: f.sims().reduce((n, s) => n + s.inFlight(), 0),
      routerStreamsActive: await streamsActive(),
      routerAlive: alive,
      ...(r.replicated
        ? {
            replicas: {
              count: replicaCount,
              failOpen,
              kills: r.kills,
              drains: r.drains,
              restarts: r.restarts,
              inFlightAtCrash: inFlightAtCrashTotal,
              failedAtCrash: counts.failedAtCrash,
              releasedAtDrain: r.released,
              errors: replicaErrors,
              events: replicaEvents,
            },
          }
        : {}),
      envoyRouterCluster,
      ...(fallback ? { failovers } : {}),
      ...(kvIndex !== undefined ? { kvIndex } : {}),
      accounting: {
        sent: counts.sent,
        envoyExtProcStreams: envoyStreams,
        envoyStreamRetries: envoyRouterCluster.upstream_rq_retry ?? 0,
        routerRequestsTotal: routerTotal,
        notReachingRouter: counts.sent - envoyStreams,
        routerOutcomes: outcomes,
        checked: !r.replicated,
      },
      memory: {
        samples: after.length,
        warmupS,
        gc: gc !== undefined,
        heapUsedStartMB: mb(first.heap),
        heapUsedEndMB: mb(last.heap),
        rssStartMB: mb(first.rss),
        rssEndMB: mb(last.rss),
        heapSlopeBytesPerS: Math.round(linearSlope(after.map((m) => [m.t, m.heap]))),
        rssSlopeBytesPerS: Math.round(linearSlope(after.map((m) => [m.t, m.rss]))),
      },
    };
  } finally {
    if (memTimer) clearInterval(memTimer);
    await kv?.reservation?.releaseAll(); // the ports of workers the fleet never started
    await envoy?.close();
    await routers?.close();
    await fleet?.close();
  }
}

/** Bounds of the memory slopes after warm-up, bytes per second. */
export interface SlopeLimits {
  heap: number;
  rss: number;
}

/** Invariant violations of a summary (empty = pass). */
export interface SleepStats {
  slept: number;
  skipped: Record<string, number>;
  requestsWhileAsleep: number;
  errors: string[];
}

export function soakViolations(s: SoakSummary, limits: SlopeLimits): string[] {
  const out: string[] = [];
  if (s.sleeps !== undefined && s.sleeps.requestsWhileAsleep > 0)
    out.push(`${s.sleeps.requestsWhileAsleep} requests reached a sleeping worker`);
  if (s.sleeps !== undefined && s.sleeps.errors.length > 0)
    out.push(`sleep chaos failed: ${s.sleeps.errors.join('; ')}`);
  const bad = s.finalLoads.filter((w) => w.load !== 0);
  if (bad.length > 0) out.push(`final loads not 0: ${JSON.stringify(bad)}`);
  if (s.simulatorsInFlight !== 0) out.push(`${s.simulatorsInFlight} requests still in flight on simulators`);
  if (s.routerStreamsActive !== 0) out.push(`${s.routerStreamsActive} ext_proc streams still active`);
  if (!s.routerAlive) out.push('router not alive');
  const unaware = s.workersKnown.filter((n) => n !== s.workers);
  if (unaware.length > 0) out.push(`replicas know ${JSON.stringify(s.workersKnown)} of ${s.workers} workers`);
  if (s.replicas !== undefined && s.replicas.errors.length > 0)
    out.push(`replica chaos failed: ${s.replicas.errors.join('; ')}`);
  if (s.unclearHttpErrors > 0) out.push(`${s.unclearHttpErrors} HTTP errors with an empty body`);
  if (s.timeouts.clientSaw504 > s.timeouts.envoyMessageTimeouts)
    out.push(
      `${s.timeouts.clientSaw504} empty 504s but ${s.timeouts.envoyMessageTimeouts} ext_proc message timeouts`,
    );
  if (s.resets.unexplained > 0) out.push(`${s.resets.unexplained} unexplained resets`);
  if (s.violations.noStatus > 0)
    out.push(`${s.violations.noStatus} requests without a status or complete body`);
  if (s.violations.stuck > 0) out.push(`${s.violations.stuck} stuck requests`);
  const a = s.accounting;
  if (!booksBalance(a))
    out.push(
      `router counted ${a.routerRequestsTotal} requests, Envoy opened ${a.envoyExtProcStreams} streams and retried ${a.envoyStreamRetries}`,
    );
  if (a.checked && (a.notReachingRouter < 0 || a.notReachingRouter > s.aborts.beforeHeaders))
    out.push(
      `${a.notReachingRouter} requests never reached the router (aborted before headers: ${s.aborts.beforeHeaders})`,
    );
  if (s.memory.heapSlopeBytesPerS > limits.heap) out.push(`heap slope ${s.memory.heapSlopeBytesPerS} B/s`);
  if (s.memory.rssSlopeBytesPerS > limits.rss) out.push(`rss slope ${s.memory.rssSlopeBytesPerS} B/s`);
  if (s.kvIndex !== undefined && s.kvIndex.mismatches.length > 0)
    out.push(`KV index differs from the workers' caches: ${JSON.stringify(s.kvIndex.mismatches)}`);
  if (s.violations.samples.length > 0) out.push(...s.violations.samples.map((x) => `sample: ${x}`));
  return out;
}

/**
 * The router's flags (one process or every replica alike):
 *  - active health checks and circuit breakers on, with periods short enough to act within the
 *    chaos (a killed worker is noticed within ~1 s, a recovered one readmitted within ~2 s);
 *  - a small cache-aware tree trimmed every second: the tree reaches its steady size during warm-up
 *    (and eviction runs under load), so growth after warm-up would be a leak, not the cache filling;
 *  - a drain that fits the replica chaos: readiness off for 1 s (Envoy health-checks every 0.5 s)
 *    before the listener stops taking streams, then 0.3 s for the streams in flight: the ones still
 *    streaming after that are handed back to Envoy (released), which must finish them.
 */
function routerArgs(
  mode: 'regular' | 'pd',
  ttlMs: number,
  kv: SoakFleetKvEvents | undefined,
  replicated: boolean,
  fallback: boolean,
): string[] {
  return [
    ...['--mode', mode, '--discovery-ttl-ms', String(ttlMs)],
    ...(fallback ? ['--fallback-endpoints', '1'] : []),
    // P/D workers self-register over ZMQ with one router; replicas get heartbeats on their admin API.
    ...(mode === 'pd' && !replicated ? ['--discovery-zmq', 'tcp://127.0.0.1:0'] : []),
    ...['--health-check-interval-ms', '1000', '--health-check-timeout-ms', '500', '--cb-cooldown-ms', '2000'],
    ...['--prefill-retries', '1', '--max-tree-size', '50000', '--eviction-interval-ms', '1000'],
    ...['--drain-grace-ms', '1000', '--drain-timeout-ms', '300'],
    ...(kv !== undefined
      ? [
          ...['--tokenizer', `sim-model=${TOKENIZER_DIR}`],
          ...['--tokenizer-cache-chars', String(TOKENIZER_CACHE_CHARS)],
          ...kv.ports.flatMap((p) => ['--kv-event-source', `http://127.0.0.1:${p.http}=${p.endpoint}`]),
          ...kv.ports.flatMap((p) => ['--kv-event-replay', `http://127.0.0.1:${p.http}=${p.replayEndpoint}`]),
        ]
      : []),
  ];
}

/** ' (session <key>)' for a request that carried one (violation samples). */
function keyed(headers: Record<string, string>): string {
  const key = headers[SESSION_HEADER];
  return key === undefined ? '' : ` (session ${key})`;
}

/**
 * Free ports for a KV-event fleet: per worker its HTTP port, its publisher and its replay socket, held
 * until the fleet starts that worker (the routers, started first, subscribe to them meanwhile).
 */
async function kvFleet(size: number): Promise<SoakFleetKvEvents> {
  const reservation = await reservePorts(size * 3);
  const ports = reservation.ports;
  return {
    reservation,
    tokenizer: HfTokenizer.load(TOKENIZER_DIR, { maxCachedChars: TOKENIZER_CACHE_CHARS }),
    capacityBlocks: KV_CACHE_BLOCKS,
    ports: Array.from({ length: size }, (_, i) => ({
      http: ports[3 * i]!,
      endpoint: `tcp://127.0.0.1:${ports[3 * i + 1]!}`,
      replayEndpoint: `tcp://127.0.0.1:${ports[3 * i + 2]!}`,
    })),
  };
}

/**
 * Waits (bounded) until the router's index of every worker holds as many blocks as the worker's
 * cache, then reports both and the event counters. The fleet is quiet by then: the events still on
 * their way are the only difference that may remain, and they arrive within milliseconds.
 */
async function settleKvIndex(
  r: SoakRouters,
  replicas: readonly SoakReplica[],
  f: SoakFleet,
): Promise<NonNullable<SoakSummary['kvIndex']>> {
  const compare = async () => {
    const out: Array<{ replica: number; url: string; indexed: number; cached: number }> = [];
    for (const x of replicas) {
      const indexed = await r.metricByLabel(x, 'vllm_router_kv_index_blocks', 'worker');
      for (const w of f.workers) {
        if (w.sim)
          out.push({
            replica: x.index,
            url: w.sim.url,
            indexed: indexed[w.sim.url] ?? 0,
            cached: w.sim.cache.usedBlocks,
          });
      }
    }
    return out;
  };
  const total = async (name: string) =>
    (await Promise.all(replicas.map((x) => r.metricSum(x, name)))).reduce((a, b) => a + b, 0);
  const byLabel = async (name: string, label: string) => {
    const out: Record<string, number> = {};
    for (const x of replicas) {
      for (const [k, v] of Object.entries(await r.metricByLabel(x, name, label))) out[k] = (out[k] ?? 0) + v;
    }
    return out;
  };
  let workers = await compare();
  await until(
    async () => (workers = await compare()).every((w) => w.indexed === w.cached),
    10_000,
    'KV index converged',
  ).catch(() => undefined);
  return {
    workers,
    mismatches: workers.filter((w) => w.indexed !== w.cached),
    applied: await total('vllm_router_kv_events_applied_total'),
    dropped: await byLabel('vllm_router_kv_events_dropped_total', 'reason'),
    gaps: await total('vllm_router_kv_event_gaps_total'),
    replays: await byLabel('vllm_router_kv_event_replays_total', 'outcome'),
    resets: await byLabel('vllm_router_kv_index_resets_total', 'reason'),
  };
}

async function killAndRestart(f: SoakFleet, w: FleetWorker, downMs: number): Promise<void> {
  await f.kill(w);
  await sleep(downMs);
  await f.restart(w);
}

/**
 * Puts the worker to sleep through the router's admin API (cordon, drain, its POST /sleep), keeps it
 * asleep `ms`, and wakes it the same way; counts the requests that reached it asleep.
 */
async function sleepAndWake(adminPort: number, w: FleetWorker, ms: number, stats: SleepStats): Promise<void> {
  const sim = w.sim;
  if (sim === undefined) return;
  const op = async (what: string, query = ''): Promise<{ status: number; text: string }> => {
    const url = `http://127.0.0.1:${adminPort}/workers/${what}?url=${encodeURIComponent(sim.url)}${query}`;
    const res = await fetch(url, { method: 'POST' });
    return { status: res.status, text: await res.text() };
  };
  const before = sim.requestsWhileAsleep;
  const slept = await op('sleep', '&timeout_ms=10000');
  if (slept.status === 404 || slept.status === 409) {
    stats.skipped[slept.status] = (stats.skipped[slept.status] ?? 0) + 1;
    return;
  }
  if (slept.status !== 200) {
    stats.errors.push(`sleep: ${slept.status} ${slept.text.slice(0, 200)}`);
    return;
  }
  stats.slept++;
  await sleep(ms);
  const woke = await op('wake_up');
  if (woke.status !== 200) stats.errors.push(`wake_up: ${woke.status} ${woke.text.slice(0, 200)}`);
  stats.requestsWhileAsleep += sim.requestsWhileAsleep - before;
}

async function silence(f: SoakFleet, w: FleetWorker, ms: number): Promise<void> {
  f.pauseHeartbeats(w);
  await sleep(ms);
  f.resumeHeartbeats(w);
}

/** The `soak<n>` tag that starts a request's prompt (completions) or first message (chat). */
/** A whole non-streamed Responses API answer. */
function completedResponse(text: string): boolean {
  try {
    return (JSON.parse(text) as { status?: unknown }).status === 'completed';
  } catch {
    return false;
  }
}

function tagOf(body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null) return undefined;
  const b = body as { prompt?: unknown; input?: unknown; messages?: Array<{ content?: unknown }> };
  const text =
    typeof b.prompt === 'string'
      ? b.prompt
      : typeof b.input === 'string'
        ? b.input
        : b.messages?.[0]?.content;
  if (typeof text !== 'string') return undefined;
  const space = text.indexOf(' ');
  return text.startsWith('soak') && space > 0 ? text.slice(0, space) : undefined;
}

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)] as T;
}

function exposeGc(): (() => void) | undefined {
  const existing = (globalThis as { gc?: () => void }).gc;
  if (existing) return existing;
  try {
    v8.setFlagsFromString('--expose-gc');
    return vm.runInNewContext('gc') as () => void;
  } catch {
    return undefined;
  }
}

function stat(text: string, name: string): number {
  const m = new RegExp(`^${name.replace(/\./g, '\\.')}: (\\d+)$`, 'm').exec(text);
  return m ? Number(m[1]) : 0;
}

function mb(bytes: number): number {
  return Math.round((bytes / 1024 / 1024) * 10) / 10;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `predicate` every 20 ms; rejects after `timeoutMs`. */
async function until(
  predicate: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > end) throw new Error(`soak: ${what} not reached within ${timeoutMs} ms`);
    await sleep(20);
  }
}

/**
 * Envoy's own view of each router replica (`/clusters`): health flags, connections and streams open,
 * e.g. `:9002 healthy cx 2 rq 14 | :9003 /failed_outlier_check cx 0 rq 0`. A replica that reads
 * healthy with nothing open while the other is busy is one Envoy's workers do not balance to yet.
 */
async function routerHosts(adminPort: number): Promise<string> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/clusters`)).text();
  const hosts = new Map<string, Record<string, string>>();
  for (const line of text.split('\n')) {
    const m = /^vllm_router::[^:]+:(\d+)::(health_flags|cx_active|rq_active)::(.*)$/.exec(line);
    if (!m) continue;
    const [, port, key, value] = m as unknown as [string, string, string, string];
    hosts.set(port, { ...hosts.get(port), [key]: value });
  }
  return [...hosts]
    .map(([port, h]) => `:${port} ${h.health_flags} cx ${h.cx_active} rq ${h.rq_active}`)
    .join(' | ');
}

/**
 * One router's books (see `accounting`): every stream Envoy opened counted, and nothing more than the
 * streams Envoy retried. Replicas: not checked.
 */
export function booksBalance(a: SoakSummary['accounting']): boolean {
  if (!a.checked) return true;
  const extra = a.routerRequestsTotal - a.envoyExtProcStreams;
  return extra >= 0 && extra <= a.envoyStreamRetries;
}
