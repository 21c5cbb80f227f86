/** The prefill leg's HTTP client against a real simulated prefill worker: every way it can end. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PrefillClient, PrefillError } from '../../../src/pd/prefill-client.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';

let sim: Simulator;
let client: PrefillClient;
let worker: Worker;
const body = Buffer.from(
  JSON.stringify({
    model: 'sim-model',
    prompt: 'p',
    max_tokens: 1,
    stream: false,
    kv_transfer_params: { do_remote_decode: true },
  }),
);
const headers = {
  'content-type': 'application/json',
  authorization: 'Bearer k',
  ':path': '/v1/completions',
  host: 'x',
};

beforeAll(async () => {
  sim = await startSimulator({ role: 'prefill', timeScale: 0 });
  client = new PrefillClient();
  worker = new Worker({ role: 'prefill', url: sim.url, endpoint: sim.hostPort, generation: 1 });
});
afterAll(async () => {
  await client.close();
  await sim.close();
});

async function failure(p: Promise<unknown>): Promise<PrefillError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PrefillError);
  return err as PrefillError;
}

describe('PrefillClient', () => {
  it('returns the kv_transfer_params and forwards the request id and client headers, not pseudo headers', async () => {
    const r = await client.send(
      worker,
      '/v1/completions',
      body,
      headers,
      'rid-1',
      new AbortController().signal,
      5000,
    );
    expect(r.status).toBe(200);
    expect(r.kvTransferParams?.remote_engine_id).toBe(sim.engineIds[0]);
    const rec = sim.findRecord('rid-1');
    expect(rec?.headers.authorization).toBe('Bearer k');
    expect(rec?.headers[':path']).toBeUndefined();
  });

  it("reads the prefill's cached tokens: 0 on a miss (vLLM writes no details then), the count on a hit", async () => {
    const send = (rid: string, prompt: string) =>
      client.send(
        worker,
        '/v1/completions',
        Buffer.from(JSON.stringify({ ...JSON.parse(String(body)), prompt })),
        headers,
        rid,
        new AbortController().signal,
        5000,
      );
    const prompt =
      'a prompt long enough to fill several cache blocks of the simulated prefill worker. '.repeat(4);
    expect((await send('rid-miss', prompt)).cachedTokens).toBe(0);
    expect((await send('rid-hit', prompt)).cachedTokens).toBeGreaterThan(0);
  });

  it('maps a non-2xx answer to a status error carrying the status', async () => {
    sim.injectFault({ status: 503 });
    const e = await failure(
      client.send(worker, '/v1/completions', body, headers, 'rid-2', new AbortController().signal, 5000),
    );
    expect([e.kind, e.status]).toEqual(['status', 503]);
  });

  it('times out a worker that never answers, and the worker sees the abort', async () => {
    sim.injectFault({ hang: true });
    const e = await failure(
      client.send(worker, '/v1/completions', body, headers, 'rid-3', new AbortController().signal, 200),
    );
    expect(e.kind).toBe('timeout');
    await sim.waitForIdle();
    expect(sim.findRecord('rid-3')?.outcome).toBe('aborted');
  });

  it('reports a client that went away as aborted', async () => {
    sim.injectFault({ hang: true });
    const ac = new AbortController();
    const seen = sim.records.length;
    const pending = client.send(worker, '/v1/completions', body, headers, 'rid-4', ac.signal, 60_000);
    await sim.waitForRequests(seen + 1); // the worker is holding the request
    ac.abort();
    expect((await failure(pending)).kind).toBe('aborted');
  });

  it('reports an unreachable worker as a transport error', async () => {
    const gone = await startSimulator({ role: 'prefill', timeScale: 0 });
    const w = new Worker({ role: 'prefill', url: gone.url, endpoint: gone.hostPort, generation: 1 });
    await gone.close();
    const e = await failure(
      client.send(w, '/v1/completions', body, headers, 'rid-5', new AbortController().signal, 5000),
    );
    expect(e.kind).toBe('transport');
  });

  it('tells the caller once the request is on a connected socket (onSent), and adds leg headers', async () => {
    let sent = 0;
    const r = await client.send(
      worker,
      '/v1/completions',
      body,
      { ...headers, 'x-data-parallel-rank': '7' },
      'rid-6',
      new AbortController().signal,
      5000,
      {
        headers: { 'x-data-parallel-rank': '0' },
        onSent: () => sent++,
      },
    );
    expect(r.status).toBe(200);
    expect(sent).toBe(1);
    // The client's own rank header is dropped; the router's rank is sent.
    expect(sim.findRecord('rid-6')?.headers['x-data-parallel-rank']).toBe('0');
  });

  it('never calls onSent for a worker that refuses the connection (the leg never reached it)', async () => {
    const gone = await startSimulator({ role: 'prefill', timeScale: 0 });
    const w = new Worker({ role: 'prefill', url: gone.url, endpoint: gone.hostPort, generation: 1 });
    await gone.close();
    let sent = 0;
    const e = await failure(
      client.send(w, '/v1/completions', body, headers, 'rid-7', new AbortController().signal, 5000, {
        onSent: () => sent++,
      }),
    );
    expect(e.kind).toBe('transport');
    expect(sent).toBe(0);
  });

  it.each([
    ['completions stopped by its one token', { choices: [{ finish_reason: 'stop' }] }, true],
    ['chat capped at its one token', { choices: [{ finish_reason: 'length' }] }, false],
    ['messages stopped (end_turn)', { stop_reason: 'end_turn' }, true],
    ['messages capped (max_tokens)', { stop_reason: 'max_tokens' }, false],
    ['responses completed', { status: 'completed' }, true],
    ['responses incomplete (max_output_tokens)', { status: 'incomplete' }, false],
  ])('tells a prefill its one token ended from one capped by it: %s', async (_what, answer, stopped) => {
    // vLLM answers a stopped prefill with `kv_transfer_params: null` (no KV kept for a decode worker).
    const server = createServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ ...answer, kv_transfer_params: null }));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as AddressInfo;
    const w = new Worker({
      role: 'prefill',
      url: `http://127.0.0.1:${port}`,
      endpoint: `127.0.0.1:${port}`,
      generation: 1,
    });
    try {
      const r = await client.send(
        w,
        '/v1/completions',
        body,
        headers,
        'rid-8',
        new AbortController().signal,
        5000,
      );
      expect(r).toMatchObject({ status: 200, kvTransferParams: undefined, stopped });
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
