/**
 * vllm_router_flow_refused_total{objective} takes the raw x-gateway-inference-objective header
 * value (routing/flow-control.ts, wired in composition/wiring.ts), so a client naming a new objective
 * per request while the pool is saturated adds one series per value: unbounded /metrics cardinality
 * from client input. Known objectives are bounded (--objective, the InferenceObjectives); anything
 * else must not become a label value.
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { wireRouter } from '../../../src/composition/wiring.js';
import type { Cancellation, RouteRequest } from '../../../src/extproc/dispatch.js';
import { parseInferenceRequest } from '../../../src/request/inference-request.js';
import { testConfig } from '../../support/router-fixture.js';

function completion(objective: string): RouteRequest {
  const raw = Buffer.from(JSON.stringify({ model: 'm', prompt: 'hi' }));
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: { 'x-gateway-inference-objective': objective },
    body: raw,
    inference: parseInferenceRequest('completions', undefined, raw),
  };
}

const cancellation = (): Cancellation => ({ signal: new AbortController().signal });

describe('flow control refusals: objective label', () => {
  it('client-chosen objective names do not become label values', async () => {
    const c = wireRouter(
      testConfig({ flowControl: true, scrapeIntervalMs: 1000, flowQueueMax: 1, objective: ['batch=-1'] }),
      { logger: pino({ level: 'silent' }), clock: () => 1000 },
    );
    // One worker whose scraped queue leaves no room, so requests are held (the first) or refused (queue_full).
    c.registry.register({ role: 'regular', url: 'http://127.0.0.1:9801', endpoint: '127.0.0.1:9801' });
    c.board.record('http://127.0.0.1:9801', {
      takenAtMs: 1000,
      localAtSample: 0,
      figures: { waiting: 9, running: 4, malformedLines: 0 },
    });
    const flow = c.flow!;
    const held = Promise.resolve(flow.dispatch(completion('batch'), cancellation())).catch(() => undefined);
    for (let i = 0; i < 50; i++) {
      try {
        // queue_full: thrown at once; the first (priority 0) takes the batch request's place instead
        const d = flow.dispatch(completion(`random-${i}`), cancellation());
        if (d instanceof Promise) d.catch(() => undefined);
      } catch {
        // the 429 the client gets
      }
    }
    flow.close();
    await held;
    const text = await c.metrics.text();
    const series = text.split('\n').filter((l) => l.startsWith('vllm_router_flow_refused_total{'));
    expect(series.length).toBeGreaterThan(0); // refusals are counted...
    expect(series.length).toBeLessThanOrEqual(2); // ...but not one series per client-chosen name
    expect(text).not.toMatch(/objective="random-/);
  });
});
