/**
 * Session: one ext_proc stream, driven message by message the way Envoy drives it, on a real Node
 * object-mode Duplex standing in for the grpc-js call (the events are the ones grpc-js emits:
 * `data`, `end` = half-close, `cancelled`, `error`, `close`). Deliveries in one call happen in one
 * tick, which is what makes the ordering cases reproducible.
 */
import { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import type { ServerCall } from '../../../src/extproc/grpc-server.js';
import { Session, type SessionDeps, type SessionSummary } from '../../../src/extproc/session.js';
import type {
  Dispatch,
  Dispatcher,
  LocalAnswer,
  RequestEnd,
  RouteRequest,
} from '../../../src/extproc/dispatch.js';
import { BodySendMode, type ProcessingRequest, type ProcessingResponse } from '../../../src/extproc/proto.js';
import { LoadGuard } from '../../../src/workers/load-guard.js';
import { Worker } from '../../../src/workers/worker.js';
import {
  requestBody,
  requestHeaders,
  responseBody,
  responseHeaders,
  setHeader,
} from '../../support/extproc-client.js';

const COMPLETION = { model: 'm', prompt: 'hello', max_tokens: 4, stream: true };
const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true };

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
  /** Every message in the same tick, as grpc-js delivers what arrived in one read. */
  deliver(...msgs: ProcessingRequest[]): void {
    for (const m of msgs) this.emit('data', m);
  }
  halfClose(): void {
    this.emit('end');
  }
  cancel(): void {
    this.emit('cancelled');
  }
}

interface Harness {
  session: Session;
  stream: TestStream;
  worker: Worker;
  ends: RequestEnd[];
  summaries: SessionSummary[];
  failovers: Array<{ routed: string; served: string; adopted: boolean }>;
  closes: number;
  signal: () => AbortSignal | undefined;
  /** Lets the chain (and a resolved dispatch) run to completion. */
  settle(): Promise<void>;
}

function harness(
  opts: {
    dispatch?: (req: RouteRequest, d: () => Dispatch) => Dispatch | Promise<Dispatch>;
    adopt?: Dispatcher['adopt'];
    workerPriority?: (headers: Readonly<Record<string, string>>) => number;
    answerBody?: SessionDeps['answerBody'];
    logger?: SessionDeps['logger'];
  } = {},
) {
  const worker = new Worker({
    role: 'regular',
    url: 'http://10.0.0.1:8000',
    endpoint: '10.0.0.1:8000',
    generation: 1,
  });
  const stream = new TestStream();
  const h: Harness = {
    session: undefined as unknown as Session,
    stream,
    worker,
    ends: [],
    summaries: [],
    failovers: [],
    closes: 0,
    signal: () => undefined,
    settle: () => new Promise((resolve) => setImmediate(resolve)),
  };
  const makeDispatch = (): Dispatch => {
    const guard = new LoadGuard(worker);
    return {
      worker,
      decision: { worker, branch: 'test' },
      setHeaders: { 'x-gateway-destination-endpoint': worker.endpoint },
      finish: (end) => {
        h.ends.push(end);
        guard.release();
      },
    };
  };
  const dispatcher: Dispatcher = {
    dispatch: (req, cancel) => {
      h.signal = () => cancel.signal;
      return opts.dispatch ? opts.dispatch(req, makeDispatch) : makeDispatch();
    },
    ...(opts.adopt ? { adopt: opts.adopt } : {}),
  };
  h.session = new Session(stream as unknown as ServerCall<ProcessingResponse>, {
    dispatcher,
    logger: opts.logger ?? pino({ level: 'silent' }),
    maxBodyBytes: 10_000,
    onEnd: (s) => h.summaries.push(s),
    onFailover: (routed, served, adopted) => h.failovers.push({ routed: routed.url, served, adopted }),
    onClose: () => {
      h.closes += 1;
    },
    ...(opts.workerPriority ? { workerPriority: opts.workerPriority } : {}),
    ...(opts.answerBody ? { answerBody: opts.answerBody } : {}),
  });
  return h;
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

const kinds = (replies: ProcessingResponse[]) =>
  replies.map(
    (r) => Object.keys(r).filter((k) => k !== 'dynamic_metadata' && (r as Record<string, unknown>)[k])[0],
  );

/** Request routed, response headers 200 seen: the stream is in the response body. */
function routedAndStreaming(h: Harness): void {
  h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION), responseHeaders(200));
}

describe('Session: ordering of messages and stream end events', () => {
  it('the last response chunk and a half-close in one tick: outcome ok, the chunk answered', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('data: {}\n\n'), responseBody('data: [DONE]\n\n', true));
    h.stream.halfClose();
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(h.ends).toEqual([{ kind: 'response', status: 200 }]);
    expect(kinds(h.stream.replies)).toEqual([
      'request_headers',
      'request_body',
      'response_headers',
      'response_body',
      'response_body',
    ]);
    expect(h.stream.writableEnded).toBe(true); // the half-close is answered with ours
    expect([h.worker.load, h.worker.processed, h.closes]).toEqual([0, 1, 1]);
  });

  it('the whole exchange and a cancel in one tick: outcome ok', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('data: [DONE]\n\n', true));
    h.stream.cancel();
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(h.worker.load).toBe(0);
  });

  it('a half-close before response headers: no_response, the guard released', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    h.stream.halfClose();
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['no_response']);
    expect(h.ends).toEqual([{ kind: 'cancelled', afterHeaders: false }]);
    expect(h.worker.load).toBe(0);
  });

  it('a cancel mid-response: cancelled, with the status seen', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('data: {}\n\n'));
    h.stream.cancel();
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['cancelled']);
    expect(h.ends).toEqual([{ kind: 'cancelled', afterHeaders: true, status: 200 }]);
    expect(h.worker.load).toBe(0);
  });

  it('several end events: one end, one summary, one close', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.halfClose();
    h.stream.cancel();
    h.stream.emit('error', new Error('boom'));
    h.stream.emit('close');
    await h.settle();
    expect(h.summaries).toHaveLength(1);
    expect(h.ends).toHaveLength(1);
    expect(h.closes).toBe(1);
  });

  it('messages after the end are ignored', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'));
    h.stream.cancel();
    h.stream.deliver(requestBody(COMPLETION));
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['abandoned']);
    expect(h.ends).toEqual([]);
    expect(kinds(h.stream.replies)).toEqual(['request_headers']);
  });

  it('an end while an async dispatch (prefill leg) is in flight aborts it at once; its result is finished', async () => {
    const pending = deferred<Dispatch>();
    let make: (() => Dispatch) | undefined;
    const h = harness({
      dispatch: (_req, d) => {
        make = d;
        return pending.promise;
      },
    });
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    await h.settle();
    expect(h.signal()?.aborted).toBe(false);
    h.stream.halfClose();
    expect(h.signal()?.aborted).toBe(true); // not queued behind the dispatch
    expect(h.summaries.map((s) => s.outcome)).toEqual(['no_response']);
    pending.resolve((make as () => Dispatch)());
    await h.settle();
    expect(h.ends).toEqual([{ kind: 'cancelled', afterHeaders: false }]);
    expect(h.worker.load).toBe(0);
    expect(kinds(h.stream.replies)).toEqual(['request_headers']); // no routing reply after the end
  });

  it('messages that arrive during an async dispatch wait for it (no interleaving)', async () => {
    const pending = deferred<Dispatch>();
    let make: (() => Dispatch) | undefined;
    const h = harness({
      dispatch: (_req, d) => {
        make = d;
        return pending.promise;
      },
    });
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      responseHeaders(200),
    );
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers']);
    pending.resolve((make as () => Dispatch)());
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers', 'request_body', 'response_headers']);
    h.stream.deliver(responseBody('x', true));
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
  });
});

describe('Session: phases', () => {
  it.each<[string, ProcessingRequest[]]>([
    ['a response body before anything', [responseBody('x')]],
    [
      'request headers twice',
      [requestHeaders('POST', '/v1/completions'), requestHeaders('POST', '/v1/completions')],
    ],
    [
      'a request body after routing',
      [requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION), requestBody(COMPLETION)],
    ],
    [
      'response headers twice',
      [
        requestHeaders('POST', '/v1/completions'),
        requestBody(COMPLETION),
        responseHeaders(200),
        responseHeaders(200),
      ],
    ],
  ])('%s is a protocol error: a JSON 500, the guard released', async (_name, msgs) => {
    const h = harness();
    h.stream.deliver(...msgs);
    await h.settle();
    const last = h.stream.replies.at(-1);
    expect(last?.immediate_response?.status.code).toBe(500);
    expect(JSON.parse((last?.immediate_response?.body as Buffer).toString()).error.code).toBe(
      'internal_error',
    );
    expect(h.summaries.map((s) => s.outcome)).toEqual(['error']);
    expect(h.worker.load).toBe(0);
  });

  it("Envoy's local reply before routing passes through: abandoned, nothing dispatched", async () => {
    const h = harness();
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      responseHeaders(413),
      responseBody('too big', true),
    );
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers', 'response_headers', 'response_body']);
    expect(h.summaries.map((s) => s.outcome)).toEqual(['abandoned']);
    expect(h.ends).toEqual([]);
  });

  it('a duplicate final response chunk is ignored', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('x', true), responseBody('x', true));
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(kinds(h.stream.replies)).toHaveLength(4);
  });

  it('response trailers end the response', async () => {
    const h = harness();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('x'), { response_trailers: {} });
    await h.settle();
    expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['ok', 200]]);
  });

  it('a bad body is rejected with a JSON 400 before any dispatch', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody('{"model":'));
    await h.settle();
    expect(h.stream.replies.at(-1)?.immediate_response?.status.code).toBe(400);
    expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['rejected', 400]]);
    expect(h.worker.load).toBe(0);
  });

  it('a body over the limit is rejected with a JSON 413', async () => {
    const h = harness();
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody({ ...COMPLETION, prompt: 'x'.repeat(20_000) }),
    );
    await h.settle();
    expect(h.stream.replies.at(-1)?.immediate_response?.status.code).toBe(413);
    expect(h.summaries.map((s) => s.outcome)).toEqual(['rejected']);
  });

  it('a body-less request routes on its headers', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('GET', '/v1/models', {}, true), responseHeaders(200, true));
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers', 'response_headers']);
    expect(setHeader(h.stream.replies[0], 'x-gateway-destination-endpoint')).toBe('10.0.0.1:8000');
    expect(h.summaries.map((s) => [s.route, s.outcome])).toEqual([['other', 'ok']]);
  });
});

describe('Session: release (the router closing with the stream open)', () => {
  it('a routed request streaming its response is handed back: ends once as released, stream ended OK', async () => {
    const h = harness();
    routedAndStreaming(h);
    await h.settle();
    expect(h.worker.load).toBe(1);
    expect(h.session.release()).toBe(true);
    expect(h.stream.writableEnded).toBe(true); // gRPC OK: Envoy carries on without the router
    expect(h.ends).toEqual([{ kind: 'released', status: 200 }]);
    expect(h.summaries.map((x) => [x.outcome, x.status])).toEqual([['released', 200]]);
    expect([h.worker.load, h.closes]).toEqual([0, 1]);
    // Envoy's later end of the stream, a second release: nothing more.
    expect(h.session.release()).toBe(false);
    h.stream.halfClose();
    h.stream.emit('close');
    await h.settle();
    expect([h.ends.length, h.closes, h.worker.load]).toEqual([1, 1, 0]);
  });

  it('a routed request waiting for its response headers is handed back too', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    await h.settle();
    expect(h.session.release()).toBe(true);
    expect(h.ends).toEqual([{ kind: 'released' }]);
    expect(h.summaries.map((x) => x.outcome)).toEqual(['released']);
    expect(h.worker.load).toBe(0);
  });

  it('a request not routed yet is left alone (closing resets it, and Envoy retries it elsewhere)', async () => {
    const h = harness();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'));
    await h.settle();
    expect(h.session.release()).toBe(false);
    expect(h.stream.writableEnded).toBe(false);
    expect([h.ends.length, h.closes]).toEqual([0, 0]);
  });

  it('a request whose dispatch (a prefill leg) is still running is left alone', async () => {
    const leg = deferred<Dispatch>();
    const h = harness({ dispatch: () => leg.promise });
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    await h.settle();
    expect(h.session.release()).toBe(false);
    expect(h.stream.writableEnded).toBe(false);
    h.stream.cancel();
    await h.settle();
    expect(h.summaries.map((x) => x.outcome)).toEqual(['no_response']);
  });
});

describe('Session: FULL_DUPLEX_STREAMED', () => {
  const fds: ProcessingRequest = {
    protocol_config: {
      request_body_mode: BodySendMode.FULL_DUPLEX_STREAMED,
      response_body_mode: BodySendMode.FULL_DUPLEX_STREAMED,
    },
  };

  it('accumulates request chunks, then routes with a headers reply and the whole body streamed back', async () => {
    const h = harness();
    const json = Buffer.from(JSON.stringify(COMPLETION));
    h.stream.deliver(
      { ...requestHeaders('POST', '/v1/completions'), ...fds },
      requestBody(json.subarray(0, 10), false),
      requestBody(json.subarray(10), true),
    );
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers', 'request_body']);
    expect(setHeader(h.stream.replies[0], 'x-gateway-destination-endpoint')).toBe('10.0.0.1:8000');
    const streamed = h.stream.replies[1]?.request_body?.response?.body_mutation?.streamed_response;
    expect(streamed?.body?.toString()).toBe(json.toString());
    expect(streamed?.end_of_stream).toBe(true);

    h.stream.deliver(responseHeaders(200), responseBody('a'), responseBody('b', true));
    await h.settle();
    const chunks = h.stream.replies
      .slice(3)
      .map((r) => r.response_body?.response?.body_mutation?.streamed_response);
    expect(chunks.map((c) => [c?.body?.toString(), c?.end_of_stream])).toEqual([
      ['a', false],
      ['b', true],
    ]);
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
  });

  // Envoy sends no body message for a request whose HEADERS are followed by TRAILERS alone; after the
  // headers reply it waits for the trailers reply (TrailersCallback), and a body reply there is a
  // spurious message to it: with fail-closed, the client gets Envoy's 500 instead of its response.
  it('a request ended by trailers without a body message is routed with no body reply', async () => {
    const h = harness();
    h.stream.deliver(
      { ...requestHeaders('POST', '/tokenize'), ...fds },
      { request_trailers: { trailers: { headers: [] } } },
    );
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['request_headers', 'request_trailers']);
    expect(setHeader(h.stream.replies[0], 'x-gateway-destination-endpoint')).toBe('10.0.0.1:8000');
    h.stream.deliver(responseHeaders(200), responseBody('{}', true));
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(h.worker.load).toBe(0);
  });

  it('an inference request ended by trailers without a body gets the JSON 400 for a missing body', async () => {
    const h = harness();
    h.stream.deliver(
      { ...requestHeaders('POST', '/v1/completions'), ...fds },
      { request_trailers: { trailers: { headers: [] } } },
    );
    await h.settle();
    expect(kinds(h.stream.replies)).toEqual(['immediate_response']);
    expect(h.stream.replies[0]?.immediate_response?.status.code).toBe(400);
  });
});

describe('Session: response trailers after body bytes a rewriter holds', () => {
  // An upstream with trailers (HTTP/2) never ends the body with end_of_stream: Envoy 1.40 sends the
  // last chunk with end_of_stream false, then response_trailers (response_trailer_mode SEND). A P/D
  // non-streamed answer is held whole by its usage rewriter until the body ends.
  const body = JSON.stringify({
    choices: [{ text: 'hi' }],
    usage: { prompt_tokens: 9, prompt_tokens_details: { cached_tokens: 9 } },
  });
  async function holding(mode: number) {
    const { JsonUsageRewriter } = await import('../../../src/pd/usage-rewriter.js');
    const rw = new JsonUsageRewriter(() => 4);
    const h = harness({
      dispatch: (_req, make) => ({ ...make(), transformResponseChunk: (c, eos) => rw.transform(c, eos) }),
    });
    const config: ProcessingRequest = {
      protocol_config: { request_body_mode: BodySendMode.BUFFERED, response_body_mode: mode },
    };
    h.stream.deliver(
      { ...requestHeaders('POST', '/v1/completions'), ...config },
      requestBody({ ...COMPLETION, stream: false }),
      responseHeaders(200),
      responseBody(body.slice(0, 20)),
      responseBody(body.slice(20)),
      { response_trailers: {} },
    );
    await h.settle();
    return h;
  }

  it('FULL_DUPLEX_STREAMED: the held body goes to the client before the trailers reply, rewritten', async () => {
    const h = await holding(BodySendMode.FULL_DUPLEX_STREAMED);
    const replies = h.stream.replies.slice(3);
    expect(kinds(replies)).toEqual(['response_body', 'response_body', 'response_body', 'response_trailers']);
    const sent = replies
      .map((r) => r.response_body?.response?.body_mutation?.streamed_response)
      .filter((c) => c !== undefined);
    expect(sent.map((c) => c.end_of_stream)).toEqual([false, false, false]);
    const client = Buffer.concat(sent.map((c) => c.body ?? Buffer.alloc(0))).toString();
    expect(JSON.parse(client).usage.prompt_tokens_details).toEqual({ cached_tokens: 4 });
    expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['ok', 200]]);
    expect(h.worker.load).toBe(0);
  });

  it('STREAMED: the held body can no longer be sent, so the stream is reset, never passed on empty as ok', async () => {
    const h = await holding(BodySendMode.STREAMED);
    expect(h.stream.destroyed).toBe(true);
    expect(kinds(h.stream.replies).at(-1)).toBe('response_body');
    expect(h.summaries.map((s) => s.outcome)).toEqual(['cancelled']);
    expect(h.ends).toEqual([{ kind: 'cancelled', afterHeaders: true, status: 200 }]);
    expect(h.worker.load).toBe(0);
  });
});

describe('Session: a concurrent leg that fails', () => {
  function withLeg(failure: Promise<unknown>) {
    return harness({ dispatch: (_req, d) => ({ ...d(), failure }) });
  }

  it('before response headers: the client gets the JSON error instead, outcome error', async () => {
    const leg = deferred<unknown>();
    const h = withLeg(leg.promise);
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    await h.settle();
    const { RouterError } = await import('../../../src/request/router-error.js');
    leg.reject(new RouterError('prefill_failed', 502, 'prefill worker x answered 500', 'bad_gateway'));
    await h.settle();
    expect(h.stream.replies.at(-1)?.immediate_response?.status.code).toBe(502);
    expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['error', 502]]);
    expect(h.ends).toEqual([{ kind: 'rejected', status: 502, code: 'prefill_failed' }]);
    expect(h.worker.load).toBe(0);
  });

  it('mid-response: the stream is reset, outcome cancelled', async () => {
    const leg = deferred<unknown>();
    const h = withLeg(leg.promise);
    routedAndStreaming(h);
    await h.settle();
    const { RouterError } = await import('../../../src/request/router-error.js');
    leg.reject(new RouterError('prefill_failed', 502, 'prefill worker x answered 500', 'bad_gateway'));
    h.stream.on('error', () => undefined);
    await h.settle();
    expect(h.stream.destroyed).toBe(true);
    expect(h.summaries.map((s) => s.outcome)).toEqual(['cancelled']);
    expect(h.ends).toEqual([{ kind: 'cancelled', afterHeaders: true, status: 200 }]);
    expect(h.worker.load).toBe(0);
  });
});

describe('Session: skipping the response body (mode_override)', () => {
  /** A dispatch that reads no response chunk; `watch` records what the session asked. */
  function skipping(watch: (status: number) => boolean = () => false) {
    const asked: number[] = [];
    const started: Array<[number, boolean]> = [];
    const h = harness({
      dispatch: (_req, make) => ({
        ...make(),
        watchResponseBody: (status: number) => {
          asked.push(status);
          return watch(status);
        },
        onResponseStart: (status: number, watched: boolean) => {
          started.push([status, watched]);
        },
      }),
    });
    return { h, asked, started };
  }
  const override = (r: ProcessingResponse | undefined) => r?.mode_override;

  it.each([
    ['a half-close', (s: TestStream) => s.halfClose()],
    ['a reset (cancelled)', (s: TestStream) => s.cancel()],
  ])(
    'the headers reply skips the body; %s after it ends the request once as unwatched',
    async (_name, endStream) => {
      const { h, asked, started } = skipping();
      routedAndStreaming(h);
      await h.settle();
      const reply = h.stream.replies.at(-1);
      expect(kinds([reply as ProcessingResponse])).toEqual(['response_headers']);
      expect(override(reply)).toEqual({
        request_header_mode: 1,
        response_header_mode: 1,
        request_body_mode: BodySendMode.BUFFERED,
        response_body_mode: BodySendMode.NONE,
        request_trailer_mode: 2,
        response_trailer_mode: 1,
      });
      expect(asked).toEqual([200]);
      expect(started).toEqual([[200, false]]);
      expect(h.worker.load).toBe(1); // the response is still streaming
      endStream(h.stream);
      h.stream.emit('close');
      await h.settle();
      expect(h.ends).toEqual([{ kind: 'unwatched', status: 200 }]);
      expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['unwatched', 200]]);
      expect([h.worker.load, h.worker.processed, h.closes]).toEqual([0, 1, 1]);
    },
  );

  it('chunks sent anyway (an Envoy without allow_mode_override) are answered; end-of-stream is ok', async () => {
    const { h } = skipping();
    routedAndStreaming(h);
    h.stream.deliver(responseBody('data: {}\n\n'), responseBody('data: [DONE]\n\n', true));
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(h.worker.load).toBe(0);
  });

  it('response trailers still end the response: ok', async () => {
    const { h } = skipping();
    routedAndStreaming(h);
    h.stream.deliver({ response_trailers: {} });
    await h.settle();
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(kinds(h.stream.replies).at(-1)).toBe('response_trailers');
    expect(h.worker.load).toBe(0);
  });

  it.each<[string, ProcessingRequest, boolean]>([
    ['a 500 response', responseHeaders(500), false],
    ['a 404 response', responseHeaders(404), false],
    ['a response without body (headers end_of_stream)', responseHeaders(200, true), false],
  ])('%s is not skipped and the dispatch is not asked', async (_name, headersMsg) => {
    const { h, asked } = skipping();
    h.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION), headersMsg);
    await h.settle();
    expect(asked).toEqual([]);
    expect(h.stream.replies.some((r) => override(r) !== undefined)).toBe(false);
    h.stream.cancel();
    await h.settle();
    expect(h.ends.some((e) => e.kind === 'unwatched')).toBe(false);
    expect(h.worker.load).toBe(0);
  });

  it('a dispatch that watches the body (or says nothing) keeps it: a cancel is cancelled', async () => {
    for (const h of [skipping(() => true).h, harness()]) {
      routedAndStreaming(h);
      await h.settle();
      expect(h.stream.replies.some((r) => override(r) !== undefined)).toBe(false);
      h.stream.cancel();
      await h.settle();
      expect(h.summaries.map((s) => s.outcome)).toEqual(['cancelled']);
      expect(h.worker.load).toBe(0);
    }
  });

  it.each([
    ['a 200, the dispatch reading chunks (a sample, P/D)', 200, () => true],
    ['a 500', 500, () => false],
  ])(
    'response_body_mode NONE in the filter: %s is unwatched (no chunk comes), its headers reply keeps trailers SEND',
    async (_name, status, watch) => {
      const { h, asked, started } = skipping(watch);
      const first = requestHeaders('POST', '/v1/completions');
      first.protocol_config = {
        request_body_mode: BodySendMode.BUFFERED,
        response_body_mode: BodySendMode.NONE,
      };
      h.stream.deliver(first, requestBody(COMPLETION), responseHeaders(status));
      await h.settle();
      expect(asked).toEqual([]); // nothing to ask: Envoy sends no chunk
      expect(started).toEqual([[status, false]]);
      expect(override(h.stream.replies.at(-1))?.response_trailer_mode).toBe(1); // SEND
      expect(h.worker.load).toBe(1);
      h.stream.halfClose();
      await h.settle();
      expect(h.ends).toEqual([{ kind: 'unwatched', status }]);
      expect(h.worker.load).toBe(0);
    },
  );

  it('FULL_DUPLEX_STREAMED response bodies are never skipped', async () => {
    const { h, asked } = skipping();
    const first = requestHeaders('POST', '/v1/completions');
    first.protocol_config = {
      request_body_mode: BodySendMode.BUFFERED,
      response_body_mode: BodySendMode.FULL_DUPLEX_STREAMED,
    };
    h.stream.deliver(first, requestBody(COMPLETION), responseHeaders(200));
    await h.settle();
    expect(asked).toEqual([]);
    expect(h.stream.replies.some((r) => override(r) !== undefined)).toBe(false);
    h.stream.cancel();
    await h.settle();
    expect(h.worker.load).toBe(0);
  });
});

/** Response headers with the gateway's `envoy.lb` report of the endpoint that served them. */
function servedBy(endpoint: string, status = 200): ProcessingRequest {
  return {
    ...responseHeaders(status),
    metadata_context: {
      filter_metadata: {
        'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: endpoint } } },
      },
    },
  };
}

describe('Session: the gateway served the request on another endpoint (fallback)', () => {
  const other = new Worker({
    role: 'regular',
    url: 'http://10.0.0.2:8000',
    endpoint: '10.0.0.2:8000',
    generation: 1,
  });

  function failingOver() {
    const adoptedEnds: RequestEnd[] = [];
    const asked: string[] = [];
    const h = harness({
      adopt: (req, from, endpoint) => {
        asked.push(`${req.method} ${req.path} from ${from.worker.endpoint} to ${endpoint}`);
        if (endpoint !== other.endpoint) return undefined;
        const guard = new LoadGuard(other);
        return {
          worker: other,
          decision: { worker: other, branch: 'failover' },
          setHeaders: {},
          finish: (end) => {
            adoptedEnds.push(end);
            guard.release();
          },
        };
      },
    });
    return { h, adoptedEnds, asked };
  }

  it("ends the routed worker's part as failed_over and holds the load on the served worker to the end", async () => {
    const { h, adoptedEnds, asked } = failingOver();
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      servedBy(other.endpoint),
    );
    await h.settle();
    expect(asked).toEqual([`POST /v1/completions from ${h.worker.endpoint} to ${other.endpoint}`]);
    expect(h.ends).toEqual([{ kind: 'failed_over', served: other.endpoint }]);
    expect([h.worker.load, other.load]).toEqual([0, 1]);
    expect(h.failovers).toEqual([{ routed: h.worker.url, served: other.endpoint, adopted: true }]);
    h.stream.deliver(responseBody('data: [DONE]\n\n', true));
    await h.settle();
    expect(adoptedEnds).toEqual([{ kind: 'response', status: 200 }]);
    expect(h.summaries.map((x) => [x.outcome, x.worker])).toEqual([['ok', other.url]]);
    expect([h.worker.load, other.load]).toEqual([0, 0]);
  });

  it('the same endpoint as routed changes nothing', async () => {
    const { h, asked } = failingOver();
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      servedBy(h.worker.endpoint),
    );
    h.stream.deliver(responseBody('data: [DONE]\n\n', true));
    await h.settle();
    expect(asked).toEqual([]);
    expect(h.ends).toEqual([{ kind: 'response', status: 200 }]);
    expect(h.failovers).toEqual([]);
  });

  it('an endpoint no worker has: the routed part still ends; the response is routed, with no load to hold', async () => {
    const { h } = failingOver();
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      servedBy('10.9.9.9:1'),
    );
    await h.settle();
    expect(h.ends).toEqual([{ kind: 'failed_over', served: '10.9.9.9:1' }]);
    expect(h.failovers).toEqual([{ routed: h.worker.url, served: '10.9.9.9:1', adopted: false }]);
    h.stream.cancel();
    await h.settle();
    expect(h.summaries.map((x) => x.outcome)).toEqual(['cancelled']);
    expect([h.worker.load, other.load]).toEqual([0, 0]);
  });
});

describe("Session: the gateway's endpoint subset", () => {
  it('is read from the request headers message and handed to the dispatcher', async () => {
    const seen: Array<ReadonlySet<string> | undefined> = [];
    const h = harness({
      dispatch: (req, d) => {
        seen.push(req.subset);
        return d();
      },
    });
    const first: ProcessingRequest = {
      ...requestHeaders('POST', '/v1/completions'),
      metadata_context: {
        filter_metadata: {
          'envoy.lb.subset_hint': {
            fields: {
              'x-gateway-destination-endpoint-subset': {
                listValue: { values: [{ stringValue: h.worker.endpoint }, { stringValue: '10.0.0.9:8000' }] },
              },
            },
          },
        },
      },
    };
    h.stream.deliver(first, requestBody(COMPLETION), responseHeaders(200, true));
    await h.settle();
    expect(seen).toEqual([new Set([h.worker.endpoint, '10.0.0.9:8000'])]);
    // Without one, the dispatcher is told nothing.
    const plain = harness({
      dispatch: (req, d) => {
        seen.push(req.subset);
        return d();
      },
    });
    plain.stream.deliver(requestHeaders('POST', '/v1/completions'), requestBody(COMPLETION));
    await plain.settle();
    expect(seen).toHaveLength(2);
    expect(seen[1]).toBeUndefined();
    plain.stream.cancel();
    await plain.settle();
    expect([h.worker.load, plain.worker.load]).toEqual([0, 0]);
  });
});

describe("Session: the gateway's model-name rewrite (x-gateway-model-name-rewrite)", () => {
  it('routes and forwards the request as the model the gateway names', async () => {
    const seen: string[] = [];
    const h = harness({
      dispatch: (req, d) => {
        seen.push(req.inference?.model ?? '', JSON.parse(String(req.body)).model as string);
        return d();
      },
    });
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-gateway-model-name-rewrite': 'food-review-2' }),
      requestBody({ ...COMPLETION, model: 'food-review' }),
      responseHeaders(200, true),
    );
    await h.settle();
    // The dispatcher (the policy, a P/D prefill leg) sees the target model ...
    expect(seen).toEqual(['food-review-2', 'food-review-2']);
    // ... and so does the worker: Envoy gets the rewritten body, with its length.
    const reply = h.stream.replies.find((r) => r.request_body !== undefined);
    const mutated = reply?.request_body?.response?.body_mutation?.body;
    expect(JSON.parse(String(mutated))).toEqual({ ...COMPLETION, model: 'food-review-2' });
    expect(setHeader(reply, 'content-length')).toBe(String(mutated?.length));
    expect(h.summaries.map((s) => s.outcome)).toEqual(['ok']);
    expect(h.worker.load).toBe(0);
  });

  it("keeps the dispatcher's own body rewrite, which was built from the renamed body", async () => {
    const h = harness({
      dispatch: (req, d) => ({
        ...d(),
        body: Buffer.from(JSON.stringify({ ...JSON.parse(String(req.body)), x: 1 })),
      }),
    });
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-gateway-model-name-rewrite': 'b' }),
      requestBody({ ...COMPLETION, model: 'a' }),
      responseHeaders(200, true),
    );
    await h.settle();
    const mutated = h.stream.replies.find((r) => r.request_body)?.request_body?.response?.body_mutation?.body;
    expect(JSON.parse(String(mutated))).toEqual({ ...COMPLETION, model: 'b', x: 1 });
  });

  it("routes and forwards an audio upload as the model the gateway names: the form's model part, the file as sent", async () => {
    const { bodyModel } = await import('../../../src/request/inference-request.js');
    const type = 'multipart/form-data; boundary=b0';
    const audio = Buffer.from([0x52, 0x49, 0x46, 0x46, 0x0d, 0x0a, 0x2d, 0x2d, 0x00, 0xff]);
    const upload = (model: string) =>
      Buffer.concat([
        Buffer.from('--b0\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'),
        audio,
        Buffer.from(`\r\n--b0\r\nContent-Disposition: form-data; name="model"\r\n\r\n${model}\r\n--b0--\r\n`),
      ]);
    const seen: Array<string | undefined> = [];
    const h = harness({
      dispatch: (req, d) => {
        seen.push(bodyModel(req.headers['content-type'], req.body as Buffer));
        return d();
      },
    });
    h.stream.deliver(
      requestHeaders('POST', '/v1/audio/transcriptions', {
        'content-type': type,
        'x-gateway-model-name-rewrite': 'whisper-canary',
      }),
      requestBody(upload('whisper')),
      responseHeaders(200, true),
    );
    await h.settle();
    expect(seen).toEqual(['whisper-canary']); // routed to the workers serving the target model
    const reply = h.stream.replies.find((r) => r.request_body !== undefined);
    const mutated = reply?.request_body?.response?.body_mutation?.body;
    expect(Buffer.from(mutated ?? []).equals(upload('whisper-canary'))).toBe(true);
    expect(setHeader(reply, 'content-length')).toBe(String(mutated?.length));
    expect(h.worker.load).toBe(0);
  });

  it('leaves a body that is not a JSON object to its own error, and a request without the header alone', async () => {
    const bad = harness();
    bad.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-gateway-model-name-rewrite': 'b' }),
      requestBody('{"model":'),
    );
    await bad.settle();
    expect(bad.stream.replies.at(-1)?.immediate_response?.status.code).toBe(400);
    const plain = harness();
    plain.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      responseHeaders(200, true),
    );
    await plain.settle();
    const reply = plain.stream.replies.find((r) => r.request_body !== undefined);
    expect(reply?.request_body?.response?.body_mutation).toBeFalsy();
  });
});

describe("Session: the router's own errors in the shape the API's clients read", () => {
  const noWorkers = async () => {
    const { RouterError } = await import('../../../src/request/router-error.js');
    return new RouterError('no_workers', 503, 'No workers available');
  };
  const errorBody = async (path: string, body: object) => {
    const err = await noWorkers();
    const h = harness({
      dispatch: () => {
        throw err;
      },
    });
    h.stream.deliver(requestHeaders('POST', path), requestBody(body));
    await h.settle();
    const immediate = h.stream.replies.at(-1)?.immediate_response;
    expect(immediate?.status.code).toBe(503);
    expect(h.worker.load).toBe(0);
    return JSON.parse(String(immediate?.body)) as Record<string, unknown>;
  };
  const anthropic = { model: 'claude', messages: [{ role: 'user', content: 'hi' }] };

  it.each([
    '/v1/messages',
    '/v1/messages?beta=true',
    '/v1/messages/count_tokens',
    '/v1/messages/count_tokens?beta=true',
  ])("%s: Anthropic's error shape, as vLLM answers there", async (path) => {
    expect(await errorBody(path, { ...anthropic, max_tokens: 8 })).toEqual({
      type: 'error',
      error: { type: 'overloaded_error', message: 'No workers available', code: 'no_workers' },
    });
  });

  it.each(['/v1/chat/completions', '/v1/embeddings'])("%s: OpenAI's", async (path) => {
    expect(await errorBody(path, { ...CHAT, input: 'x' })).toEqual({
      error: { message: 'No workers available', type: 'server_error', code: 'no_workers' },
    });
  });
});

describe("Session: the objective's priority to the worker (--forward-priority)", () => {
  // As wired: vLLM's priority is the objective's negated (request/worker-priority.ts).
  const table: Record<string, number> = { interactive: 1, batch: -2 };
  const workerPriority = (h: Readonly<Record<string, string>>) =>
    -(table[h['x-gateway-inference-objective'] ?? ''] ?? 0) || 0;
  const sentBody = (h: ReturnType<typeof harness>) => {
    const mutated = h.stream.replies.find((r) => r.request_body !== undefined)?.request_body?.response
      ?.body_mutation?.body;
    return mutated === undefined ? undefined : (JSON.parse(String(mutated)) as Record<string, unknown>);
  };

  it('writes the priority into the body the dispatcher and the worker see, with the model rewrite too', async () => {
    const seen: unknown[] = [];
    const h = harness({
      workerPriority,
      dispatch: (req, d) => {
        seen.push(req.inference?.json.priority, req.inference?.model);
        return d();
      },
    });
    h.stream.deliver(
      requestHeaders('POST', '/v1/completions', {
        'x-gateway-inference-objective': 'batch',
        'x-gateway-model-name-rewrite': 'b',
      }),
      requestBody({ ...COMPLETION, model: 'a' }),
      responseHeaders(200, true),
    );
    await h.settle();
    expect(seen).toEqual([2, 'b']); // a P/D prefill leg is built from this body: it carries it too
    expect(sentBody(h)).toEqual({ ...COMPLETION, model: 'b', priority: 2 });
    expect(h.worker.load).toBe(0);
  });

  it('a pooling body too deep to check its priority is a JSON 400, never passed on with it', async () => {
    const h = harness({ workerPriority });
    const deep = '['.repeat(80) + ']'.repeat(80);
    h.stream.deliver(
      requestHeaders('POST', '/v1/embeddings'),
      requestBody(`{"model":"a","input":"x","priority":-100,"x":${deep}}`),
    );
    await h.settle();
    expect(h.stream.replies.at(-1)?.immediate_response?.status.code).toBe(400);
    expect(h.summaries.map((s) => [s.outcome, s.status])).toEqual([['rejected', 400]]);
    expect(h.worker.load).toBe(0);
  });

  it("replaces the client's own priority, and removes it when the request has no objective", async () => {
    const mine = harness({ workerPriority });
    mine.stream.deliver(
      requestHeaders('POST', '/v1/chat/completions', { 'x-gateway-inference-objective': 'interactive' }),
      requestBody({ ...CHAT, priority: 7 }),
      responseHeaders(200, true),
    );
    await mine.settle();
    expect(sentBody(mine)).toEqual({ ...CHAT, priority: -1 });
    const none = harness({ workerPriority });
    none.stream.deliver(
      requestHeaders('POST', '/v1/chat/completions'),
      requestBody({ ...CHAT, priority: -100 }),
      responseHeaders(200, true),
    );
    await none.settle();
    expect(sentBody(none)).toEqual(CHAT);
  });

  it('leaves alone a body without priority and objective, requests that take none, and everything when off', async () => {
    const plain = harness({ workerPriority });
    plain.stream.deliver(
      requestHeaders('POST', '/v1/completions'),
      requestBody(COMPLETION),
      responseHeaders(200, true),
    );
    await plain.settle();
    expect(sentBody(plain)).toBeUndefined();
    // /tokenize takes no priority in vLLM: its body goes as sent.
    const tokenize = harness({ workerPriority });
    tokenize.stream.deliver(
      requestHeaders('POST', '/tokenize', { 'x-gateway-inference-objective': 'batch' }),
      requestBody({ model: 'a', prompt: 'x' }),
      responseHeaders(200, true),
    );
    await tokenize.settle();
    expect(sentBody(tokenize)).toBeUndefined();
    // Nor does vLLM's Anthropic Messages API: its body goes as sent, a client's priority included.
    const messages = harness({ workerPriority });
    const anthropic = { model: 'a', max_tokens: 4, priority: 3, messages: [{ role: 'user', content: 'x' }] };
    messages.stream.deliver(
      requestHeaders('POST', '/v1/messages', { 'x-gateway-inference-objective': 'batch' }),
      requestBody(anthropic),
      responseHeaders(200, true),
    );
    await messages.settle();
    expect(sentBody(messages)).toBeUndefined();
    expect(messages.worker.load).toBe(0);
    const off = harness();
    off.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-gateway-inference-objective': 'batch' }),
      requestBody({ ...COMPLETION, priority: 3 }),
      responseHeaders(200, true),
    );
    await off.settle();
    expect(sentBody(off)).toBeUndefined();
    expect([plain.worker.load, tokenize.worker.load, off.worker.load]).toEqual([0, 0, 0]);
  });

  it("writes it into vLLM's pooling requests too (embeddings take a body priority)", async () => {
    const embeddings = harness({ workerPriority });
    embeddings.stream.deliver(
      requestHeaders('POST', '/v1/embeddings', { 'x-gateway-inference-objective': 'batch' }),
      requestBody({ model: 'a', input: 'x' }),
      responseHeaders(200, true),
    );
    await embeddings.settle();
    expect(sentBody(embeddings)).toEqual({ model: 'a', input: 'x', priority: 2 });
    expect(embeddings.worker.load).toBe(0);
  });
});

describe('Session: requests the router answers after calls of its own (answerBody: LoRA loads, fleet control)', () => {
  it('answers with the local answer once it resolves; no worker is involved', async () => {
    const pending = deferred<LocalAnswer>();
    const seen: string[] = [];
    const h = harness({
      answerBody: (method, path, _headers, body) => {
        seen.push(`${method} ${path} ${body?.toString() ?? '(no body)'}`);
        return path === '/v1/load_lora_adapter' ? pending.promise : undefined;
      },
    });
    h.stream.deliver(requestHeaders('POST', '/v1/load_lora_adapter'), requestBody({ lora_name: 'a' }));
    await h.settle();
    expect(seen).toEqual(['POST /v1/load_lora_adapter {"lora_name":"a"}']);
    expect(h.stream.replies.some((r) => r.immediate_response)).toBe(false);
    pending.resolve({ status: 200, body: { object: 'lora_adapter.load' }, details: 'lora_load' });
    await h.settle();
    const reply = h.stream.replies.at(-1)?.immediate_response;
    expect(reply?.status.code).toBe(200);
    expect(JSON.parse((reply?.body as Buffer).toString())).toEqual({ object: 'lora_adapter.load' });
    expect(h.summaries.at(-1)?.outcome).toBe('answered');
    expect(h.worker.load).toBe(0);
  });

  it('a request without a body is asked about too (a bare POST /pause)', async () => {
    const seen: string[] = [];
    const h = harness({
      answerBody: (method, path, _headers, body) => {
        seen.push(`${method} ${path} ${body === undefined ? '(no body)' : body.toString()}`);
        return Promise.resolve({ status: 200, body: { status: 'paused' }, details: 'fleet_pause' });
      },
    });
    h.stream.deliver(requestHeaders('POST', '/pause?mode=keep', {}, true));
    await h.settle();
    expect(seen).toEqual(['POST /pause?mode=keep (no body)']);
    const reply = h.stream.replies.at(-1)?.immediate_response;
    expect(reply?.status.code).toBe(200);
    expect(JSON.parse((reply?.body as Buffer).toString())).toEqual({ status: 'paused' });
    expect(h.worker.load).toBe(0);
  });

  it('a stream that ended while the answer was pending gets nothing more', async () => {
    const pending = deferred<LocalAnswer>();
    const h = harness({ answerBody: () => pending.promise });
    h.stream.deliver(requestHeaders('POST', '/v1/load_lora_adapter'), requestBody({ lora_name: 'a' }));
    await h.settle();
    h.stream.cancel();
    await h.settle();
    const replies = h.stream.replies.length;
    pending.resolve({ status: 200, body: {}, details: 'lora_load' });
    await h.settle();
    expect(h.stream.replies.length).toBe(replies);
    expect(h.worker.load).toBe(0);
  });

  it('other requests are dispatched as before', async () => {
    const h = harness({ answerBody: () => undefined });
    h.stream.deliver(
      requestHeaders('POST', '/v1/embeddings'),
      requestBody({ model: 'a', input: 'x' }),
      responseHeaders(200, true),
    );
    await h.settle();
    expect(h.ends).toHaveLength(1);
    expect(h.worker.load).toBe(0);
  });
});

describe('Session: log lines leave the query string out', () => {
  it('a key a client puts in the query (?api_key=) is in no log line; the path is', async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (line: string) => void lines.push(line) });
    const ok = harness({ logger });
    ok.stream.deliver(
      requestHeaders('POST', '/v1/completions?api_key=sk-secret-1'),
      requestBody(COMPLETION),
      responseHeaders(200, true),
    );
    const odd = harness({ logger });
    odd.stream.deliver(
      requestHeaders('POST', '/v1/completions?api_key=sk-secret-2'),
      requestHeaders('POST', '/v1/completions?api_key=sk-secret-2'),
    );
    await ok.settle();
    await odd.settle();
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(parsed.find((l) => l.msg === 'request')).toMatchObject({ path: '/v1/completions' });
    expect(parsed.find((l) => l.msg === 'unexpected ext_proc message')).toMatchObject({
      path: '/v1/completions',
    });
    expect(lines.join('\n')).not.toContain('sk-secret');
    expect([ok.worker.load, odd.worker.load]).toEqual([0, 0]);
  });
});

describe("Session: log lines carry the request's x-request-id", () => {
  it('in the request summary and in the warning about an unexpected message', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = pino(
      { level: 'debug' },
      { write: (line: string) => void lines.push(JSON.parse(line) as Record<string, unknown>) },
    );
    const ok = harness({ logger });
    ok.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-request-id': 'req-7f3a' }),
      requestBody(COMPLETION),
      responseHeaders(200, true),
    );
    await ok.settle();
    expect(lines.find((l) => l.msg === 'request')).toMatchObject({
      requestId: 'req-7f3a',
      path: '/v1/completions',
      status: 200,
    });
    const odd = harness({ logger });
    odd.stream.deliver(
      requestHeaders('POST', '/v1/completions', { 'x-request-id': 'req-9b1c' }),
      requestHeaders('POST', '/v1/completions', { 'x-request-id': 'req-9b1c' }),
    );
    await odd.settle();
    expect(lines.find((l) => l.msg === 'unexpected ext_proc message')).toMatchObject({
      requestId: 'req-9b1c',
    });
    expect([ok.worker.load, odd.worker.load]).toEqual([0, 0]);
  });
});
