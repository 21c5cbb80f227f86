/** A P/D stack for end-to-end tests: prefill and decode simulators, the router in pd mode, real Envoy. */
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Config } from '../../src/config.js';
import type { Router } from '../../src/router.js';
import { startSimulator, type Simulator, type SimulatorOptions } from '../../src/sim/simulator.js';
import { startTestRouter } from './router-fixture.js';
import { freePorts } from './free-ports.js';
import { waitFor } from './wait-for.js';

export interface PdStack {
  readonly envoy: EnvoyHandle;
  readonly router: Router;
  readonly prefill: Simulator[];
  readonly decode: Simulator[];
  readonly url: string;
  /** Load of the router's Worker for this simulator in the given role. */
  load(sim: Simulator, role?: 'prefill' | 'decode'): number;
  close(): Promise<void>;
}

export async function startPdStack(opts: {
  prefill?: number;
  decode?: number;
  /** Every prefill simulator's options, or each one's by its index. */
  prefillSim?: SimulatorOptions | ((index: number) => SimulatorOptions);
  /** Every decode simulator's options, or each one's by its index. */
  decodeSim?: SimulatorOptions | ((index: number) => SimulatorOptions);
  router?: Partial<Config>;
  /**
   * Prefill simulators listen (HTTP and bootstrap) on ports from freePorts, below the kernel's
   * ephemeral range, so a test can close one and start it again on the same ports without an
   * outgoing connection taking them in between.
   */
  fixedPrefillPorts?: boolean;
}): Promise<PdStack> {
  const prefill: Simulator[] = [];
  const decode: Simulator[] = [];
  let router: Router | undefined;
  let envoy: EnvoyHandle | undefined;
  try {
    const connector = opts.router?.kvConnector ?? 'nixl';
    for (let i = 0; i < (opts.prefill ?? 1); i++) {
      const [port, bootstrapPort] = opts.fixedPrefillPorts ? await freePorts(2) : [];
      prefill.push(
        await startSimulator({
          role: 'prefill',
          kvConnector: connector,
          timeScale: 0,
          ...(port === undefined ? {} : { port }),
          ...(bootstrapPort === undefined || connector !== 'mooncake' ? {} : { bootstrapPort }),
          ...(typeof opts.prefillSim === 'function' ? opts.prefillSim(i) : opts.prefillSim),
        }),
      );
    }
    for (let i = 0; i < (opts.decode ?? 1); i++) {
      decode.push(
        await startSimulator({
          role: 'decode',
          kvConnector: connector,
          timeScale: 0,
          ...(typeof opts.decodeSim === 'function' ? opts.decodeSim(i) : opts.decodeSim),
        }),
      );
    }
    router = await startTestRouter({
      mode: 'pd',
      // Mooncake: `--prefill URL BOOTSTRAP_PORT`, each simulator's own bootstrap server.
      prefill: prefill.map((s) =>
        connector === 'mooncake' && s.bootstrapPort ? `${s.url} ${s.bootstrapPort}` : s.url,
      ),
      decode: decode.map((s) => s.url),
      prefillPolicy: 'round_robin',
      decodePolicy: 'round_robin',
      ...opts.router,
    });
    const adminPort = router.adminPort;
    // Ready = every role has a worker (Mooncake: a prefill whose bootstrap server answered).
    await waitFor(async () => (await fetch(`http://127.0.0.1:${adminPort}/readyz`)).status === 200, {
      message: 'router ready',
    });
    envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
  } catch (err) {
    await envoy?.close();
    await router?.close();
    await Promise.all([...prefill, ...decode].map((s) => s.close()));
    throw err;
  }
  const r = router;
  const e = envoy;
  return {
    envoy: e,
    router: r,
    prefill,
    decode,
    url: `http://127.0.0.1:${e.listenerPort}`,
    load(sim, role) {
      const want = role ?? sim.role;
      return r.workers().find((w) => w.url === sim.url && w.role === want)?.load ?? -1;
    },
    async close() {
      await e.close();
      await r.close();
      await Promise.all([...prefill, ...decode].map((s) => s.close()));
    },
  };
}
