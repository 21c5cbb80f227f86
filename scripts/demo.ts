/**
 * `npm run demo`: Envoy + the router + 4 simulated vLLM workers on loopback, a mixed workload sent
 * through Envoy, a Responses API conversation chained by previous_response_id, a coding session on the
 * Anthropic Messages API (/v1/messages, as Claude Code sends it), and a summary. `npm run demo -- --keep` leaves the stack running until Ctrl-C;
 * `npm run demo -- --pd` runs prefill/decode disaggregation (2 prefill + 2 decode workers that
 * register over ZMQ like vLLM does).
 */
import { parseArgs } from 'node:util';
import { loopbackConfig, type Config } from '../src/config.js';
import { startRouter } from '../src/router.js';
import { startEnvoy } from '../src/envoy/envoy-process.js';
import { startSimulator, type Simulator } from '../src/sim/simulator.js';
import { createLogger } from '../src/observability/logger.js';

const { values } = parseArgs({
  options: {
    keep: { type: 'boolean', default: false },
    pd: { type: 'boolean', default: false },
    requests: { type: 'string', default: '48' },
    'log-level': { type: 'string', default: 'warn' },
  },
});
const pd = values.pd === true;
const total = Number(values.requests);

async function main(): Promise<void> {
  const logger = createLogger(values['log-level'] as Config['logLevel']);
  const sims: Simulator[] = [];
  const timing = { baseItlMs: 15, overheadMs: 5 };
  const config: Config = loopbackConfig({
    logLevel: values['log-level'] as Config['logLevel'],
    decisionHeader: true,
    mode: pd ? 'pd' : 'regular',
    discoveryZmq: pd ? 'tcp://127.0.0.1:0' : '',
  });
  if (!pd) {
    for (let i = 0; i < 4; i++) sims.push(await startSimulator({ timing, id: `worker-${i}` }));
    config.workers = sims.map((s) => s.url);
  }
  const router = await startRouter(Object.freeze(config), { logger });
  if (pd) {
    const zmq = router.discoveryEndpoint as string;
    for (const role of ['prefill', 'prefill', 'decode', 'decode'] as const) {
      // Decode workers as vLLM's usual NIXL `kv_both` instances: they serve a request without KV
      // params whole (a Responses API follow-up, which only the decode worker holding it can build).
      const kvBoth = role === 'decode';
      sims.push(await startSimulator({ role, timing, kvBoth, register: { zmq, intervalMs: 1000 } }));
    }
    while (router.pools.prefill.size < 2 || router.pools.decode.size < 2) {
      router.pools.prefill.reconcile();
      router.pools.decode.reconcile();
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  const base = `http://127.0.0.1:${envoy.listenerPort}`;
  console.log(`\nEnvoy listener   ${base}`);
  console.log(`Router admin     http://127.0.0.1:${router.adminPort}/metrics  /workers  /readyz`);
  console.log(`Workers          ${sims.map((s) => `${s.role}:${s.url}`).join('  ')}\n`);

  // A mixed workload: 4 groups sharing long system prompts, streaming and not, chat and completions.
  const statuses = new Map<number, number>();
  const branches = new Map<string, number>();
  let next = 0;
  const started = performance.now();
  const one = async (i: number) => {
    const group = i % 4;
    const system = `You are assistant #${group}. ` + `Policy text for group ${group}. `.repeat(40);
    const stream = i % 2 === 0;
    const chat = i % 3 !== 0;
    const body = chat
      ? {
          model: 'sim-model',
          messages: [
            { role: 'system', content: system },
            { role: 'user', content: `Question ${i}?` },
          ],
          max_tokens: 12,
          stream,
        }
      : { model: 'sim-model', prompt: `${system}\nQuestion ${i}?`, max_tokens: 12, stream };
    const res = await fetch(`${base}${chat ? '/v1/chat/completions' : '/v1/completions'}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    await res.text();
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    const decision = res.headers.get('x-vllm-router-decision') ?? '';
    // In P/D mode the header also names the prefill decision (prefill_branch=...).
    const branch = pd
      ? `prefill:${/prefill_branch=([a-z_]+)/.exec(decision)?.[1] ?? 'none'}`
      : (/branch=([a-z_]+)/.exec(decision)?.[1] ?? 'none');
    branches.set(branch, (branches.get(branch) ?? 0) + 1);
  };
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      while (next < total) await one(next++);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const chain = await responsesChain(base, 4);
  const session = await messagesSession(base, 4);
  // Loads drop when Envoy closes each ext_proc stream: wait for it (up to 10 s on a busy machine).
  const loadsDeadline = performance.now() + 10_000;
  while (router.workers().some((w) => w.load !== 0) && performance.now() < loadsDeadline)
    await new Promise((r) => setTimeout(r, 20));

  console.log(`Sent ${total} requests through Envoy in ${seconds.toFixed(2)} s`);
  console.log(`  HTTP status: ${[...statuses].map(([s, n]) => `${s} x${n}`).join(', ')}`);
  console.log(`  Routing decisions: ${[...branches].map(([b, n]) => `${b} x${n}`).join(', ')}`);
  const holders = new Set(chain.workers);
  console.log(
    `  Responses API: ${chain.statuses.length} turns chained by previous_response_id, HTTP ${chain.statuses.join(' ')}, ` +
      `served by ${holders.size === 1 ? `one worker (${[...holders][0]})` : `${holders.size} workers`}`,
  );
  const sessionHolders = new Set(session.workers);
  console.log(
    `  Anthropic Messages API: a ${session.statuses.length}-turn coding session, HTTP ${session.statuses.join(' ')}, ` +
      `its conversation cached on ${sessionHolders.size === 1 ? `one ${pd ? 'prefill ' : ''}worker (${[...sessionHolders][0]})` : `${sessionHolders.size} workers`}`,
  );
  console.log('  Per worker (role, url, requests served, load now, prefix-cache hit tokens):');
  for (const w of router.workers()) {
    const sim = sims.find((s) => s.url === w.url && s.role === w.role);
    const hits = sim ? sim.cache.hitTokens : 0;
    console.log(
      `    ${w.role.padEnd(8)} ${w.url}  processed=${w.processed}  load=${w.load}  cache_hit_tokens=${hits}`,
    );
  }
  const allZero = router.workers().every((w) => w.load === 0);
  console.log(`  All loads back to 0: ${allZero ? 'yes' : 'NO'}`);

  const shutdown = async () => {
    await envoy.close();
    await router.close();
    await Promise.all(sims.map((s) => s.close()));
  };
  if (values.keep) {
    console.log('\nStack is running. Try:');
    console.log(
      `  curl -s ${base}/v1/completions -H 'content-type: application/json' -d '{"model":"sim-model","prompt":"hi","max_tokens":5}'`,
    );
    console.log(`  curl -s http://127.0.0.1:${router.adminPort}/workers`);
    console.log('Ctrl-C to stop.');
    await new Promise<void>((resolve) => {
      process.once('SIGINT', resolve);
      process.once('SIGTERM', resolve);
    });
  }
  await shutdown();
  const failed =
    [...statuses].filter(([s]) => s !== 200).reduce((n, [, c]) => n + c, 0) +
    chain.statuses.filter((s) => s !== 200).length +
    session.statuses.filter((s) => s !== 200).length;
  process.exit(allZero && failed === 0 ? 0 : 1);
}

/**
 * One conversation on the Responses API: each turn names the previous one, so it must reach the worker
 * that stored it (the router names the worker in the response id). The worker that answered each turn.
 */
async function responsesChain(
  base: string,
  turns: number,
): Promise<{ statuses: number[]; workers: string[] }> {
  const statuses: number[] = [];
  const workers: string[] = [];
  let previous: string | undefined;
  for (let t = 0; t < turns; t++) {
    const res = await fetch(`${base}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sim-model',
        instructions: 'You are a concise assistant.',
        input: `Turn ${t}: and then?`,
        max_output_tokens: 8,
        ...(previous !== undefined ? { previous_response_id: previous } : {}),
      }),
    });
    const body = (await res.json().catch(() => ({}))) as { id?: string };
    statuses.push(res.status);
    // The decode (or regular) worker: the header's first `worker=`, not `prefill_worker=`.
    workers.push(/(?:^|; )worker=([^;]+)/.exec(res.headers.get('x-vllm-router-decision') ?? '')?.[1] ?? '?');
    if (res.status === 200 && typeof body.id === 'string') previous = body.id;
  }
  return { statuses, workers };
}

/**
 * A coding session on the Anthropic Messages API, as Claude Code sends it: the same system prompt
 * opened by a billing header whose hash changes every turn, and the conversation so far. The worker
 * that computed each turn's prompt (in P/D, the prefill worker): the router keeps the session where
 * its conversation is cached.
 */
async function messagesSession(
  base: string,
  turns: number,
): Promise<{ statuses: number[]; workers: string[] }> {
  const statuses: number[] = [];
  const workers: string[] = [];
  const messages: Array<{ role: string; content: string }> = [];
  for (let t = 0; t < turns; t++) {
    messages.push({ role: 'user', content: `Step ${t}: refactor module ${t} of the router. `.repeat(8) });
    const res = await fetch(`${base}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({
        model: 'sim-model',
        max_tokens: 8,
        system: [
          { type: 'text', text: `x-anthropic-billing-header: cc_version=2.1.7; cch=${t}f3a9c;` },
          { type: 'text', text: 'You are a coding agent working in a TypeScript repository. '.repeat(6) },
        ],
        messages,
      }),
    });
    const body = (await res.json().catch(() => ({}))) as { content?: Array<{ text?: string }> };
    statuses.push(res.status);
    const decision = res.headers.get('x-vllm-router-decision') ?? '';
    const worker = pd ? /prefill_worker=([^;]+)/.exec(decision) : /(?:^|; )worker=([^;]+)/.exec(decision);
    workers.push(worker?.[1] ?? '?');
    messages.push({ role: 'assistant', content: body.content?.[0]?.text ?? '' });
  }
  return { statuses, workers };
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
