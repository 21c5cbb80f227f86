/**
 * Envoy Gateway's own translator, offline: `egctl x translate` (built by scripts/install-egctl.sh into
 * the git-ignored .cache/egctl/, or EGCTL_BIN) turns Gateway API resources and Envoy Gateway policies
 * into the xDS an Envoy Gateway would send its proxies, with each policy's status. `staticBootstrap`
 * turns that xDS into a bootstrap a plain Envoy runs on loopback: the listener on a free port, its
 * route configuration inlined (RDS), every EDS cluster given its translated endpoints (addresses
 * rewritten to where the test's processes listen). Nothing else is changed.
 * A missing egctl is an error naming the setup script, never a skip.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'yaml';
import { runSetupScript } from './setup-script.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

export interface Translation {
  /** The input's policies and routes with the status Envoy Gateway gave them (kind -> objects). */
  readonly resources: Json;
  /** The xDS of the one Gateway: listeners, routes, clusters, endpoints (proto3 JSON field names). */
  readonly listeners: Json[];
  readonly routes: Json[];
  readonly clusters: Json[];
  readonly endpoints: Json[];
}

/** egctl, from EGCTL_BIN or as scripts/install-egctl.sh built it (`--check`: a test never builds it). */
const egctl = (): string =>
  runSetupScript(
    'install-egctl.sh',
    "egctl (Envoy Gateway's CLI)",
    'needs go and the Go module proxy, ~5 min; or set EGCTL_BIN',
    ['--check'],
  );

/**
 * The resources of a config dump's list: each is an Any there (`@type` first); in a bootstrap it is
 * the message itself.
 */
function resourcesOf(list: Json[] | undefined, pick: (entry: Json) => Json): Json[] {
  return (list ?? []).map((entry) => {
    const { '@type': _type, ...message } = pick(entry);
    return message;
  });
}

/** Translates `manifests` (multi-document YAML) as Envoy Gateway would for its one Gateway. */
export function translate(manifests: string): Translation {
  const bin = egctl();
  const dir = mkdtempSync(join(tmpdir(), 'egctl-'));
  try {
    const file = join(dir, 'in.yaml');
    writeFileSync(file, manifests);
    const out = execFileSync(
      bin,
      [
        'x',
        'translate',
        '--from',
        'gateway-api',
        '--to',
        'gateway-api,xds',
        '-t',
        'all',
        '-o',
        'yaml',
        '-f',
        file,
      ],
      { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const doc = parse(out) as Json;
    const nodes = Object.values(doc.xds ?? {}) as Json[];
    if (nodes.length !== 1) throw new Error(`egctl: expected the xDS of one Gateway, got ${nodes.length}`);
    const configs = nodes[0]!.configs as Json[];
    const dump = (type: string): Json =>
      configs.find((c) => (c['@type'] as string).endsWith(`.${type}`)) ?? {};
    const { xds: _xds, ...resources } = doc;
    return {
      resources,
      listeners: resourcesOf(dump('ListenersConfigDump').dynamicListeners, (l) => l.activeState.listener),
      routes: resourcesOf(dump('RoutesConfigDump').dynamicRouteConfigs, (r) => r.routeConfig),
      clusters: resourcesOf(dump('ClustersConfigDump').dynamicActiveClusters, (c) => c.cluster),
      endpoints: resourcesOf(dump('EndpointsConfigDump').dynamicEndpointConfigs, (e) => e.endpointConfig),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A bootstrap for a plain Envoy from the Gateway listener `listenerName`: admin and listener on
 * 127.0.0.1 port 0; `addresses` maps a translated endpoint "ip:port" (a Service) to where it really
 * listens, one "host:port" or several (the Service's pods).
 */
export function staticBootstrap(
  t: Translation,
  listenerName: string,
  addresses: Record<string, string | string[]>,
): string {
  const listener = structuredClone(t.listeners.find((l) => l.name === listenerName));
  if (!listener)
    throw new Error(`no listener ${listenerName} in ${t.listeners.map((l) => l.name).join(', ')}`);
  listener.address = { socketAddress: { address: '127.0.0.1', portValue: 0 } };
  const chains = [listener.defaultFilterChain, ...(listener.filterChains ?? [])].filter(Boolean) as Json[];
  for (const chain of chains) {
    for (const f of chain.filters as Json[]) {
      const hcm = f.typedConfig as Json;
      if (!hcm.rds) continue;
      const route = t.routes.find((r) => r.name === hcm.rds.routeConfigName);
      if (!route) throw new Error(`route configuration ${hcm.rds.routeConfigName} not translated`);
      delete hcm.rds;
      hcm.routeConfig = route;
    }
  }
  const clusters = t.clusters.map((c) => {
    if (c.type !== 'EDS') return c;
    const { edsClusterConfig, ...rest } = c;
    const name = (edsClusterConfig?.serviceName as string | undefined) ?? (c.name as string);
    const la = structuredClone(t.endpoints.find((e) => e.clusterName === name));
    if (!la) throw new Error(`no endpoints translated for cluster ${name}`);
    for (const group of la.endpoints ?? []) {
      group.lbEndpoints = ((group.lbEndpoints ?? []) as Json[]).flatMap((lb) => {
        const sa = lb.endpoint.address.socketAddress;
        const to = addresses[`${sa.address}:${sa.portValue}`];
        if (to === undefined)
          throw new Error(`cluster ${name}: no address given for ${sa.address}:${sa.portValue}`);
        return (Array.isArray(to) ? to : [to]).map((hostPort) => {
          const at = hostPort.lastIndexOf(':');
          const copy = structuredClone(lb);
          copy.endpoint.address.socketAddress = {
            address: hostPort.slice(0, at),
            portValue: Number(hostPort.slice(at + 1)),
          };
          return copy;
        });
      });
    }
    return { ...rest, type: 'STATIC', loadAssignment: { ...la, clusterName: c.name } };
  });
  return JSON.stringify({
    admin: { address: { socketAddress: { address: '127.0.0.1', portValue: 0 } } },
    staticResources: { listeners: [listener], clusters },
  });
}
