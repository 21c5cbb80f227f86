/**
 * The gRPC server: envoy.service.ext_proc.v3.ExternalProcessor/Process plus grpc.health.v1.
 * The stream handler owns nothing but the session it creates.
 */
import * as grpc from '@grpc/grpc-js';
import { HealthImplementation, type ServingStatus } from 'grpc-health-check';
import type { Logger } from 'pino';
import { extProcService, SERVICE_NAME, type ProcessingRequest, type ProcessingResponse } from './proto.js';
import { Session, type SessionDeps } from './session.js';

/** Service names Envoy's gRPC health checks and endpoint-picker gateways ask for. */
export const HEALTH_SERVICE_NAMES = ['', 'liveness', 'readiness', SERVICE_NAME] as const;

export interface ExtProcServerOptions extends Omit<SessionDeps, 'onClose'> {
  readonly host: string;
  readonly port: number;
  readonly logger: Logger;
  readonly onStreamsChanged?: (active: number) => void;
}

export class ExtProcServer {
  private readonly server: grpc.Server;
  private readonly health: HealthImplementation;
  private active = 0;
  private idleWaiters: Array<() => void> = [];
  private closed = false;
  private boundPort = 0;

  constructor(private readonly opts: ExtProcServerOptions) {
    this.server = new grpc.Server({
      // No gRPC limit on what Envoy sends: Envoy's own buffer limit bounds a message, and the session
      // answers a JSON 413 above maxBodyBytes. A gRPC limit below Envoy's would fail the ext_proc
      // stream instead (the client gets Envoy's empty 500).
      'grpc.max_receive_message_length': -1,
      'grpc.max_send_message_length': opts.maxBodyBytes + 1024 * 1024,
      'grpc.keepalive_permit_without_calls': 1,
      'grpc.http2.min_ping_interval_without_data_ms': 5000,
      'grpc.max_concurrent_streams': 100000,
    });
    const statuses: Record<string, ServingStatus> = {};
    for (const name of HEALTH_SERVICE_NAMES) statuses[name] = 'SERVING';
    this.health = new HealthImplementation(statuses);
    this.health.addToServer(this.server);
    this.server.addService(extProcService().service, {
      Process: (stream: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>) =>
        this.onStream(stream),
    });
  }

  get port(): number {
    return this.boundPort;
  }

  get activeStreams(): number {
    return this.active;
  }

  async start(): Promise<number> {
    this.boundPort = await new Promise<number>((resolve, reject) => {
      this.server.bindAsync(
        `${this.opts.host}:${this.opts.port}`,
        grpc.ServerCredentials.createInsecure(),
        (err, port) => (err ? reject(err) : resolve(port)),
      );
    });
    return this.boundPort;
  }

  /** Readiness for gRPC health checks: NOT_SERVING on `readiness` and the ext_proc service name. */
  setReady(ready: boolean): void {
    const status: ServingStatus = ready ? 'SERVING' : 'NOT_SERVING';
    this.health.setStatus('', status);
    this.health.setStatus('readiness', status);
    this.health.setStatus(SERVICE_NAME, status);
  }

  private onStream(stream: grpc.ServerDuplexStream<ProcessingRequest, ProcessingResponse>): void {
    this.active += 1;
    this.opts.onStreamsChanged?.(this.active);
    let done = false;
    new Session(stream, {
      ...this.opts,
      onClose: () => {
        if (done) return;
        done = true;
        this.active -= 1;
        this.opts.onStreamsChanged?.(this.active);
        if (this.active === 0) for (const w of this.idleWaiters.splice(0)) w();
      },
    });
  }

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
   * Stops accepting streams. With `graceMs` > 0, open calls may finish first (GOAWAY, then up to
   * graceMs): a session can end before Envoy has read the replies to its last messages, so a
   * forceShutdown right after a drain would cut those responses. Then closes the rest. Idempotent.
   */
  async close(graceMs = 0): Promise<void> {
    if (this.closed) return;
    this.closed = true;
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
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
