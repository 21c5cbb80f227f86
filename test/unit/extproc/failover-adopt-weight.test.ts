/**
 * a request the gateway served on a fallback endpoint (Session.failOver -> PoolDispatcher.adopt)
 * must hold the same load on the served worker as it held on the routed one. The session hands
 * `adopt` a RouteRequest without `inference`, so a parallel-sampling request (n = 4: four sequences
 * vLLM runs, `LoadGuard` weight 4) moves to the served worker with weight 1, and the model it runs is
 * not counted there (load/model-in-flight.ts, read by LoRA affinity).
 */
import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { ServerCall } from '../../../src/extproc/grpc-server.js';
import { Session } from '../../../src/extproc/session.js';
import type { ProcessingRequest, ProcessingResponse } from '../../../src/extproc/proto.js';
import { PoolDispatcher } from '../../../src/routing/pool-dispatcher.js';
import { ModelInFlight, withModelInFlight } from '../../../src/load/model-in-flight.js';
import { harness as poolHarness, register } from '../workers/pool-harness.js';
import { requestBody, requestHeaders, responseBody, responseHeaders } from '../../support/extproc-client.js';

class TestStream extends Duplex {
  constructor() {
    super({ objectMode: true, read() {}, write: (_m: ProcessingResponse, _e, cb) => cb() });
  }
  deliver(...msgs: ProcessingRequest[]): void {
    for (const m of msgs) this.emit('data', m);
  }
}

function servedBy(endpoint: string): ProcessingRequest {
  return {
    ...responseHeaders(200),
    metadata_context: {
      filter_metadata: {
        'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: endpoint } } },
      },
    },
  };
}

const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

describe('failover keeps the request load on the served worker', () => {
  it('a request of n = 4 sequences weighs 4 on the worker that served it, with its model counted', async () => {
    const h = poolHarness();
    for (const port of [8000, 8001]) register(h.registry, 'regular', port);
    const pool = h.pool('regular', 'round_robin');
    const inner = new PoolDispatcher({
      pool,
      observer: {},
      clock: h.clock.read,
      decisionHeader: false,
      fallbackEndpoints: 1,
    });
    const models = new ModelInFlight();
    const stream = new TestStream();
    new Session(stream as unknown as ServerCall<ProcessingResponse>, {
      dispatcher: withModelInFlight(inner, models),
      logger: pino({ level: 'silent' }),
      maxBodyBytes: 100_000,
    });
    stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody({ model: 'm', prompt: 'hello', max_tokens: 4, n: 4, stream: true }),
    );
    await settle();
    const routed = pool.workers.find((w) => w.load > 0)!;
    const other = pool.workers.find((w) => w !== routed)!;
    expect(routed.load).toBe(4);
    expect(models.of(routed).get('m')).toBe(1);

    stream.deliver(servedBy(other.endpoint)); // the routed worker refused it; the fallback served it
    await settle();
    expect(routed.load).toBe(0);
    expect(other.load).toBe(4); // fails: 1
    expect(models.of(other).get('m')).toBe(1); // fails: undefined

    stream.deliver(responseBody('data: [DONE]\n\n', true));
    await settle();
    expect([routed.load, other.load]).toEqual([0, 0]);
  });
});
