/**
 * The gRPC server: envoy.service.ext_proc.v3.ExternalProcessor/Process plus grpc.health.v1, on the
 * small node:http2 gRPC server of grpc-server.ts. The stream handler owns nothing but the session it
 * creates.
 */
import type { Logger } from 'pino';
import { codecs } from './codec.js';
import { GrpcServer, type GrpcCall } from './grpc-server.js';
import { HealthService, type ServingStatus } from './health-service.js';
import { SERVICE_NAME, type ProcessingRequest, type ProcessingResponse } from './proto.js';
import { Session, type SessionDeps } from './session.js';

/** How long closing waits at least for the OK statuses of released streams to reach Envoy. */
const RELEASE_FLUSH_MS = 1000;

/** Service names Envoy's gRPC health checks and endpoint-picker gateways ask for. */
export const HEALTH_SERVICE_NAMES = ['', 'liveness', 'readiness', SERVICE_NAME] as const;

export interface ExtProcServerOptions extends Omit<SessionDeps, 'onClose' | 'onModeProblem'> {
  readonly host: string;
  readonly port: number;
  readonly logger: Logger;
  readonly onStreamsChanged?: (active: number) => void;
  /** A gRPC connection was closed by the server (connection-rotation.ts). */
  readonly onConnectionClose?: (reason: 'rotation' | 'reset_limit') => void;
}

export class ExtProcServer {
  private readonly server: GrpcServer;
  private readonly health: HealthService;
  private active = 0;
  /** Open sessions (close() hands the routed ones back to Envoy). */
  private readonly sessions = new Set<Session>();
  private idleWaiters: Array<() => void> = [];
  private closed = false;
  private boundPort = 0;
  /** The ext_proc configuration problems already logged (processing-modes.ts): each once. */
  private readonly modeProblems = new Set<string>();

  constructor(private readonly opts: ExtProcServerOptions) {
    // No gRPC limit on message size: Envoy's own buffer limit bounds a message, and the session
    // answers a JSON 413 above maxBodyBytes (a limit below Envoy's would fail the ext_proc stream
    // instead: the client gets Envoy's empty 500).
    this.server = new GrpcServer({
      settings: { maxConcurrentStreams: 100000 },
      onRotation: () => opts.onConnectionClose?.('rotation'),
      onResetLimit: () => opts.onConnectionClose?.('reset_limit'),
    });
    const statuses: Record<string, ServingStatus> = {};
    for (const name of HEALTH_SERVICE_NAMES) statuses[name] = 'SERVING';
    this.health = new HealthService(statuses);
    this.health.addTo(this.server);
    const c = codecs();
    this.server.addMethod(`/${SERVICE_NAME}/Process`, {
      request: c.processingRequest,
      response: c.processingResponse,
      handler: (call: GrpcCall<ProcessingRequest, ProcessingResponse>) => this.onStream(call),
    });
  }

  get port(): number {
    return this.boundPort;
  }

  get activeStreams(): number {
    return this.active;
  }

  async start(): Promise<number> {
    this.boundPort = await this.server.listen(this.opts.host, this.opts.port);
    return this.boundPort;
  }

  /** Readiness for gRPC health checks: NOT_SERVING on `readiness` and the ext_proc service name. */
  setReady(ready: boolean): void {
    const status: ServingStatus = ready ? 'SERVING' : 'NOT_SERVING';
    this.health.setStatus('', status);
    this.health.setStatus('readiness', status);
    this.health.setStatus(SERVICE_NAME, status);
  }

  private onStream(stream: GrpcCall<ProcessingRequest, ProcessingResponse>): void {
    this.active += 1;
    this.opts.onStreamsChanged?.(this.active);
    let done = false;
    // The constructor only subscribes to the stream's events: onClose never runs inside it.
    const session: Session = new Session(stream, {
      ...this.opts,
      onModeProblem: this.reportModeProblem,
      onClose: () => {
        if (done) return;
        done = true;
        this.sessions.delete(session);
        this.active -= 1;
        this.opts.onStreamsChanged?.(this.active);
        if (this.active === 0) for (const w of this.idleWaiters.splice(0)) w();
      },
    });
    this.sessions.add(session);
    // A stream that crossed the closing server's GOAWAY: handed back once routed, like the others.
    if (this.closed) session.release();
  }

  private readonly reportModeProblem = (problem: string): void => {
    if (this.modeProblems.has(problem)) return;
    this.modeProblems.add(problem);
    this.opts.logger.error(
      { problem },
      "Envoy's ext_proc filter is configured in a way the router cannot route with",
    );
  };

  /** Resolves when no stream is open, or after `timeoutMs` (returns whether it drained). */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.active === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), timeoutMs);
      timer.unref();
      this.idleWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /**
   * Stops accepting streams. First every routed request still open (a drain that timed out on long
   * generations, or a close without a drain) is handed back to Envoy (Session.release): its stream
   * ends with gRPC OK and Envoy finishes the response without the router, where a reset would cut it
   * (fail-closed); a request routed later (its body or prefill leg still to come) is handed back when
   * it is. With `graceMs` > 0, open calls may finish first (GOAWAY, then up to graceMs): a
   * session can end before Envoy has read the replies to its last messages, so a forceShutdown right
   * after a drain would cut those responses; the same holds for the OK statuses of released streams,
   * so they get at least RELEASE_FLUSH_MS. Then closes the rest (requests not routed yet: reset,
   * which Envoy retries on another replica). Idempotent.
   */
  async close(graceMs = 0): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    let released = 0;
    for (const session of [...this.sessions]) if (session.release()) released += 1;
    if (released > 0) {
      this.opts.logger.info({ released }, 'handed routed streams back to Envoy');
      graceMs = Math.max(graceMs, RELEASE_FLUSH_MS);
    }
    if (graceMs <= 0) {
      this.server.forceShutdown();
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      timer.unref();
      void this.server.shutdown().then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
