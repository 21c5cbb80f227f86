/**
 * docker-compose.replicas.yml (two router replicas behind one Envoy, simulated workers, static worker
 * config) cannot be started here (no Docker engine), so it is checked against what it wires together:
 * envoy/envoy-replicas.yaml (mounted unchanged: its ext_proc endpoints must be the replicas' gRPC ports
 * in the namespace they share with Envoy), the router's option table and parser (config-schema.ts,
 * config.ts) and the simulator's CLI flags (src/sim/cli.ts). The Envoy file itself is validated by the
 * real Envoy binary in test/e2e/envoy-configs.test.ts.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig, type Config } from '../../../src/config.js';
import { OPTIONS, type OptionSpec } from '../../../src/config-schema.js';

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');
const yamlFile = (rel: string) => parse(read(rel), { merge: true }) as Yaml;

const compose = yamlFile('docker-compose.replicas.yml');
const envoy = yamlFile('envoy/envoy-replicas.yaml');
const services = compose.services as Record<string, Yaml>;

const routers = Object.entries(services).filter(
  ([, s]) => s.image === services.net?.image && s.entrypoint === undefined,
);
const sims = Object.entries(services).filter(
  ([, s]) => Array.isArray(s.entrypoint) && s.entrypoint.join(' ').includes('dist/src/sim/cli.js'),
);

function routerConfig(name: string): Readonly<Config> {
  const parsed = parseConfig(services[name]!.command as string[], {});
  if (parsed.help) throw new Error(`${name} asks for --help`);
  return parsed.config;
}

function argValue(args: string[], flag: string): string | undefined {
  const i = args.indexOf(`--${flag}`);
  return i >= 0 ? args[i + 1] : undefined;
}

/** Without the two flags that must differ between replicas sharing one namespace. */
function withoutPorts(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--grpc-port' || args[i] === '--admin-port') i++;
    else out.push(args[i] as string);
  }
  return out;
}

/** The simulator's CLI flags, read from the parseArgs table of src/sim/cli.ts (it runs on import). */
function simFlags(): Set<string> {
  const src = read('src/sim/cli.ts');
  const block = /options:\s*\{([\s\S]*?)\n\s*\},\n\s*strict/.exec(src)?.[1] ?? '';
  return new Set([...block.matchAll(/^\s*'?([a-z][a-z-]*)'?:\s*\{\s*type:/gm)].map((m) => m[1] as string));
}

const routerCluster = (envoy.static_resources.clusters as Yaml[]).find((c) => c.name === 'vllm_router')!;
const replicaAddresses = (routerCluster.load_assignment.endpoints as Yaml[]).flatMap((e) =>
  (e.lb_endpoints as Yaml[]).map((l) => l.endpoint.address.socket_address as Yaml),
);

describe('docker-compose.replicas.yml', () => {
  it('runs two router replicas, started the same way but for their ports', () => {
    expect(routers.map(([n]) => n).sort()).toEqual(['router-1', 'router-2']);
    const [a, b] = routers.map(([, s]) => s.command as string[]);
    expect(withoutPorts(a!)).toEqual(withoutPorts(b!));
    const grpc = routers.map(([n]) => routerConfig(n).grpcPort);
    const admin = routers.map(([n]) => routerConfig(n).adminPort);
    expect(new Set([...grpc, ...admin]).size).toBe(4); // one namespace: no port used twice
  });

  it('without KV events, both replicas seed new prefixes on the same worker from the first request', () => {
    for (const [name] of routers) {
      const c = routerConfig(name);
      expect(c.kvEventSource, name).toEqual([]);
      expect(c.prefixHomeMarginAlone, name).toBe(c.prefixHomeMargin);
    }
  });

  it('mounts envoy/envoy-replicas.yaml unchanged, fail-closed', () => {
    const svc = services.envoy!;
    expect(svc.image).toMatch(/^envoyproxy\/envoy:v1\.40/);
    const mount = (svc.volumes as string[]).find((v) => v.startsWith('./envoy/envoy-replicas.yaml:'));
    expect(mount).toBeDefined();
    const args = svc.command as string[];
    expect(args[args.indexOf('-c') + 1]).toBe(mount!.split(':')[1]);
    const hcm = envoy.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    const extProc = (hcm.http_filters as Yaml[]).find((f) => f.name === 'envoy.filters.http.ext_proc')!;
    expect(extProc.typed_config.failure_mode_allow).toBe(false);
    expect(extProc.typed_config.grpc_service.envoy_grpc.cluster_name).toBe('vllm_router');
  });

  it("points Envoy's ext_proc endpoints at exactly the replicas' gRPC ports, in one shared namespace", () => {
    expect(services.envoy!.network_mode).toBe('service:net');
    for (const [name, svc] of routers) expect(svc.network_mode, name).toBe('service:net');
    expect(replicaAddresses.every((a) => a.address === '127.0.0.1')).toBe(true);
    expect(replicaAddresses.map((a) => a.port_value as number).sort()).toEqual(
      routers.map(([n]) => routerConfig(n).grpcPort).sort(),
    );
    // Envoy's gRPC health checks ask for the service name every replica serves.
    expect(routerCluster.health_checks[0].grpc_health_check.service_name).toBe(
      'envoy.service.ext_proc.v3.ExternalProcessor',
    );
  });

  it("publishes Envoy's listener and each replica's admin port on the namespace owner", () => {
    const net = services.net!;
    expect(net.build).toBeDefined();
    expect(net.network_mode).toBeUndefined();
    const listener = envoy.static_resources.listeners[0].address.socket_address.port_value as number;
    expect(net.ports).toContain(`${listener}:${listener}`);
    for (const [name] of routers) {
      const admin = routerConfig(name).adminPort;
      expect(net.ports, name).toContain(`${admin}:${admin}`);
    }
    for (const [name, svc] of Object.entries(services)) {
      if (svc.network_mode === 'service:net') expect(svc.ports, name).toBeUndefined();
    }
  });

  it('gives both replicas every simulated worker, by the name each simulator binds to', () => {
    const expected = sims.map(([, s]) => {
      const args = s.command as string[];
      return `http://${argValue(args, 'host')}:${argValue(args, 'port')}`;
    });
    expect(expected.length).toBeGreaterThanOrEqual(2);
    for (const [name] of routers)
      expect([...routerConfig(name).workers].sort(), name).toEqual(expected.sort());
    for (const [name, svc] of sims) {
      expect(argValue(svc.command as string[], 'host')).toBe(name);
      expect(svc.hostname).toBe(name);
    }
  });

  it('starts the replicas after every simulator is healthy (static names resolve once, at start)', () => {
    for (const [name, svc] of routers) {
      for (const [sim] of sims)
        expect(svc.depends_on[sim], `${name} -> ${sim}`).toEqual({ condition: 'service_healthy' });
    }
    for (const [name, svc] of sims) {
      expect(svc.healthcheck.test.join(' '), name).toContain(':8000/health');
      expect(argValue(svc.command as string[], 'port')).toBe('8000');
    }
  });

  it('uses router and simulator flags that exist', () => {
    const routerFlags = new Set((OPTIONS as readonly OptionSpec[]).flatMap((o) => [o.flag, `no-${o.flag}`]));
    for (const [name, svc] of routers) {
      for (const a of (svc.command as string[]).filter((x) => x.startsWith('--')))
        expect(routerFlags, `${name}: ${a}`).toContain(a.slice(2));
    }
    const flags = simFlags();
    expect(flags.has('host')).toBe(true);
    for (const [name, svc] of sims) {
      for (const a of (svc.command as string[]).filter((x) => x.startsWith('--')))
        expect(flags, `${name}: ${a}`).toContain(a.slice(2));
      expect(svc.image).toBe(services.net!.image);
      expect(svc.pull_policy).toBe('never');
    }
  });
});
