/**
 * The standard gRPC health service (grpc.health.v1.Health: Check and Watch) on the router's gRPC port,
 * which Envoy's `grpc_health_check` and endpoint-picker gateways query. Statuses are per service name;
 * an unknown name is NOT_FOUND for Check and SERVICE_UNKNOWN for Watch (as the protocol says).
 */
import { codecs } from './codec.js';
import { GrpcStatus, type GrpcCall, type GrpcServer } from './grpc-server.js';

export type ServingStatus = 'SERVING' | 'NOT_SERVING';

/** HealthCheckResponse.ServingStatus values. */
const STATUS = { SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;

type HealthCall = GrpcCall<{ service: string }, { status: number }>;

export class HealthService {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Map<string, Set<HealthCall>>();

  constructor(initial: Readonly<Record<string, ServingStatus>>) {
    for (const [name, status] of Object.entries(initial)) this.statuses.set(name, status);
  }

  setStatus(service: string, status: ServingStatus): void {
    if (this.statuses.get(service) === status) return;
    this.statuses.set(service, status);
    for (const call of this.watchers.get(service) ?? []) call.write({ status: STATUS[status] });
  }

  /** Service names with a Watch open now (each one's watchers are forgotten with its last Watch). */
  watchedServices(): number {
    return this.watchers.size;
  }

  addTo(server: GrpcServer): void {
    const c = codecs();
    const codec = { request: c.healthCheckRequest, response: c.healthCheckResponse };
    server.addMethod('/grpc.health.v1.Health/Check', {
      ...codec,
      handler: (call) =>
        call.once('data', (req: { service: string }) => {
          const status = this.statuses.get(req.service);
          if (status === undefined) return call.sendStatus(GrpcStatus.NOT_FOUND, 'unknown service');
          call.write({ status: STATUS[status] });
          call.end();
        }),
    });
    server.addMethod('/grpc.health.v1.Health/Watch', {
      ...codec,
      handler: (call) =>
        call.once('data', (req: { service: string }) => {
          const status = this.statuses.get(req.service);
          call.write({ status: status === undefined ? STATUS.SERVICE_UNKNOWN : STATUS[status] });
          let set = this.watchers.get(req.service);
          if (!set) this.watchers.set(req.service, (set = new Set()));
          set.add(call);
          call.once('close', () => {
            // Any service name may be watched: forget one nobody watches any more.
            set.delete(call);
            if (set.size === 0 && this.watchers.get(req.service) === set) this.watchers.delete(req.service);
          });
        }),
    });
  }
}
