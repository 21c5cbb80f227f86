/**
 * A whole stack on loopback for end-to-end tests: real Envoy (child process), the router
 * (in-process, so tests can read worker state), and simulated vLLM workers.
 */
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { EnvoyRenderOptions } from '../../src/envoy/envoy-config.js';
import type { Config } from '../../src/config.js';
import type { Router, RouterDeps } from '../../src/router.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/sim/simulator.js';
import { startTestRouter } from './router-fixture.js';

export interface StackOptions {
  workers?: number;
  /** Every simulator's options, or each one's by its index. */
  sim?: SimulatorOptions | ((index: number) => SimulatorOptions);
  router?: Partial<Config>;
  /** The router's dependencies (a test's clock). */
  routerDeps?: Omit<RouterDeps, 'logger'>;
  envoy?: EnvoyRenderOptions;
}

export interface Stack {
  readonly envoy: EnvoyHandle;
  readonly router: Router;
  readonly sims: Simulator[];
  /** http://127.0.0.1:<envoy listener> */
  readonly url: string;
  load(sim: Simulator): number;
  close(): Promise<void>;
}

export async function startStack(opts: StackOptions = {}): Promise<Stack> {
  const sims: Simulator[] = [];
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    for (let i = 0; i < (opts.workers ?? 2); i++) {
      const sim = typeof opts.sim === 'function' ? opts.sim(i) : opts.sim;
      sims.push(await startSimulator({ timeScale: 0, ...sim }));
    }
    router = await startTestRouter({ workers: sims.map((s) => s.url), ...opts.router }, opts.routerDeps);
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }], ...opts.envoy });
  } catch (err) {
    await envoy?.close();
    await router?.close();
    await Promise.all(sims.map((s) => s.close()));
    throw err;
  }
  const r = router;
  const e = envoy;
  return {
    envoy: e,
    router: r,
    sims,
    url: `http://127.0.0.1:${e.listenerPort}`,
    load: (sim) => r.workers().find((w) => w.url === sim.url)?.load ?? -1,
    async close() {
      await e.close();
      await r.close();
      await Promise.all(sims.map((s) => s.close()));
    },
  };
}

/** One answer through the stack's Envoy, with the router's decision (needs `decisionHeader: true`). */
export interface RoutedAnswer {
  readonly status: number;
  readonly text: string;
  /** The `x-vllm-router-decision` header. */
  readonly decision: string;
  /** The worker URL the decision names ('' without one). */
  readonly worker: string;
}

/** POSTs `body` as JSON to `path` (default /v1/completions) through Envoy and reads the whole answer. */
export async function postThrough(
  stack: Pick<Stack, 'url'>,
  body: Record<string, unknown>,
  path = '/v1/completions',
): Promise<RoutedAnswer> {
  const res = await fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const decision = res.headers.get('x-vllm-router-decision') ?? '';
  return { status: res.status, text, decision, worker: /worker=([^;\s]+)/.exec(decision)?.[1] ?? '' };
}

/** A two-token chat through the stack: a `system` prompt, then the user's `question`. */
export function chatThrough(stack: Stack, system: string, question: string): Promise<RoutedAnswer> {
  const messages = [
    { role: 'system', content: system },
    { role: 'user', content: question },
  ];
  return postThrough(stack, { model: 'sim-model', messages, max_tokens: 2 }, '/v1/chat/completions');
}
