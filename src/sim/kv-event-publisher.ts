/**
 * A KV-event publisher that behaves like vLLM's ZmqEventPublisher (vllm/distributed/kv_events.py), for
 * the simulator and tests.
 *
 * - PUB socket bound to `endpoint` (vLLM binds `tcp://*:5557`); frames `[topic, seq (8-byte big-endian,
 *   from 0), payload]`; payload = msgpack EventBatch in either encoding vLLM has shipped: `map`
 *   (tagged maps, current vLLM; default-valued optional fields omitted) or `array` (array-like).
 * - Block hashes as 64-bit unsigned ints (msgpack uint64, vLLM's default) or as 32-byte digests.
 * - Optional replay ROUTER bound to `replayEndpoint`: a request `[id, '', start seq]` is answered with
 *   `[id, '', seq, payload]` for every buffered batch with seq >= start, then `[id, '', -1, '']`; the
 *   last `bufferSteps` (default 10,000) batches are kept.
 * - `skip(n)` advances seq without sending (what a PUB high-water-mark drop looks like to a
 *   subscriber) but keeps the batches for replay, for gap tests.
 *
 * Sends are serialised (zeromq.js allows one send in flight per socket). close() is idempotent.
 */
import * as zmq from 'zeromq';
import { Encoder } from '@msgpack/msgpack';

export type KvEventEncoding = 'map' | 'array';
export type BlockHashFormat = 'int' | 'bytes';

export type SimKvEvent =
  | {
      type: 'stored';
      hashes: readonly bigint[];
      parent: bigint | undefined;
      tokens: readonly number[];
      blockSize: number;
      medium?: string;
      loraName?: string;
      /** Per block: its extra keys (e.g. `[cache_salt]` on block 0) or null; omitted = none at all. */
      extraKeys?: ReadonlyArray<readonly string[] | null>;
    }
  | { type: 'removed'; hashes: readonly bigint[]; medium?: string }
  | { type: 'cleared' };

export interface KvEventPublisherOptions {
  /** Default `tcp://127.0.0.1:0` (a free port; see start()). */
  endpoint?: string;
  /** Replay ROUTER endpoint; undefined = no replay (vLLM's default). */
  replayEndpoint?: string;
  topic?: string;
  encoding?: KvEventEncoding;
  hashFormat?: BlockHashFormat;
  bufferSteps?: number;
  dataParallelRank?: number;
}

const encoder = new Encoder({ useBigInt64: true });
const END_SEQ = Buffer.from('ffffffffffffffff', 'hex');

function seqBytes(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

export class KvEventPublisher {
  readonly encoding: KvEventEncoding;
  readonly hashFormat: BlockHashFormat;
  endpoint = '';
  replayEndpoint: string | undefined;
  private readonly pub = new zmq.Publisher({ linger: 0, sendHighWaterMark: 100_000 });
  private replay: zmq.Router | undefined;
  private readonly topic: Buffer;
  private readonly buffer: Array<[number, Uint8Array]> = [];
  private readonly bufferSteps: number;
  private seq = 0;
  private sending: Promise<void> = Promise.resolve();
  private replayLoop: Promise<void> | undefined;
  private closing: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly opts: KvEventPublisherOptions = {}) {
    this.encoding = opts.encoding ?? 'map';
    this.hashFormat = opts.hashFormat ?? 'int';
    this.topic = Buffer.from(opts.topic ?? '', 'utf8');
    this.bufferSteps = opts.bufferSteps ?? 10_000;
  }

  async start(): Promise<{ endpoint: string; replayEndpoint: string | undefined }> {
    await bindRetrying(this.pub, this.opts.endpoint ?? 'tcp://127.0.0.1:0');
    this.endpoint = this.pub.lastEndpoint as string;
    if (this.opts.replayEndpoint !== undefined) {
      const router = new zmq.Router({ linger: 0 });
      this.replay = router;
      await bindRetrying(router, this.opts.replayEndpoint);
      this.replayEndpoint = router.lastEndpoint as string;
      this.replayLoop = this.serveReplay(router);
    }
    return { endpoint: this.endpoint, replayEndpoint: this.replayEndpoint };
  }

  /** The next sequence number. */
  get nextSeq(): number {
    return this.seq;
  }

  /** Publishes one batch; resolves once handed to ZMQ. Returns its seq. */
  publish(events: readonly SimKvEvent[], ts = Date.now() / 1000): Promise<number> {
    const seq = this.seq++;
    const payload = this.encodeBatch(events, ts);
    this.remember(seq, payload);
    const frames = [this.topic, seqBytes(seq), payload];
    this.sending = this.sending.then(async () => {
      if (!this.closed && !this.pub.closed) await this.pub.send(frames).catch(() => undefined);
    });
    return this.sending.then(() => seq);
  }

  /** Records `n` batches for replay without sending them (a dropped-at-HWM gap). */
  skip(events: readonly SimKvEvent[], ts = Date.now() / 1000): number {
    const seq = this.seq++;
    this.remember(seq, this.encodeBatch(events, ts));
    return seq;
  }

  /** Sends raw frames (for hostile-input tests). */
  sendRaw(frames: Buffer[]): Promise<void> {
    this.sending = this.sending.then(async () => {
      if (!this.closed && !this.pub.closed) await this.pub.send(frames).catch(() => undefined);
    });
    return this.sending;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.sending;
      this.closed = true;
      this.pub.close();
      if (this.replay !== undefined && !this.replay.closed) this.replay.close();
      await this.replayLoop;
    })();
    return this.closing;
  }

  encodeBatch(events: readonly SimKvEvent[], ts: number): Uint8Array {
    const rank = this.opts.dataParallelRank ?? 0;
    const encoded = events.map((e) => this.encodeEvent(e));
    return encoder.encode(
      this.encoding === 'array' ? [ts, encoded, rank] : { ts, events: encoded, data_parallel_rank: rank },
    );
  }

  private hash(h: bigint): bigint | Uint8Array {
    if (this.hashFormat === 'int') return h;
    const out = Buffer.alloc(32);
    out.writeBigUInt64BE(h, 24);
    return out;
  }

  private encodeEvent(e: SimKvEvent): unknown {
    const array = this.encoding === 'array';
    switch (e.type) {
      case 'stored': {
        const fields = {
          block_hashes: e.hashes.map((h) => this.hash(h)),
          parent_block_hash: e.parent === undefined ? null : this.hash(e.parent),
          token_ids: e.tokens,
          block_size: e.blockSize,
          lora_id: null,
          medium: e.medium ?? 'GPU',
          lora_name: e.loraName ?? null,
          ...(e.extraKeys !== undefined ? { extra_keys: e.extraKeys } : {}),
        };
        return array ? ['BlockStored', ...Object.values(fields)] : { type: 'BlockStored', ...fields };
      }
      case 'removed': {
        const fields = { block_hashes: e.hashes.map((h) => this.hash(h)), medium: e.medium ?? 'GPU' };
        return array ? ['BlockRemoved', ...Object.values(fields)] : { type: 'BlockRemoved', ...fields };
      }
      case 'cleared':
        return array ? ['AllBlocksCleared'] : { type: 'AllBlocksCleared' };
    }
  }

  private remember(seq: number, payload: Uint8Array): void {
    if (this.replay === undefined && this.opts.replayEndpoint === undefined) return;
    this.buffer.push([seq, payload]);
    if (this.buffer.length > this.bufferSteps) this.buffer.shift();
  }

  private async serveReplay(router: zmq.Router): Promise<void> {
    while (!this.closed && !router.closed) {
      let msg: Buffer[];
      try {
        msg = await router.receive();
      } catch {
        return;
      }
      if (msg.length !== 3) continue;
      const [id, , start] = msg as [Buffer, Buffer, Buffer];
      if (start.length !== 8) continue;
      const from = Number(start.readBigUInt64BE());
      try {
        for (const [seq, payload] of [...this.buffer]) {
          if (seq >= from) await router.send([id, Buffer.alloc(0), seqBytes(seq), payload]);
        }
        await router.send([id, Buffer.alloc(0), END_SEQ, Buffer.alloc(0)]);
      } catch {
        if (router.closed) return;
      }
    }
  }
}

/**
 * Binds `endpoint`, retrying for a while when its port is still in use: a simulator restarted on the
 * same endpoints (as a vLLM pod behind a fixed `--kv-event-source`) may bind before libzmq's I/O
 * thread has closed the old process's listening socket (close() returns before that; the chaos soak
 * once failed on it with "Address already in use").
 */
async function bindRetrying(socket: zmq.Publisher | zmq.Router, endpoint: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await socket.bind(endpoint);
      return;
    } catch (err) {
      if ((err as { code?: string }).code !== 'EADDRINUSE' || attempt >= BIND_ATTEMPTS) throw err;
      await new Promise((resolve) => setTimeout(resolve, BIND_RETRY_MS));
    }
  }
}

const BIND_ATTEMPTS = 40;
const BIND_RETRY_MS = 25;
