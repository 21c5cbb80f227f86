/**
 * Free loopback ports for child processes that take their ports as flags (Envoy, kube-apiserver,
 * etcd, the routers and peers of the benchmarks).
 */
import { readFileSync } from 'node:fs';
import { createServer, type AddressInfo, type Server } from 'node:net';

/**
 * `count` distinct free ports on 127.0.0.1. Every probe socket stays bound until all are found, so
 * the ports asked for one child are never the same (probing one at a time can hand the same port back
 * twice: a benchmark run died on `--prometheus-port and --port are both 34721`). The ports are released
 * before the caller's child binds them, so another process may still take one meanwhile.
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      servers.push(await listenBelowEphemeral());
    }
    return servers.map((srv) => (srv.address() as AddressInfo).port);
  } finally {
    await Promise.all(servers.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
  }
}

/**
 * A port is handed back before its child binds it (sometimes again, after a restart). Port 0 would
 * pick it from the kernel's ephemeral range, where every outgoing connection of every process on the
 * host also takes its local port: under a full test run one of them took a soak's port in the gap
 * ("Address already in use"). So ports come from below that range (Linux: ip_local_port_range),
 * where only explicit binds land; port 0 only when no such port is free.
 */
const LOW_PORTS = { from: 20000, to: ephemeralStart() };

function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').split(/\s+/)[0]);
    return Number.isInteger(first) && first > 20000 ? first : 20000;
  } catch {
    return 20000; // not Linux: port 0 below
  }
}

async function listenBelowEphemeral(): Promise<Server> {
  const span = LOW_PORTS.to - LOW_PORTS.from;
  for (let attempt = 0; attempt < (span > 0 ? 64 : 0); attempt++) {
    const port = LOW_PORTS.from + Math.floor(Math.random() * span);
    const srv = await listen(port).catch(() => undefined);
    if (srv) return srv;
  }
  return listen(0);
}

function listen(port: number): Promise<Server> {
  const srv = createServer();
  return new Promise<Server>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, '127.0.0.1', () => resolve(srv));
  });
}

/** One free port on 127.0.0.1 (see freePorts: ask for all of a child's ports at once). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

/**
 * `count` distinct free ports on 127.0.0.1 that stay bound until released: for a child that binds its
 * port long after the ports are chosen (a soak's KV publishers bind only once the routers are up), so
 * no other allocation can draw the port in between. `release(port)` just before the child binds it;
 * `releaseAll()` (idempotent) on every way out.
 */
export async function reservePorts(count: number): Promise<PortReservation> {
  const servers = new Map<number, Server>();
  try {
    for (let i = 0; i < count; i++) {
      const srv = await listenBelowEphemeral();
      servers.set((srv.address() as AddressInfo).port, srv);
    }
  } catch (err) {
    await Promise.all([...servers.values()].map(close));
    throw err;
  }
  const release = async (port: number): Promise<void> => {
    const srv = servers.get(port);
    servers.delete(port);
    if (srv !== undefined) await close(srv);
  };
  return {
    ports: [...servers.keys()],
    release,
    releaseAll: async () => void (await Promise.all([...servers.keys()].map(release))),
  };
}

export interface PortReservation {
  readonly ports: readonly number[];
  release(port: number): Promise<void>;
  releaseAll(): Promise<void>;
}

function close(srv: Server): Promise<void> {
  return new Promise<void>((resolve) => srv.close(() => resolve()));
}
