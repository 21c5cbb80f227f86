/**
 * A loopback TCP relay the test can cut: clients connect to `port`, bytes are piped to `target`. `cut()`
 * destroys every open connection and, until `resume()`, every new one at once (a network partition as the
 * client sees it: its watch drops and reconnects fail), while the server behind keeps running for others.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

export class TcpCutter {
  private readonly sockets = new Set<Socket>();
  private blocked = false;
  private accepted = 0;

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpCutter> {
    const holder: { self?: TcpCutter } = {};
    const server = createServer((client) => holder.self?.relay(client, targetHost, targetPort));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    holder.self = new TcpCutter(server, (server.address() as { port: number }).port);
    return holder.self;
  }

  /** Connections accepted and relayed so far. */
  get connections(): number {
    return this.accepted;
  }

  /** Drops every open connection and refuses new ones until resume(). */
  cut(): void {
    this.blocked = true;
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
  }

  resume(): void {
    this.blocked = false;
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private relay(client: Socket, host: string, port: number): void {
    if (this.blocked) {
      client.destroy();
      return;
    }
    this.accepted++;
    const upstream = connect(port, host);
    for (const s of [client, upstream]) {
      this.sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        this.sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  }
}
