/**
 * The router's real wiring (composition/wiring.ts: registry, role pools, policies, the wrapped
 * dispatcher chain, health, catalog, LoRA fan-out, metrics) under random interleavings of worker
 * churn and requests, on a fake clock, with the prefill leg's HTTP call replaced by a promise the
 * test settles. Deterministic per seed.
 *
 * Churn: registrations, heartbeats, expiries (with and without the janitor's sweep), deregistrations,
 * from static-, ZMQ-, admin- and Kubernetes-shaped sources (Kubernetes: permanent, sourceOwned, removed
 * only by its own generation); a new process at a URL (new generation); a URL changing role (decode ->
 * prefill); data-parallel size changes; cordon, sleep and wake. Requests: regular and P/D (sequential,
 * concurrent, sidecar), finishing before or after their worker left, failing over.
 *
 * After every step:
 *   - each pool, reconciled, holds exactly the live registry entries of its role: one Worker per
 *     (url, generation, rank), the same object for as long as that triple lives;
 *   - every worker a request took a guard on was a member of its pool, of the live generation;
 *   - every load change is the acting request's own: a guard is released on the Worker it was taken
 *     on, nothing else moves loads, and each Worker's load is the sum of the guards held on it;
 *   - per-worker structures (policy membership and trees, health deadlines, pending decodes and
 *     fallbacks, catalog, LoRA fan-out, KV-event subscriptions) hold only live workers (or entries
 *     the janitor has not swept yet) and workers with requests in flight.
 * At the end: every load is 0, and once the fleet is gone and the 10-minute series window passed,
 * nothing is left of any worker (per-worker series, pending KV blocks).
 *
 * Exploring: CHURN_SEEDS=N runs seeds 1..N and more modes; a failure prints the seed and its last
 * steps (CHURN_GREP=text: only the steps naming it; CHURN_TRACE=1 adds each request's guards).
 */
import { pino } from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { wireRouter, type Components } from '../../../src/composition/wiring.js';
import type { Config } from '../../../src/config-schema.js';
import type { Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../../../src/extproc/dispatch.js';
import { PrefillError, type PrefillResult } from '../../../src/pd/prefill-client.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { DEPARTED_SERIES_MS } from '../../../src/observability/metrics.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import { scheduledRanks } from '../../../src/workers/data-parallel.js';
import type { Role } from '../../../src/workers/role.js';
import { ROLES } from '../../../src/workers/role.js';
import { parseModelList } from '../../../src/workers/served-models.js';
import { rankedKey, type Worker } from '../../../src/workers/worker.js';
import { testConfig } from '../../support/router-fixture.js';

type Source = 'static' | 'zmq' | 'admin' | 'kube';

interface Leg {
  readonly worker: Worker;
  readonly resolve: (r: PrefillResult) => void;
  readonly reject: (e: PrefillError) => void;
  readonly onSent?: () => void;
}

interface Req {
  readonly id: number;
  readonly abort: AbortController;
  readonly req: RouteRequest;
  /** Guards this request holds, by Worker (a count: a retried leg may return to a worker). */
  readonly holds: Map<Worker, number>;
  /** Workers it counts on without their load: a decode leg to come, a fallback endpoint. */
  readonly promised: Map<Worker, number>;
  dispatch?: Dispatch;
  pending?: Promise<void>;
  settled: boolean;
  started: boolean;
  done: boolean;
  legs: Leg[];
}

const PORTS = [19301, 19302, 19303, 19304, 19305];
const TTL = 5000;

interface ChurnOptions {
  readonly config: Partial<Config>;
  readonly seed: number;
  readonly steps: number;
  /** Metadata every registration carries (e.g. MoRI-IO's transfer_mode). */
  readonly metadata?: Readonly<Record<string, unknown>>;
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 4; i++) await new Promise<void>((r) => setImmediate(r));
};

/** The dispatcher chain the gRPC server was built with (health, timing, admission, the pools). */
function dispatcherOf(c: Components): Dispatcher {
  return (c.grpc as unknown as { opts: { dispatcher: Dispatcher } }).opts.dispatcher;
}

async function runChurn(o: ChurnOptions): Promise<void> {
  const rnd = seededRandom(o.seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
  let now = 1_000;
  const config = testConfig({ discoveryTtlMs: TTL, cbFailureThreshold: 2, cbCooldownMs: 4000, ...o.config });
  const c = wireRouter(config, { logger: pino({ level: 'silent' }), clock: () => now });
  const pd = config.mode === 'pd';
  const roles: readonly Role[] = pd ? ['prefill', 'decode'] : ['regular'];
  const dispatcher = dispatcherOf(c);
  // KV events (kv_aware): subscriptions follow the registry once started (the lifecycle's first step).
  const subscriptions = c.exact.subscriptions;
  if (subscriptions !== undefined) c.exact.start();
  const log: string[] = [];
  const fail = (what: string): never => {
    const grep = process.env.CHURN_GREP;
    const steps = grep ? log.filter((l) => l.includes(grep)) : log.slice(-40);
    throw new Error(`${what}\nseed ${o.seed}, steps:\n${steps.join('\n')}`);
  };

  // --- the prefill leg: a promise the test settles (the real client's contract) ---
  let acting: Req | undefined;
  if (c.prefillClient) {
    c.prefillClient.send = (worker, _path, _body, _headers, _id, signal, _timeout, leg = {}) =>
      new Promise<PrefillResult>((resolve, reject) => {
        const owner = acting ?? fail('prefill leg sent outside any request action');
        const l: Leg = { worker, resolve, reject, ...(leg.onSent ? { onSent: leg.onSent } : {}) };
        owner.legs.push(l);
        const gone = (): void => {
          owner.legs = owner.legs.filter((x) => x !== l);
          reject(new PrefillError('aborted', 'aborted'));
        };
        if (signal.aborted) gone();
        else signal.addEventListener('abort', gone, { once: true });
      });
  }

  // --- what each source believes it registered ---
  const kubeGen = new Map<string, number>(); // `role url` -> generation the Kubernetes source owns
  const sourceOf = new Map<string, Source>();

  // --- every Worker object seen, and the one object per (role, key, generation) ---
  const known = new Set<Worker>();
  const observe = (): void => {
    for (const w of c.pools.members()) known.add(w);
  };
  // Requests counted on a worker without its load (sequential P/D decodes, fallback endpoints).
  const pendingOf =
    (c.workerSleep as unknown as { deps: { pending?: (w: Worker) => number } }).deps.pending ?? (() => 0);
  type Measure = Map<Worker, readonly [load: number, pending: number]>;
  const loads = (): Measure => {
    observe();
    return new Map(Array.from(known, (w) => [w, [w.load, pendingOf(w)] as const]));
  };
  /** Members by id at the end of the last step: the same (role, key, generation) stays one object. */
  let lastMembers = new Map<string, Worker>();
  const checkIdentity = (): void => {
    const next = new Map<string, Worker>();
    for (const w of c.pools.members()) {
      const prior = lastMembers.get(w.id);
      if (prior !== undefined && prior !== w)
        fail(`${w.id} became another Worker object while it stayed live`);
      next.set(w.id, w);
    }
    lastMembers = next;
  };

  const requests: Req[] = [];
  let nextId = 0;

  /** Attributes every load change since `before` to `r` (or to nobody: then there must be none). */
  const attribute = (before: Measure, r: Req | undefined, what: string): Worker[] => {
    const after = loads();
    const gained: Worker[] = [];
    for (const [w, [load, pending]] of after) {
      const [load0, pending0] = before.get(w) ?? [0, 0];
      for (const [delta, ledger, name] of [
        [load - load0, r?.holds, 'load'],
        [pending - pending0, r?.promised, 'pending'],
      ] as const) {
        if (delta === 0) continue;
        if (r === undefined || ledger === undefined)
          fail(`${what}: ${name} of ${w.id} moved by ${delta} with no request acting`);
        const held = ledger!.get(w) ?? 0;
        if (held + delta < 0) fail(`${what}: request ${r!.id} released ${name} on ${w.id} it never took`);
        if (held + delta === 0) ledger!.delete(w);
        else ledger!.set(w, held + delta);
        if (delta > 0 && name === 'load') gained.push(w);
      }
    }
    return gained;
  };

  /** A guard just taken: its worker is a live member of its pool, of the live generation. */
  const checkSelected = (w: Worker, what: string): void => {
    const entry = c.registry.get(w.role, w.url);
    if (entry === undefined || entry.generation !== w.generation)
      fail(`${what}: guard taken on ${w.id}, registry has generation ${entry?.generation ?? 'none'}`);
    if (!c.pools.byRole[w.role].workers.includes(w)) fail(`${what}: guard taken on ${w.id}, not a member`);
  };

  const register = (role: Role, url: string, source: Source, endpoint: string, dp?: number): void => {
    const id = `${role} ${url}`;
    const metadata =
      dp === undefined && o.metadata === undefined ? undefined : { ...o.metadata, data_parallel_size: dp };
    if (source === 'kube') {
      if (c.registry.get(role, url) !== undefined) return; // waits for the other source's entry to go
      const r = c.registry.register({
        role,
        url,
        endpoint,
        permanent: true,
        sourceOwned: true,
        ...(metadata ? { metadata } : {}),
      });
      if ('entry' in r) kubeGen.set(id, r.entry.generation);
    } else {
      c.registry.register({
        role,
        url,
        endpoint,
        ...(source === 'zmq' ? { zmqAddress: `${endpoint.split(':')[0]}:5557` } : {}),
        ...(source === 'static' ? { permanent: true } : {}),
        ...(source === 'admin' && rnd() < 0.3 ? { permanent: true } : {}),
        ...(metadata ? { metadata } : {}),
      });
    }
    sourceOf.set(id, source);
  };

  const liveEntries = (): Array<{ role: Role; url: string; endpoint: string }> =>
    roles.flatMap((role) =>
      c.registry.snapshot(role).map((e) => ({ role, url: e.url, endpoint: e.endpoint })),
    );

  const endOf = (): RequestEnd => {
    const x = rnd();
    if (x < 0.6) return { kind: 'response', status: 200 };
    if (x < 0.8) return { kind: 'response', status: 503 };
    return { kind: 'cancelled', afterHeaders: rnd() < 0.5, status: 200 };
  };

  const newRequest = async (): Promise<void> => {
    const text = Array.from({ length: Math.floor(rnd() * 40) }, () => pick(['a', 'b'])).join('');
    const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: text, max_tokens: 4 }));
    const r: Req = {
      id: nextId++,
      abort: new AbortController(),
      req: {
        method: 'POST',
        path: '/v1/completions',
        headers: { 'x-session-id': pick(['s1', 's2', 's3']) },
        body: raw,
        inference: parseInferenceRequest('completions', undefined, raw),
      },
      holds: new Map(),
      promised: new Map(),
      settled: false,
      started: false,
      done: false,
      legs: [],
    };
    requests.push(r);
    log.push(`request ${r.id}`);
    const before = loads();
    acting = r;
    let result: Dispatch | Promise<Dispatch> | undefined;
    try {
      result = dispatcher.dispatch(r.req, r.abort);
    } catch {
      r.settled = true;
      r.done = true;
    }
    acting = undefined;
    for (const w of attribute(before, r, `dispatch ${r.id}`)) checkSelected(w, `dispatch ${r.id}`);
    if (result === undefined) return;
    const dispatched = loads();
    if (result instanceof Promise) {
      r.pending = result.then(
        (d) => {
          r.dispatch = d;
          r.settled = true;
        },
        () => {
          r.settled = true;
          r.done = true;
        },
      );
    } else {
      r.dispatch = result;
      r.settled = true;
    }
    await settle(r, dispatched, 'dispatch');
  };

  /** Lets `r`'s promises run and attributes what moved to it. */
  const settle = async (r: Req, before: Measure, what: string): Promise<void> => {
    acting = r;
    await flush();
    acting = undefined;
    // A decode guard taken after the prefill leg: a member of its pool when it was taken? Checked
    // at once (nothing else ran meanwhile).
    for (const w of attribute(before, r, `${what} ${r.id}`)) checkSelected(w, `${what} ${r.id}`);
    if (process.env.CHURN_TRACE)
      log.push(`  holds ${r.id}: ${[...r.holds].map(([w, n]) => `${w.id}x${n}`).join(' ')} (${what})`);
  };

  const act = async (r: Req, what: string, fn: () => void): Promise<void> => {
    log.push(`${what} ${r.id}`);
    const before = loads();
    acting = r;
    fn();
    acting = undefined;
    await settle(r, before, what);
  };

  const requestStep = async (): Promise<void> => {
    const open = requests.filter((r) => !r.done);
    if (open.length === 0 || rnd() < 0.35) return newRequest();
    const r = pick(open);
    const x = rnd();
    if (r.legs.length > 0 && x < 0.5) {
      const leg = pick(r.legs);
      const y = rnd();
      if (y < 0.15 && leg.onSent) return act(r, 'prefill sent', () => leg.onSent?.());
      r.legs = r.legs.filter((l) => l !== leg);
      if (y < 0.7)
        return act(r, 'prefill ok', () =>
          leg.resolve({
            status: 200,
            kvTransferParams: {
              do_remote_prefill: true,
              remote_engine_id: 'e',
              remote_block_ids: [1],
              remote_host: '127.0.0.1',
              remote_port: 5600,
            },
            cachedTokens: 0,
            stopped: false,
          }),
        );
      return act(r, 'prefill failed', () => leg.reject(new PrefillError('transport', 'refused')));
    }
    if (!r.settled) {
      if (x < 0.6) return act(r, 'client gone', () => r.abort.abort());
      return;
    }
    const d = r.dispatch;
    if (d === undefined) return;
    if (!r.started && x < 0.7) {
      r.started = true;
      return act(r, 'response start', () => d.onResponseStart?.(200, true));
    }
    if (x < 0.8 && dispatcher.adopt) {
      // The gateway served it on another endpoint (a fallback, or its own balancer's choice).
      const live = liveEntries().filter((e) => e.role === d.worker.role);
      const at = live.length > 0 ? pick(live).endpoint : d.worker.endpoint;
      log.push(`failover ${r.id} -> ${at}`);
      const before = loads();
      const moved = dispatcher.adopt(r.req, d, at);
      if (moved !== undefined) {
        acting = r;
        d.finish({ kind: 'failed_over', served: at });
        acting = undefined;
        r.dispatch = moved;
      }
      await settle(r, before, 'failover');
      return;
    }
    r.done = true;
    if (r.abort.signal.aborted || rnd() < 0.2) r.abort.abort();
    return act(r, 'finish', () => d.finish(endOf()));
  };

  const churnStep = (): void => {
    const role = pick(roles);
    const port = pick(PORTS);
    const url = `http://127.0.0.1:${port}`;
    const id = `${role} ${url}`;
    const entry = c.registry.get(role, url);
    const x = rnd();
    const dp = rnd() < 0.25 ? pick([1, 2, 3]) : undefined;
    if (x < 0.3) {
      // A registration (a heartbeat when live and unchanged), from any source.
      const source =
        entry !== undefined ? (sourceOf.get(id) ?? 'zmq') : pick(['static', 'zmq', 'admin', 'kube']);
      log.push(`register ${id} ${source}${dp ? ` dp=${dp}` : ''}`);
      register(role, url, source as Source, entry?.endpoint ?? `127.0.0.1:${port}`, dp);
    } else if (x < 0.4) {
      // A new process at the URL: its endpoint changed (or its entry had expired).
      const source = pick<Source>(['zmq', 'admin', 'kube']);
      const endpoint = `127.0.0.${entry?.endpoint.startsWith('127.0.0.1') ? 2 : 1}:${port}`;
      log.push(`restart ${id} ${source} at ${endpoint}${dp ? ` dp=${dp}` : ''}`);
      if (source === 'kube' && entry !== undefined) c.registry.deregister(role, url);
      register(role, url, source, endpoint, dp);
    } else if (x < 0.5) {
      if (entry === undefined) return;
      if (sourceOf.get(id) === 'kube' && rnd() < 0.7) {
        // Kubernetes removes only its own generation.
        log.push(`kube remove ${id}`);
        if (c.registry.get(role, url)?.generation === kubeGen.get(id)) c.registry.deregister(role, url);
      } else {
        log.push(`deregister ${id}`);
        c.registry.deregister(role, url);
      }
    } else if (x < 0.58 && pd) {
      // The process at the URL comes back in the other role (decode -> prefill, or back).
      const other: Role = role === 'prefill' ? 'decode' : 'prefill';
      log.push(`role change ${url} ${role} -> ${other}`);
      if (rnd() < 0.5) c.registry.deregister(role, url); // else its old entry expires
      register(other, url, pick<Source>(['zmq', 'admin', 'kube']), `127.0.0.1:${port}`);
    } else if (x < 0.75) {
      const dt = Math.floor(rnd() * 4000);
      now += dt;
      const sweep = rnd() < 0.5;
      log.push(`tick +${dt}${sweep ? ' sweep' : ''}`);
      // Heartbeats of most live ZMQ / admin registrations keep them alive.
      for (const e of liveEntries()) {
        const src = sourceOf.get(`${e.role} ${e.url}`);
        if ((src === 'zmq' || src === 'admin') && rnd() < 0.7) {
          const cur = c.registry.get(e.role, e.url);
          c.registry.register({
            role: e.role,
            url: e.url,
            endpoint: e.endpoint,
            ...(cur?.zmqAddress !== undefined ? { zmqAddress: cur.zmqAddress } : {}),
            ...(cur?.metadata !== undefined ? { metadata: { ...cur.metadata } } : {}),
          });
        }
      }
      if (sweep) c.registry.cleanup();
    } else if (x < 0.85) {
      const on = rnd() < 0.5;
      log.push(`${on ? 'cordon' : 'uncordon'} ${url}`);
      try {
        c.workerSleep.cordon(url, on);
      } catch {
        // not_found
      }
    } else if (x < 0.92) {
      // The scraper read the sleep gauge (sleep / wake_up through some other path).
      const asleep = rnd() < 0.5;
      log.push(`${asleep ? 'asleep' : 'awake'} ${url}`);
      for (const w of c.pools.workers()) if (w.url === url) c.health.recordSleep(w, asleep, now);
    } else {
      // The models poller read the worker's list.
      if (!c.pools.workers().some((w) => w.url === url)) return;
      log.push(`models ${url}`);
      c.catalog.recordListed(
        url,
        parseModelList(JSON.stringify({ data: [{ id: 'm', max_model_len: 4096 }] })),
      );
    }
  };

  const inFlightWorkers = (): Set<Worker> => {
    const out = new Set<Worker>();
    for (const r of requests) {
      if (r.done && r.holds.size === 0) continue;
      for (const w of r.holds.keys()) out.add(w);
      for (const w of r.promised.keys()) out.add(w);
      if (r.dispatch) out.add(r.dispatch.worker);
      for (const l of r.legs) out.add(l.worker);
    }
    return out;
  };

  const checkPools = (): void => {
    for (const role of ROLES) {
      const pool = c.pools.byRole[role];
      pool.reconcile();
      const expected: string[] = [];
      for (const e of c.registry.snapshot(role)) {
        const ranks = scheduledRanks(e.metadata, config.intraNodeDataParallelSize);
        if (ranks === undefined)
          expected.push(`${rankedKey(e.url, undefined)}|${e.generation}|${e.endpoint}`);
        else
          for (let k = 0; k < ranks; k++)
            expected.push(`${rankedKey(e.url, k)}|${e.generation}|${e.endpoint}`);
      }
      const held = pool.workers.map((w) => `${w.key}|${w.generation}|${w.endpoint}`);
      if (held.join(',') !== expected.join(','))
        fail(`pool ${role} holds [${held.join(', ')}], registry says [${expected.join(', ')}]`);
    }
    observe();
  };

  const checkStructures = (): void => {
    const members = new Set(c.pools.members());
    const busy = inFlightWorkers();
    for (const role of ROLES) {
      const policy = c.pools.byRole[role].policy as unknown as {
        members?: Set<string>;
        treeChars?: () => Map<string, number>;
        ring?: { labels: Map<string, string> };
      };
      const mine = new Set(c.pools.byRole[role].workers.map((w) => w.id));
      if (policy.members && [...policy.members].sort().join() !== [...mine].sort().join())
        fail(`${role} policy members [${[...policy.members].join()}] != pool [${[...mine].join()}]`);
      for (const id of policy.treeChars?.().keys() ?? [])
        if (!mine.has(id)) fail(`${role} policy tree still pictures departed ${id}`);
      for (const id of policy.ring?.labels.keys() ?? [])
        if (!mine.has(id)) fail(`${role} hash ring still holds departed ${id}`);
    }
    const pending = (c.health as unknown as { pending: Set<Worker> }).pending;
    for (const w of pending)
      if (!members.has(w) && !busy.has(w))
        fail(`health keeps a deadline for departed ${w.id}, no request on it`);
    for (const w of known) {
      if (members.has(w) || busy.has(w)) continue;
      if (w.load !== 0) fail(`departed ${w.id} has load ${w.load} and no request on it`);
      const n = pendingOf(w);
      if (n !== 0) fail(`departed ${w.id} still counts ${n} pending decodes/fallbacks`);
    }
    const urls = new Set(Array.from(members, (w) => w.url));
    // Until the janitor sweeps an expired entry, the registry (and what follows it) still has it.
    const tables = (c.registry as unknown as { tables: Map<Role, { entries: Map<string, unknown> }> }).tables;
    const registered = new Set([...tables.values()].flatMap((t) => [...t.entries.keys()]));
    const generations = new Set(
      [...tables.values()].flatMap((t) =>
        [...t.entries.values()].map((e) => (e as { generation: number }).generation),
      ),
    );
    const catalog = c.catalog as unknown as { byUrl: Map<string, unknown> };
    for (const url of catalog.byUrl.keys())
      if (!urls.has(url) && !registered.has(url)) fail(`catalog still lists departed ${url}`);
    if (subscriptions !== undefined) {
      const subs = (subscriptions as unknown as { subs: Map<string, { generation: number }> }).subs;
      for (const [key, sub] of subs) {
        const at = [...members].filter((w) => w.url === key);
        if (at.length === 0 && !registered.has(key)) fail(`KV events still subscribed to departed ${key}`);
        if (
          at.length > 0 &&
          !at.some((w) => w.generation === sub.generation) &&
          !generations.has(sub.generation)
        )
          fail(
            `KV events of ${key} follow generation ${sub.generation}, members are ${at.map((w) => w.id).join()}`,
          );
      }
    }
    const lora = c.lora as unknown as { owed: Map<string, unknown> };
    for (const url of lora.owed.keys()) if (!urls.has(url)) fail(`LoRA fan-out still owes departed ${url}`);
  };

  for (let step = 0; step < o.steps; step++) {
    if (rnd() < 0.45) {
      const before = loads();
      churnStep();
      attribute(before, undefined, `churn: ${log[log.length - 1] ?? ''}`);
    } else await requestStep();
    checkIdentity();
    if (rnd() < 0.7) checkPools();
    checkStructures();
  }

  // --- the end: every request finishes, every worker leaves ---
  for (const r of requests) {
    for (const leg of [...r.legs]) {
      r.legs = r.legs.filter((l) => l !== leg);
      await act(r, 'prefill failed', () => leg.reject(new PrefillError('transport', 'refused')));
    }
    if (!r.settled) await act(r, 'client gone', () => r.abort.abort());
    for (const leg of [...r.legs]) {
      r.legs = r.legs.filter((l) => l !== leg);
      await act(r, 'prefill failed', () => leg.reject(new PrefillError('transport', 'refused')));
    }
    if (r.pending) await r.pending;
    if (!r.done && r.dispatch) {
      const d = r.dispatch;
      r.done = true;
      await act(r, 'finish', () => d.finish({ kind: 'response', status: 200 }));
    }
  }
  for (const r of requests) {
    if (r.holds.size > 0) fail(`request ${r.id} still holds ${[...r.holds.keys()].map((w) => w.id).join()}`);
    if (r.promised.size > 0)
      fail(`request ${r.id} still counts on ${[...r.promised.keys()].map((w) => w.id).join()}`);
  }
  for (const w of known) if (w.load !== 0 || pendingOf(w) !== 0) fail(`${w.id} ends with load ${w.load}`);
  checkStructures();

  for (const role of ROLES) for (const e of c.registry.snapshot(role)) c.registry.deregister(role, e.url);
  now += DEPARTED_SERIES_MS + 1;
  c.registry.register({ role: 'regular', url: 'http://127.0.0.1:19399', endpoint: '127.0.0.1:19399' });
  c.registry.deregister('regular', 'http://127.0.0.1:19399');
  c.health.refresh(now);
  checkStructures();
  for (const role of ROLES) expect(c.pools.byRole[role].size).toBe(0);
  const text = await c.metrics.text();
  const left = text.split('\n').filter((l) => /worker="http:\/\/127\.0\.0\.1:193/.test(l));
  expect(left).toEqual([]);
  if (c.exact.source !== undefined) {
    const pending = (c.exact.source.pending as unknown as { byWorker: Map<string, unknown> }).byWorker;
    expect([...pending.keys()]).toEqual([]);
  }
  await c.exact.close();
  await c.prefillClient?.close();
}

const TOKENIZER = `m=${new URL('../../fixtures/tokenizer', import.meta.url).pathname}`;
const SEEDS = process.env.CHURN_SEEDS
  ? Array.from({ length: Number(process.env.CHURN_SEEDS) }, (_, i) => i + 1)
  : [1, 2, 3, 4, 5, 6];
const STEPS = 300;

describe('worker churn against the real wiring', () => {
  // Prefill legs time themselves with performance.now() and some policies draw Math.random(): both
  // fixed, so every seed replays exactly.
  afterEach(() => {
    vi.useRealTimers();
    vi.restoreAllMocks();
  });
  const modes: Array<[string, Partial<Config>, Record<string, unknown>?]> = [
    ['regular cache_aware with fallbacks', { policy: 'cache_aware', fallbackEndpoints: 1 }],
    ['regular consistent_hash', { policy: 'consistent_hash' }],
    ['regular cache_aware, 2 DP ranks per server', { policy: 'cache_aware', intraNodeDataParallelSize: 2 }],
    ['pd sequential', { mode: 'pd', prefillRetries: 1 }],
    ['pd concurrent', { mode: 'pd', pdDispatch: 'concurrent', decodePolicy: 'cache_aware' }],
    ['pd sidecar', { mode: 'pd', pdDispatch: 'sidecar', fallbackEndpoints: 1 }],
    [
      'regular cache_aware with KV events',
      { policy: 'cache_aware', kvEventPort: 5557, kvEventBlockSize: 4, tokenizer: [TOKENIZER] },
    ],
    ...(process.env.CHURN_SEEDS
      ? ([
          ['regular least_load', { policy: 'least_load', fallbackEndpoints: 2 }],
          ['regular round_robin', { policy: 'round_robin' }],
          ['pd moriio WRITE', { mode: 'pd', kvConnector: 'moriio' }, { transfer_mode: 'WRITE', dp_size: 2 }],
          [
            'pd moriio READ',
            { mode: 'pd', kvConnector: 'moriio', prefillRetries: 2 },
            { transfer_mode: 'READ' },
          ],
          ['pd p2pnccl', { mode: 'pd', kvConnector: 'p2pnccl', decodePolicy: 'consistent_hash' }],
          [
            'pd KV events, DP 2',
            {
              mode: 'pd',
              decodePolicy: 'kv_aware',
              kvEventPort: 5557,
              kvEventBlockSize: 4,
              tokenizer: [TOKENIZER],
              intraNodeDataParallelSize: 2,
            },
          ],
        ] as Array<[string, Partial<Config>, Record<string, unknown>?]>)
      : []),
  ];
  for (const [name, config, metadata] of modes) {
    for (const seed of SEEDS) {
      it(`${name}, seed ${seed}`, async () => {
        vi.useFakeTimers({ toFake: ['performance'] });
        vi.spyOn(Math, 'random').mockImplementation(seededRandom(seed + 1000)); // power_of_two, ties
        await runChurn({ config, seed, steps: STEPS, ...(metadata ? { metadata } : {}) });
      });
    }
  }
});
