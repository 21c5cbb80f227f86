/**
 * End to end through a real Envoy: clients that never stream. A non-streamed response arrives in one
 * piece when its last token is out, so it shows no first token; the router still learns from it (its
 * duration with the tokens it generated: load/timing-estimates.ts `recordWhole`). On the mixed fleet
 * of mixed-hardware.test.ts (one worker six times slower):
 *
 * - one request at a time, nothing cached anywhere, goes to the fast worker once the router has
 *   learned both (without learning from such responses, both workers kept their pace of 1, tied when
 *   idle and alternated: half the requests waited six times longer than they had to);
 * - /workers counts the responses learned from (`wholeSamples`; /metrics as
 *   `vllm_router_worker_timing_samples{kind="whole"}`) and shows the slow worker's pace above the
 *   fast one's.
 * Ends with every load back to 0.
 */
import { describe, expect, it } from 'vitest';
import { adminJson, metricsText } from '../support/router-fixture.js';
import { learnPaces, paceOnWorkers, uniqueRequest, useMixedFleet } from '../support/mixed-fleet.js';

const fleet = useMixedFleet();

interface WorkerInfo {
  url: string;
  estimates: { ttftSamples: number; wholeSamples: number };
}

describe('clients that never stream (cache_aware cost mode)', () => {
  it('learns each worker from its whole responses and sends one request at a time to the faster one', async () => {
    const [slow, fast] = fleet.stack.sims;
    // Learning, as with streamed responses (mixed-hardware.test.ts), from whole responses alone:
    // until the slow one is priced at least 1.1.
    const learned = await learnPaces(fleet.stack, { stream: false });
    const routed: string[] = [];
    for (let i = learned; i < learned + 12; i++) routed.push(await uniqueRequest(fleet.stack, i, false));
    expect(routed).toEqual(Array(12).fill(fast!.url));

    const view = (await adminJson<WorkerInfo[]>(fleet.stack.router, '/workers')).body;
    const of = (url: string) => view.find((w) => w.url === url)!.estimates;
    // Every response taught the estimates, none as a first token.
    expect(of(fast!.url).wholeSamples + of(slow!.url).wholeSamples).toBe(learned + 12);
    expect(of(slow!.url).wholeSamples).toBe(slow!.records.length);
    expect(of(fast!.url).ttftSamples + of(slow!.url).ttftSamples).toBe(0);
    // Prometheus counts them too, per worker and kind.
    const metrics = await metricsText(fleet.stack.router);
    for (const s of [slow!, fast!]) {
      const series = new RegExp(
        `vllm_router_worker_timing_samples\\{[^}]*worker="${s.url}"[^}]*kind="whole"[^}]*\\} ([0-9]+)`,
      ).exec(metrics);
      expect(Number(series?.[1])).toBe(of(s.url).wholeSamples);
    }
    expect(await paceOnWorkers(fleet.stack, slow!.url)).toBeGreaterThan(
      await paceOnWorkers(fleet.stack, fast!.url),
    );
  });
});
