/**
 * Mooncake (overlapped legs): the prefill worker is killed mid-prefill. The decode worker's KV pull
 * fails at the same moment and it answers 500 (vLLM's JSON error); the router's prefill client sees the
 * closed socket a few ms later. When the decode's 500 headers reach the router first, the session
 * treated the leg failure as "mid-response" and reset the ext_proc stream: Envoy (fail closed) then
 * answered the client an empty `503` (no content type, content-length 0) instead of a JSON error.
 * Reproduced through Envoy with `npm run sim` workers (2 of 5 requests). A response that is already an
 * error needs no reset: the worker's JSON error goes on to the client.
 */
import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { ServerCall } from '../../../src/extproc/grpc-server.js';
import { Session } from '../../../src/extproc/session.js';
import type { Dispatch, Dispatcher, RequestEnd } from '../../../src/extproc/dispatch.js';
import type { ProcessingRequest, ProcessingResponse } from '../../../src/extproc/proto.js';
import { RouterError } from '../../../src/request/router-error.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import { Worker } from '../../../src/workers/worker.js';
import { requestBody, requestHeaders, responseBody, responseHeaders } from '../../support/extproc-client.js';

class TestStream extends Duplex {
  readonly replies: ProcessingResponse[] = [];
  constructor() {
    super({
      objectMode: true,
      read() {},
      write: (msg: ProcessingResponse, _enc, cb) => {
        this.replies.push(msg);
        cb();
      },
    });
  }
  deliver(...msgs: ProcessingRequest[]): void {
    for (const m of msgs) this.emit('data', m);
  }
}

describe('overlapped P/D: the prefill leg fails after the decode answered an error', () => {
  it('does not reset the stream: the decode error reaches the client', async () => {
    const worker = new Worker({
      role: 'decode',
      url: 'http://10.0.0.1:8000',
      endpoint: '10.0.0.1:8000',
      generation: 1,
    });
    let fail!: (e: unknown) => void;
    const failure = new Promise((_res, rej) => (fail = rej));
    failure.catch(() => undefined);
    const ends: RequestEnd[] = [];
    const dispatcher: Dispatcher = {
      dispatch: (): Dispatch => {
        const guard = new LoadGuard(worker);
        return {
          worker,
          decision: { worker, branch: 'test' },
          setHeaders: { 'x-gateway-destination-endpoint': worker.endpoint },
          failure,
          finish: (end) => {
            ends.push(end);
            guard.release();
          },
        };
      },
    };
    const stream = new TestStream();
    stream.on('error', () => undefined);
    new Session(stream as unknown as ServerCall<ProcessingResponse>, {
      dispatcher,
      logger: pino({ level: 'silent' }),
      maxBodyBytes: 10_000,
    });
    const settle = () => new Promise((r) => setImmediate(r));
    stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody({ model: 'm', prompt: 'hello', max_tokens: 4 }),
      responseHeaders(500),
    );
    await settle();
    fail(new RouterError('prefill_failed', 502, 'prefill worker x was unreachable', 'bad_gateway'));
    await settle();
    expect(stream.destroyed).toBe(false);
    stream.deliver(responseBody('{"error":{"message":"KV transfer failed"}}', true));
    await settle();
    expect(ends).toEqual([{ kind: 'response', status: 500 }]);
    expect(worker.load).toBe(0);
  });
});
