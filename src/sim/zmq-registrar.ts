/**
 * Self-registration heartbeat of a simulated vLLM worker, exactly as vLLM's P2P NCCL connector
 * (`p2p_nccl_engine.py`, `ping()`) does it: a ZMQ DEALER socket whose routing id is the worker's
 * zmq_address connects to the router's discovery ROUTER socket and sends, immediately and then every
 * `intervalMs` (vLLM: 3000), ONE frame `msgpack({type: 'P' | 'D', http_address, zmq_address, ...extra})`.
 * `extra` (e.g. MoRI-IO `transfer_mode`) is merged last, so a test may also override the standard fields.
 *
 * Sends never block: `sendTimeout = 0` and a small high-water mark, so while the router is down a few
 * heartbeats queue and the rest are dropped (EAGAIN) instead of piling up stale registrations. A send
 * still pending when the next tick comes is not duplicated. `close()` uses linger 0 and is idempotent.
 */
import { Dealer } from 'zeromq';
import { encode } from '@msgpack/msgpack';

export interface ZmqRegistrarOptions {
  /** Router endpoint, e.g. `tcp://127.0.0.1:5555`. */
  readonly endpoint: string;
  readonly type: 'P' | 'D';
  /** `host:port` of the HTTP server, no scheme. */
  readonly httpAddress: string;
  /** `host:port` KV address; also the DEALER routing id. */
  readonly zmqAddress: string;
  /** Heartbeat period, ms. Default 3000. */
  readonly intervalMs?: number;
  readonly extra?: Readonly<Record<string, unknown>>;
  /** Send failures other than "queue full" (the composition root may log them). */
  readonly onError?: (err: unknown) => void;
}

/** The heartbeat message (exported for tests and the router's own test doubles). */
export function registrationMessage(o: ZmqRegistrarOptions): Record<string, unknown> {
  return { type: o.type, http_address: o.httpAddress, zmq_address: o.zmqAddress, ...o.extra };
}

export class ZmqRegistrar {
  private readonly socket: Dealer;
  private readonly payload: Buffer;
  private readonly intervalMs: number;
  private timer: NodeJS.Timeout | undefined;
  private sending = false;
  private closed = false;
  private connected = false;

  constructor(private readonly options: ZmqRegistrarOptions) {
    this.intervalMs = options.intervalMs ?? 3000;
    if (!(this.intervalMs > 0)) throw new RangeError('register intervalMs must be > 0');
    const bytes = encode(registrationMessage(options));
    this.payload = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.socket = new Dealer({
      routingId: options.zmqAddress,
      linger: 0,
      sendTimeout: 0,
      sendHighWaterMark: 4,
    });
  }

  get running(): boolean {
    return this.timer !== undefined;
  }

  /** Connects (first call) and starts heartbeating, the first one immediately. Idempotent. */
  start(): void {
    if (this.closed || this.timer) return;
    if (!this.connected) {
      this.socket.connect(this.options.endpoint);
      this.connected = true;
    }
    this.timer = setInterval(() => this.beat(), this.intervalMs).unref();
    this.beat();
  }

  /** Stops heartbeating (the router expires the worker); the socket stays open for start(). */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.stop();
    this.socket.linger = 0;
    this.socket.close();
  }

  private beat(): void {
    if (this.closed || this.sending) return;
    this.sending = true;
    this.socket.send(this.payload).then(
      () => {
        this.sending = false;
      },
      (err: unknown) => {
        this.sending = false;
        if (this.closed || (err as { code?: string }).code === 'EAGAIN') return;
        this.options.onError?.(err);
      },
    );
  }
}
