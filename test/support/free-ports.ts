/**
 * Free loopback ports for child processes that take their ports as flags (Envoy, kube-apiserver,
 * etcd, the routers and peers of the benchmarks).
 */
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
      const srv = createServer();
      servers.push(srv);
      await new Promise<void>((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(0, '127.0.0.1', () => resolve());
      });
    }
    return servers.map((srv) => (srv.address() as AddressInfo).port);
  } finally {
    await Promise.all(servers.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
  }
}

/** One free port on 127.0.0.1 (see freePorts: ask for all of a child's ports at once). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}
