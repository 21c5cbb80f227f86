/**
 * An upstream response that ends with trailers, through real Envoy 1.40, while the router holds the
 * end of its body for a rewrite (a P/D non-streamed answer: pd/usage-rewriter.ts JsonUsageRewriter
 * holds the whole body until end-of-stream). Envoy then never marks a body chunk end_of_stream: it
 * sends the last chunk without it and then `response_trailers` (trailer mode SEND). The upstream here
 * is an HTTP/1 server sending chunked trailers, which Envoy reads with `enable_trailers` on the
 * worker cluster (an HTTP/2 upstream sends them without it).
 *
 *   FULL_DUPLEX_STREAMED: the session sends the held body as a streamed chunk before its trailers
 *   reply, and Envoy delivers it to the client ahead of the trailers.
 *   STREAMED: Envoy sends the trailers only once every chunk was answered; the held body can no longer
 *   reach the client, so the router resets the stream (the client gets Envoy's 503, not a 200 with an
 *   empty body).
 *
 * Before the fix both modes gave the client a 200 with an empty body.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { parse, stringify } from 'yaml';
import { ExtProcServer } from '../../src/extproc/server.js';
import type { Dispatch, Dispatcher } from '../../src/extproc/dispatch.js';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import { renderEnvoyConfig, type EnvoyRenderOptions } from '../../src/envoy/envoy-config.js';
import { JsonUsageRewriter } from '../../src/pd/usage-rewriter.js';
import { LoadGuard } from '../../src/workers/load-guard.js';
import { Worker } from '../../src/workers/worker.js';
import { waitFor } from '../support/wait-for.js';

type Yaml = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

const BODY = JSON.stringify({
  id: 'cmpl-1',
  choices: [{ index: 0, text: 'hello there' }],
  usage: { prompt_tokens: 50, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 50 } },
});

let upstream: Server;
let upstreamPort = 0;

beforeAll(async () => {
  // Two body chunks, then trailers (chunked encoding), as an HTTP/2 or gRPC-style worker ends.
  upstream = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', trailer: 'x-worker-done' });
      res.write(BODY.slice(0, 30));
      setImmediate(() => {
        res.write(BODY.slice(30));
        res.addTrailers({ 'x-worker-done': '1' });
        res.end();
      });
    });
  });
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamPort = (upstream.address() as AddressInfo).port;
});

afterAll(async () => {
  await new Promise((resolve) => upstream.close(resolve));
});

describe.each([
  ['FULL_DUPLEX_STREAMED', 'FULL_DUPLEX_STREAMED' as const],
  ['STREAMED', 'STREAMED' as const],
])('response trailers after body bytes the router holds, %s', (_name, mode) => {
  let server: ExtProcServer;
  let envoy: EnvoyHandle;
  let worker: Worker;

  beforeAll(async () => {
    worker = new Worker({
      role: 'regular',
      url: `http://127.0.0.1:${upstreamPort}`,
      endpoint: `127.0.0.1:${upstreamPort}`,
      generation: 1,
    });
    const dispatcher: Dispatcher = {
      dispatch: (): Dispatch => {
        const guard = new LoadGuard(worker);
        const rw = new JsonUsageRewriter(() => 7);
        return {
          worker,
          decision: { worker, branch: 'test' },
          setHeaders: { 'x-gateway-destination-endpoint': worker.endpoint },
          transformResponseChunk: (chunk, eos) => rw.transform(chunk, eos),
          removeResponseHeaders: () => ['content-length'],
          finish: () => guard.release(),
        };
      },
    };
    server = new ExtProcServer({
      host: '127.0.0.1',
      port: 0,
      dispatcher,
      logger: pino({ level: 'silent' }),
      maxBodyBytes: 1 << 20,
    });
    const port = await server.start();
    const opts: EnvoyRenderOptions = {
      routers: [{ host: '127.0.0.1', port }],
      requestBodyMode: mode === 'FULL_DUPLEX_STREAMED' ? 'FULL_DUPLEX_STREAMED' : 'BUFFERED',
      responseBodyMode: mode,
      trailerMode: 'SEND',
    };
    const config = parse(renderEnvoyConfig(opts)) as Yaml;
    const cluster = (config.static_resources.clusters as Yaml[]).find((c) => c.name === 'vllm_workers')!;
    const protocol = cluster.typed_extension_protocol_options[
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions'
    ] as Yaml;
    protocol.explicit_http_config.http_protocol_options = { enable_trailers: true };
    envoy = await startEnvoy({ config: stringify(config) });
  });

  afterAll(async () => {
    await envoy?.close();
    await server?.close();
  });

  it(
    mode === 'FULL_DUPLEX_STREAMED'
      ? 'the client gets the whole body, rewritten, then the trailers'
      : 'the client sees the response cut, never a 200 with the body missing',
    async () => {
      const res = await fetch(`http://127.0.0.1:${envoy.listenerPort}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', prompt: 'hi', max_tokens: 2 }),
      });
      if (mode === 'FULL_DUPLEX_STREAMED') {
        expect(res.status).toBe(200);
        const body = JSON.parse(await res.text());
        expect(body.choices[0].text).toBe('hello there');
        expect(body.usage.prompt_tokens_details).toEqual({ cached_tokens: 7 });
      } else {
        // Envoy 1.40 answers 503 (its local reply to the ext_proc stream's error); a response whose
        // headers had gone out would be reset instead. Either way, not a complete-looking 200.
        const seen =
          res.status === 200
            ? await res.text().then(
                (text) => `200 with ${text.length} bytes`,
                () => 'cut',
              )
            : `status ${res.status}`;
        expect(seen).toMatch(/^(cut|status 5\d\d)$/);
      }
      await waitFor(() => worker.load === 0);
      expect(worker.load).toBe(0);
    },
  );
});
