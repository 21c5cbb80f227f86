/**
 * Prefill/decode disaggregation through a real Envoy: the router runs the prefill leg itself and
 * steers Envoy to the decode worker. Load must follow each phase exactly (design sections 5-7).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import OpenAI from 'openai';
import { startPdStack, type PdStack } from '../support/pd-stack.js';
import { expectAllLoadsZero, metricsText } from '../support/router-fixture.js';
import { waitFor } from '../support/wait-for.js';
import { startSimulator, type HoldOptions, type Simulator } from '../../src/sim/simulator.js';
import { startTestRouter } from '../support/router-fixture.js';
import { startEnvoy } from '../../src/envoy/envoy-process.js';

/**
 * No pacing: a phase is kept in flight by simulator holds (a prefill answer held before it is sent, a
 * decode stream held after n events) that the test releases, not by time.
 */
interface Holds {
  /** Resolves when one of the held simulators reached its hold point. */
  reached(): Promise<void>;
  release(): void;
}
function holdNext(sims: readonly Simulator[], opts: HoldOptions = {}): Holds {
  const holds = sims.map((sim) => sim.hold(opts));
  return {
    reached: () => Promise.any(holds.map((h) => h.reached())),
    release: () => holds.forEach((h) => h.release()),
  };
}

function post(
  url: string,
  path: string,
  body: unknown,
  signal?: AbortSignal,
  headers: Record<string, string> = {},
) {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    signal,
  });
}

describe('sequential P/D (NIXL)', () => {
  let s: PdStack;
  beforeAll(async () => {
    s = await startPdStack({
      prefill: 2,
      decode: 1,
      router: { prefillRetries: 1 },
    });
  });
  afterAll(async () => s.close());
  afterEach(async () => {
    for (const sim of [...s.prefill, ...s.decode]) sim.clearFaults();
    await expectAllLoadsZero(s.router);
  });
  const prefillLoad = () => s.prefill.reduce((n, p) => n + s.load(p), 0);
  const decodeLoad = () => s.load(s.decode[0]!);

  it('loads prefill only during prefill, then decode only until the last chunk', async () => {
    const prefillHold = holdNext(s.prefill);
    // 4 of the 5 token events go out; the last (finish_reason) and [DONE] wait for the release.
    const HELD = 4;
    const decodeHold = holdNext(s.decode, { afterChunks: HELD });
    try {
      const res = post(s.url, '/v1/completions', {
        model: 'sim-model',
        prompt: 'sequential phases',
        max_tokens: 5,
        stream: true,
      });
      await prefillHold.reached();
      await waitFor(() => prefillLoad() === 1);
      expect(decodeLoad()).toBe(0);
      prefillHold.release();
      const r = await res;
      expect(r.status).toBe(200);
      const reader = r.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      const duringDecode: Array<[number, number]> = [];
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value);
        if (!text.includes('[DONE]') && !text.includes('"finish_reason":"length"'))
          duringDecode.push([prefillLoad(), decodeLoad()]);
        if ((text.match(/\n\n/g) ?? []).length >= HELD) decodeHold.release();
      }
      await checkSequential(text, duringDecode);
    } finally {
      prefillHold.release();
      decodeHold.release();
    }
  });

  async function checkSequential(text: string, duringDecode: Array<[number, number]>): Promise<void> {
    expect(duringDecode.length).toBeGreaterThan(0);
    expect(new Set(duringDecode.map(([p, d]) => `${p}/${d}`))).toEqual(new Set(['0/1']));
    expect(text).toContain('[DONE]');
    await waitFor(() => decodeLoad() === 0);
    // The legs did not overlap, and both carried the same P/D request id.
    const d = s.decode[0]!.records.at(-1)!;
    const p = s.prefill.flatMap((x) => x.records).find((x) => x.requestId === d.requestId)!;
    expect(d.requestId).toMatch(/^___prefill_addr_.+___decode_addr_.+_[0-9a-f]{32}$/);
    expect(p.endMs!).toBeLessThanOrEqual(d.startMs);
    expect((p.body as { max_tokens: number; stream: boolean }).max_tokens).toBe(1);
    expect(
      (d.body as { kv_transfer_params: { remote_engine_id: string } }).kv_transfer_params.remote_engine_id,
    ).toBeTruthy();
  }

  it('answers 502 naming the prefill worker when every prefill attempt fails, with both loads back to 0', async () => {
    for (const p of s.prefill) p.injectFault({ status: 500 }, { count: 2 });
    const r = await post(s.url, '/v1/completions', { model: 'sim-model', prompt: 'doomed', max_tokens: 3 });
    expect(r.status).toBe(502);
    const body = (await r.json()) as { error: { message: string; code: string } };
    expect(body.error.code).toBe('prefill_failed');
    expect(body.error.message).toMatch(/prefill worker http:\/\/127\.0\.0\.1:\d+ answered 500/);
    expect(
      s.decode[0]!.records.filter((x) => (x.body as { prompt?: string })?.prompt === 'doomed'),
    ).toHaveLength(0);
    expect(await metricsText(s.router)).toMatch(
      /vllm_router_pd_errors_total\{error_type="prefill_status"\} [1-9]/,
    );
  });

  it('retries a failed prefill once on another prefill worker', async () => {
    const before = s.prefill.map((p) => p.records.length);
    // One prefill worker fails its next request: whichever request lands there is retried on the other.
    s.prefill[0]!.injectFault({ status: 503 });
    let ok = 0;
    for (let i = 0; i < 2; i++) {
      const r = await post(s.url, '/v1/completions', {
        model: 'sim-model',
        prompt: `retry ${i}`,
        max_tokens: 2,
      });
      await r.text();
      if (r.status === 200) ok++;
    }
    expect(ok).toBe(2);
    const after = s.prefill.map((p) => p.records.length);
    expect(after[0]! - before[0]! + after[1]! - before[1]!).toBe(3);
    expect(await metricsText(s.router)).toMatch(
      /vllm_router_pd_errors_total\{error_type="prefill_retry"\} [1-9]/,
    );
  });

  it('aborts the prefill leg and releases its guard when the client goes away during prefill', async () => {
    const ac = new AbortController();
    const prefillHold = holdNext(s.prefill);
    try {
      const pending = post(
        s.url,
        '/v1/completions',
        { model: 'sim-model', prompt: 'never mind', max_tokens: 3 },
        ac.signal,
      ).catch((e: Error) => e);
      await prefillHold.reached();
      await waitFor(() => prefillLoad() === 1);
      ac.abort();
      await pending;
      await waitFor(() => prefillLoad() === 0);
      const rec = s.prefill
        .flatMap((p) => p.records)
        .find((x) => (x.body as { prompt?: string }).prompt === 'never mind');
      await waitFor(() => rec?.outcome === 'aborted');
      expect(decodeLoad()).toBe(0);
    } finally {
      prefillHold.release();
    }
  });

  it('releases the decode guard on client drop after headers and on an upstream reset', async () => {
    const ac = new AbortController();
    const decodeHold = holdNext(s.decode, { afterChunks: 1 });
    try {
      const r = await post(
        s.url,
        '/v1/completions',
        { model: 'sim-model', prompt: 'drop me', max_tokens: 40, stream: true },
        ac.signal,
      );
      const reader = r.body!.getReader();
      await reader.read();
      expect(decodeLoad()).toBe(1);
      ac.abort();
      await waitFor(() => decodeLoad() === 0);
    } finally {
      decodeHold.release();
    }

    s.decode[0]!.injectFault({ resetAfterChunks: 2 });
    const r2 = await post(s.url, '/v1/completions', {
      model: 'sim-model',
      prompt: 'reset me',
      max_tokens: 40,
      stream: true,
    });
    await r2.text().catch(() => '');
    await waitFor(() => decodeLoad() === 0);
  });

  it('streams a P/D chat completion with the official openai client and reports the prefill cached tokens', async () => {
    const openai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const messages = [
      { role: 'system' as const, content: 'A long shared system prompt. '.repeat(30) },
      { role: 'user' as const, content: 'hello' },
    ];
    let usage: OpenAI.CompletionUsage | undefined | null;
    let content = '';
    for await (const chunk of await openai.chat.completions.create({
      model: 'sim-model',
      messages,
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    })) {
      content += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(content.length).toBeGreaterThan(0);
    expect(usage?.completion_tokens).toBe(4);
    const d = s.decode[0]!.records.at(-1)!;
    const p = s.prefill.flatMap((x) => x.records).find((x) => x.requestId === d.requestId)!;
    // The decode worker claims the whole prompt as cached; the client sees what prefill computed.
    expect(d.cachedTokens).toBe(d.promptTokens);
    expect(usage?.prompt_tokens_details?.cached_tokens).toBe(p.cachedTokens);
    expect(p.cachedTokens).toBeLessThan(p.promptTokens);
  });

  it("answers a non-streamed P/D chat completion with the prefill worker's cached tokens, framed right", async () => {
    const messages = [
      { role: 'system', content: 'Another long shared system prompt. '.repeat(30) },
      { role: 'user', content: 'hello, whole' },
    ];
    const r = await post(s.url, '/v1/chat/completions', { model: 'sim-model', messages, max_tokens: 4 });
    expect(r.status).toBe(200);
    const raw = Buffer.from(await r.arrayBuffer());
    // A Content-Length that outlived the rewrite would cut or overrun the body.
    const length = r.headers.get('content-length');
    if (length !== null) expect(Number(length)).toBe(raw.length);
    const body = JSON.parse(raw.toString('utf8')) as {
      choices: unknown[];
      usage: {
        prompt_tokens: number;
        completion_tokens: number;
        prompt_tokens_details?: { cached_tokens?: number };
      };
    };
    expect(body.choices).toHaveLength(1);
    expect(body.usage.completion_tokens).toBe(4);
    const d = s.decode[0]!.records.at(-1)!;
    const p = s.prefill.flatMap((x) => x.records).find((x) => x.requestId === d.requestId)!;
    // The decode worker claims the whole prompt as cached; the client sees what prefill computed.
    expect(d.cachedTokens).toBe(d.promptTokens);
    expect(p.cachedTokens).toBeLessThan(p.promptTokens);
    expect(body.usage.prompt_tokens).toBe(d.promptTokens);
    expect(body.usage.prompt_tokens_details?.cached_tokens).toBe(p.cachedTokens);
    await waitFor(() => decodeLoad() === 0);
  });
});

for (const decodePolicy of ['power_of_two', 'cache_aware'] as const) {
  describe(`sequential P/D (NIXL), decode policy ${decodePolicy}: a burst during the prefill legs`, () => {
    let s: PdStack;
    beforeAll(async () => {
      // power_of_two: the default decode policy. A decode worker is chosen per request, with its
      // prefill worker, long before its decode load is taken (after the prefill leg).
      s = await startPdStack({ prefill: 1, decode: 2, router: { decodePolicy } });
    });
    afterAll(async () => s.close());

    it('spreads over the decode workers instead of landing on the first one', async () => {
      const N = 8;
      // Every prefill answer is held until all N requests are in their prefill leg.
      const prefillHold = s.prefill[0]!.hold({ count: N });
      try {
        const responses = Array.from({ length: N }, (_, i) =>
          post(s.url, '/v1/completions', { model: 'sim-model', prompt: `burst ${i}`, max_tokens: 2 }),
        );
        await prefillHold.reached(N);
        // Nothing runs on a decode worker yet (design section 5).
        expect(s.decode.map((d) => s.load(d))).toEqual([0, 0]);
        prefillHold.release();
        for (const r of await Promise.all(responses)) expect(r.status).toBe(200);
        expect(s.decode.map((d) => d.records.length)).toEqual([N / 2, N / 2]);
        await expectAllLoadsZero(s.router);
      } finally {
        prefillHold.release();
      }
    });
  });
}

describe('concurrent P/D (MoRI-IO WRITE)', () => {
  let s: PdStack;
  beforeAll(async () => {
    s = await startPdStack({
      prefill: 1,
      decode: 1,
      router: { kvConnector: 'moriio', pdDispatch: 'concurrent' },
    });
  });
  afterAll(async () => s.close());
  afterEach(async () => {
    for (const sim of [...s.prefill, ...s.decode]) sim.clearFaults();
    await expectAllLoadsZero(s.router);
  });
  const pl = () => s.load(s.prefill[0]!);
  const dl = () => s.load(s.decode[0]!);

  it('runs both legs at once; each guard ends with its own phase', async () => {
    const prefillHold = holdNext(s.prefill);
    const decodeHold = holdNext(s.decode, { afterChunks: 1 });
    const r = post(s.url, '/v1/completions', {
      model: 'sim-model',
      prompt: 'overlap',
      max_tokens: 8,
      stream: true,
    });
    let overlapped: boolean;
    try {
      await prefillHold.reached();
      await decodeHold.reached();
      await waitFor(() => pl() === 1 && dl() === 1);
      // Both legs are open at once: the decode has started while the prefill has not ended (read from
      // the workers' own records, not from millisecond timestamps that a fast host makes equal).
      const decodeRecord = s.decode[0]!.records.at(-1);
      const prefillRecord = s.prefill[0]!.records.find((x) => x.requestId === decodeRecord?.requestId);
      overlapped =
        decodeRecord !== undefined && prefillRecord !== undefined && prefillRecord.endMs === undefined;
    } finally {
      prefillHold.release();
      decodeHold.release();
    }
    const res = await r;
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toContain('[DONE]');
    await waitFor(() => pl() === 0 && dl() === 0);
    const d = s.decode[0]!.records.at(-1)!;
    const p = s.prefill[0]!.records.find((x) => x.requestId === d.requestId)!;
    expect(overlapped).toBe(true);
    expect(d.startMs).toBeLessThanOrEqual(p.endMs!);
    expect(
      (d.body as { kv_transfer_params: { transfer_id: string } }).kv_transfer_params.transfer_id,
    ).toMatch(/^tx-/);
    expect((p.body as { kv_transfer_params: { transfer_id: string } }).kv_transfer_params.transfer_id).toBe(
      (d.body as { kv_transfer_params: { transfer_id: string } }).kv_transfer_params.transfer_id,
    );
  });

  it('a decode error while the prefill is still running aborts the prefill leg: the prefill worker stops', async () => {
    // vLLM's decode worker refuses a max_tokens too large for the prompt; the prefill leg asks for one
    // token and runs. Kept running, it would compute the prompt and hold its KV for a decode that is gone.
    s.decode[0]!.injectFault({
      status: 400,
      message: "'max_tokens' or 'max_completion_tokens' is too large: 8000.",
    });
    const prefillHold = holdNext(s.prefill);
    try {
      const r = await post(s.url, '/v1/completions', {
        model: 'sim-model',
        prompt: 'decode refuses',
        max_tokens: 8000,
      });
      expect(r.status).toBe(400);
      await r.text();
      const rec = () =>
        s.prefill[0]!.records.find((x) => (x.body as { prompt?: string }).prompt === 'decode refuses');
      await waitFor(() => rec()?.outcome === 'aborted', { message: 'prefill leg aborted' });
      await waitFor(() => pl() === 0 && dl() === 0);
    } finally {
      prefillHold.release();
    }
  });

  // A short answer's decode can end as soon as its KV arrived, before the router has read the
  // prefill worker's own response: the decode's usage (every prompt token claimed as cached) must
  // still get the prefill worker's figure.
  it.each([true, false])(
    "an answer that ends before the prefill worker's response still reports its cached tokens (stream: %s)",
    async (stream) => {
      const prompt = `ends first ${stream}, `.repeat(40);
      const prefillHold = holdNext(s.prefill);
      let released = false;
      try {
        const r = post(s.url, '/v1/completions', {
          model: 'sim-model',
          prompt,
          max_tokens: 2,
          stream,
          ...(stream ? { stream_options: { include_usage: true } } : {}),
        });
        await prefillHold.reached();
        const decodeRecord = () =>
          s.decode[0]!.records.find((x) => (x.body as { prompt?: string }).prompt === prompt);
        await waitFor(() => decodeRecord()?.endMs !== undefined, { message: 'decode answered' });
        prefillHold.release();
        released = true;
        const res = await r;
        const text = await res.text();
        expect(res.status).toBe(200);
        const usageText = stream
          ? text
              .split('\n\n')
              .map((f) => f.replace(/^data: /, ''))
              .find((f) => f.includes('"usage"') && f.includes('prompt_tokens_details'))!
          : text;
        const usage = (
          JSON.parse(usageText) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } }
        ).usage;
        const d = decodeRecord()!;
        const p = s.prefill[0]!.records.find((x) => x.requestId === d.requestId)!;
        expect(d.cachedTokens).toBe(d.promptTokens);
        expect(usage.prompt_tokens_details?.cached_tokens).toBe(p.cachedTokens);
        await waitFor(() => pl() === 0 && dl() === 0);
      } finally {
        if (!released) prefillHold.release();
      }
    },
  );

  it('a client that leaves while the usage waits for the prefill worker: the prefill leg is aborted', async () => {
    const prompt = 'leaves while the usage waits, '.repeat(20);
    const prefillHold = holdNext(s.prefill);
    // The response's first event reaches the client before the decode ends (its headers with it).
    const decodeHold = holdNext(s.decode, { afterChunks: 1 });
    const client = new AbortController();
    try {
      const r = await post(
        s.url,
        '/v1/completions',
        { model: 'sim-model', prompt, max_tokens: 2, stream: true, stream_options: { include_usage: true } },
        client.signal,
      );
      expect(r.status).toBe(200);
      decodeHold.release();
      const decodeRecord = () =>
        s.decode[0]!.records.find((x) => (x.body as { prompt?: string }).prompt === prompt);
      await waitFor(() => decodeRecord()?.endMs !== undefined, { message: 'decode answered' });
      client.abort();
      await r.text().catch(() => '');
      const prefillRecord = () =>
        s.prefill[0]!.records.find((x) => (x.body as { prompt?: string }).prompt === prompt);
      await waitFor(() => prefillRecord()?.outcome === 'aborted', { message: 'prefill leg aborted' });
      await waitFor(() => pl() === 0 && dl() === 0);
    } finally {
      decodeHold.release();
      prefillHold.release();
    }
  });

  it('a failed prefill becomes a client-visible error, not a hang', async () => {
    s.prefill[0]!.injectFault({ status: 500 });
    s.decode[0]!.injectFault({ hang: true });
    const r = await post(s.url, '/v1/completions', {
      model: 'sim-model',
      prompt: 'prefill fails',
      max_tokens: 3,
    });
    expect(r.status).toBe(502);
    const body = (await r.json()) as { error: { code: string } };
    expect(body.error.code).toBe('prefill_failed');
    await waitFor(() => pl() === 0 && dl() === 0);
  });
});

describe('P/D edge cases', () => {
  it('answers 503 naming the counts when a role is empty, creating no worker, guard or tree state', async () => {
    const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
    const router = await startTestRouter({
      mode: 'pd',
      prefill: [prefill.url],
      decode: [],
      prefillPolicy: 'cache_aware',
    });
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    try {
      const r = await post(`http://127.0.0.1:${envoy.listenerPort}`, '/v1/completions', {
        model: 'm',
        prompt: 'x',
        max_tokens: 1,
      });
      expect(r.status).toBe(503);
      const body = (await r.json()) as { error: { message: string } };
      expect(body.error.message).toBe('No workers available: 1 prefill, 0 decode');
      const [w] = router.workers();
      expect(w?.processed).toBe(0);
      expect(prefill.records).toHaveLength(0);
      const tree = (
        router.pools.prefill.policy as unknown as { treeChars(): Map<string, number> }
      ).treeChars();
      expect([...tree.values()].reduce((a, b) => a + b, 0)).toBe(0);
      await expectAllLoadsZero(router);
    } finally {
      await envoy.close();
      await router.close();
      await prefill.close();
    }
  });

  it('keeps a prefill and a decode worker at the same URL as separate resources', async () => {
    // A P2P NCCL worker that serves both roles at one URL (a 'regular' simulator accepts both legs).
    const both = await startSimulator({ role: 'regular', kvConnector: 'p2pnccl', timeScale: 0 });
    // Both legs reach this one simulator: hold the decode stream only, not the prefill answer.
    const decodeHold = both.hold({ stream: true, afterChunks: 1 });
    const router = await startTestRouter({
      mode: 'pd',
      prefill: [both.url],
      decode: [both.url],
      kvConnector: 'p2pnccl',
    });
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    try {
      const workers = router.workers();
      expect(workers.map((w) => w.role).sort()).toEqual(['decode', 'prefill']);
      const [pw, dw] = [
        workers.find((w) => w.role === 'prefill')!,
        workers.find((w) => w.role === 'decode')!,
      ];
      expect(pw).not.toBe(dw);
      const r = await post(`http://127.0.0.1:${envoy.listenerPort}`, '/v1/completions', {
        model: 'sim-model',
        prompt: 'same url',
        max_tokens: 6,
        stream: true,
      });
      const reader = r.body!.getReader();
      await reader.read();
      expect(dw.load).toBe(1);
      expect(pw.load).toBe(0);
      decodeHold.release();
      while (!(await reader.read()).done) {
        /* drain */
      }
      await expectAllLoadsZero(router);
      expect(pw.processed).toBe(1);
      const decodeRec = both.records.at(-1)!;
      expect(decodeRec.p2p?.prefillAddr).toBe(pw.kvAddress);
    } finally {
      decodeHold.release();
      await envoy.close();
      await router.close();
      await both.close();
    }
  });
});

describe('sidecar P/D (llm-d x-prefiller-host-port)', () => {
  it('names the prefill worker for the decode host, releases prefill at the first byte and decode at EOS', async () => {
    const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
    // The decode host's sidecar runs the prefill itself; a regular simulator stands in for the pair.
    const decodeHost = await startSimulator({ role: 'regular', timeScale: 0 });
    const decodeHold = decodeHost.hold({ afterChunks: 1 });
    const router = await startTestRouter({
      mode: 'pd',
      pdDispatch: 'sidecar',
      prefill: [prefill.url],
      decode: [decodeHost.url],
    });
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }] });
    try {
      const pw = router.workers().find((w) => w.role === 'prefill')!;
      const dw = router.workers().find((w) => w.role === 'decode')!;
      const r = await post(
        `http://127.0.0.1:${envoy.listenerPort}`,
        '/v1/completions',
        { model: 'sim-model', prompt: 'sidecar', max_tokens: 6, stream: true },
        undefined,
        { 'x-prefiller-host-port': '6.6.6.6:1' },
      );
      const reader = r.body!.getReader();
      await reader.read();
      expect(pw.load).toBe(0);
      expect(dw.load).toBe(1);
      decodeHold.release();
      while (!(await reader.read()).done) {
        /* drain */
      }
      await expectAllLoadsZero(router);
      expect(prefill.records).toHaveLength(0);
      const rec = decodeHost.records.at(-1)!;
      expect(rec.headers['x-prefiller-host-port']).toBe(pw.endpoint);
      expect(pw.processed).toBe(1);
      expect(dw.processed).toBe(1);
    } finally {
      decodeHold.release();
      await envoy.close();
      await router.close();
      await prefill.close();
      await decodeHost.close();
    }
  });
});

describe('P/D behind an endpoint-picker style Envoy (FULL_DUPLEX_STREAMED bodies)', () => {
  it('sends the rewritten decode body as streamed_response and streams the answer', async () => {
    const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
    const decode = await startSimulator({ role: 'decode', timeScale: 0 });
    const router = await startTestRouter({ mode: 'pd', prefill: [prefill.url], decode: [decode.url] });
    const envoy = await startEnvoy({
      routers: [{ host: '127.0.0.1', port: router.grpcPort }],
      requestBodyMode: 'FULL_DUPLEX_STREAMED',
      responseBodyMode: 'FULL_DUPLEX_STREAMED',
      trailerMode: 'SEND',
    });
    try {
      const r = await post(`http://127.0.0.1:${envoy.listenerPort}`, '/v1/completions', {
        model: 'sim-model',
        prompt: 'full duplex P/D',
        max_tokens: 5,
        stream: true,
      });
      const text = await r.text();
      expect(r.status).toBe(200);
      expect(text).toContain('[DONE]');
      const d = decode.records.at(-1)!;
      expect(
        (d.body as { kv_transfer_params?: { remote_engine_id?: string } }).kv_transfer_params
          ?.remote_engine_id,
      ).toBe(prefill.engineIds[0]); // the prefill's engine id, echoed from its response
      expect(d.completionTokens).toBe(5);
      await expectAllLoadsZero(router);
    } finally {
      await envoy.close();
      await router.close();
      await prefill.close();
      await decode.close();
    }
  });
});

describe.each([
  { responseBodyMode: 'FULL_DUPLEX_STREAMED' as const, trailerMode: 'SEND' as const },
  { responseBodyMode: 'BUFFERED' as const },
])('a non-streamed P/D answer through an Envoy whose response body is $responseBodyMode', (modes) => {
  it("carries the prefill worker's cached tokens in valid JSON, its length matching", async () => {
    const prefill = await startSimulator({ role: 'prefill', timeScale: 0 });
    const decode = await startSimulator({ role: 'decode', timeScale: 0 });
    const router = await startTestRouter({ mode: 'pd', prefill: [prefill.url], decode: [decode.url] });
    const envoy = await startEnvoy({ routers: [{ host: '127.0.0.1', port: router.grpcPort }], ...modes });
    try {
      const r = await post(`http://127.0.0.1:${envoy.listenerPort}`, '/v1/completions', {
        model: 'sim-model',
        prompt: 'a whole answer, '.repeat(40),
        max_tokens: 5,
      });
      const raw = Buffer.from(await r.arrayBuffer());
      expect(r.status, raw.toString()).toBe(200);
      const length = r.headers.get('content-length');
      if (length !== null) expect(Number(length)).toBe(raw.length);
      const body = JSON.parse(raw.toString('utf8')) as {
        usage: { completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
      };
      expect(body.usage.completion_tokens).toBe(5);
      const d = decode.records.at(-1)!;
      expect(d.cachedTokens).toBe(d.promptTokens);
      const p = prefill.records.find((x) => x.requestId === d.requestId)!;
      expect(body.usage.prompt_tokens_details?.cached_tokens).toBe(p.cachedTokens);
      await expectAllLoadsZero(router);
    } finally {
      await envoy.close();
      await router.close();
      await prefill.close();
      await decode.close();
    }
  });
});

describe.each([
  { responseBodyMode: 'FULL_DUPLEX_STREAMED' as const, trailerMode: 'SEND' as const, stream: true },
  { responseBodyMode: 'FULL_DUPLEX_STREAMED' as const, trailerMode: 'SEND' as const, stream: false },
  { responseBodyMode: 'BUFFERED' as const, stream: true },
  { responseBodyMode: 'BUFFERED' as const, stream: false },
])('concurrent P/D through an Envoy whose response body is $responseBodyMode (stream: $stream)', (modes) => {
  it("an answer that ends before the prefill worker's response reports the prefill worker's cached tokens", async () => {
    const { stream, ...envoyModes } = modes;
    const prefill = await startSimulator({ role: 'prefill', kvConnector: 'moriio', timeScale: 0 });
    const decode = await startSimulator({ role: 'decode', kvConnector: 'moriio', timeScale: 0 });
    const router = await startTestRouter({
      mode: 'pd',
      prefill: [prefill.url],
      decode: [decode.url],
      kvConnector: 'moriio',
      pdDispatch: 'concurrent',
    });
    const envoy = await startEnvoy({
      routers: [{ host: '127.0.0.1', port: router.grpcPort }],
      ...envoyModes,
    });
    const prefillHold = prefill.hold();
    try {
      const prompt = 'ends first, '.repeat(40);
      const r = post(`http://127.0.0.1:${envoy.listenerPort}`, '/v1/completions', {
        model: 'sim-model',
        prompt,
        max_tokens: 2,
        stream,
        ...(stream ? { stream_options: { include_usage: true } } : {}),
      });
      await prefillHold.reached();
      await waitFor(() => decode.records.at(-1)?.endMs !== undefined, { message: 'decode answered' });
      prefillHold.release();
      const res = await r;
      const raw = Buffer.from(await res.arrayBuffer());
      expect(res.status, raw.toString()).toBe(200);
      const length = res.headers.get('content-length');
      if (length !== null) expect(Number(length)).toBe(raw.length);
      const text = raw.toString('utf8');
      const usageText = stream
        ? text
            .split('\n\n')
            .map((f) => f.replace(/^data: /, ''))
            .find((f) => f.includes('prompt_tokens_details'))!
        : text;
      const usage = (
        JSON.parse(usageText) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } }
      ).usage;
      const d = decode.records.at(-1)!;
      const p = prefill.records.find((x) => x.requestId === d.requestId)!;
      expect(d.cachedTokens).toBe(d.promptTokens);
      expect(usage.prompt_tokens_details?.cached_tokens).toBe(p.cachedTokens);
      if (stream) expect(text).toContain('[DONE]');
      await expectAllLoadsZero(router);
    } finally {
      prefillHold.release();
      await envoy.close();
      await router.close();
      await prefill.close();
      await decode.close();
    }
  });
});
