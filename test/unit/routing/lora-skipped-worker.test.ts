/**
 * a load through the router skips the members that are not selectable at that moment (a
 * cordon, a sleep, an open circuit breaker, a failed health check) and lists them in `skipped`. Such a
 * worker is the same process when it comes back into selection (same URL, same generation), so the
 * join replay (LoraFanout.sync: new `url generation` keys only) never loads the adapter on it. The
 * router then routes the adapter's requests to it (served-models.ts: a base model's workers are
 * interchangeable for its adapters), and vLLM answers 404 there.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { LoraFanout } from '../../../src/routing/lora-fanout.js';
import { startSimulator, type Simulator } from '../../../src/sim/simulator.js';
import { Worker } from '../../../src/workers/worker.js';
import { waitFor } from '../../support/wait-for.js';

const open: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  for (const x of open.splice(0).reverse()) await x.close();
});

async function sim(): Promise<Simulator> {
  const s = await startSimulator({ timeScale: 0, model: 'base', lora: { maxLoras: 2 } });
  open.push(s);
  return s;
}

const worker = (s: Simulator): Worker =>
  new Worker({ role: 'regular', url: s.url, endpoint: s.hostPort, generation: 1 });
const served = (s: Simulator) => (s as unknown as { serves(m: string): boolean }).serves('sql');
const LOAD = Buffer.from(JSON.stringify({ lora_name: 'sql', lora_path: '/adapters/sql' }));

describe('LoRA load with a worker out of selection', () => {
  it('loads the adapter on a skipped worker once it is back in selection', async () => {
    const [a, b] = [await sim(), await sim()];
    const [wa, wb] = [worker(a), worker(b)];
    const members = [wa, wb];
    const f = new LoraFanout({ members: () => members, timeoutMs: 5_000 });
    open.push(f);
    f.sync();
    // b is cordoned (maintenance) while the trainer loads the adapter.
    wb.healthy = false;
    wb.cordoned = true;
    const res = await f.answer('POST', '/v1/load_lora_adapter', {}, LOAD)!;
    expect(res.status).toBe(200);
    expect((res.body as { skipped: unknown[] }).skipped).toEqual([
      { url: b.url, role: 'regular', reason: 'cordoned' },
    ]);
    // b is uncordoned: back in selection, the same process. The router is told (a membership or a
    // health change calls sync()).
    wb.healthy = true;
    wb.cordoned = false;
    f.sync();
    await waitFor(() => served(b), { timeoutMs: 15_000, message: 'b never got the adapter' });
    expect([served(a), served(b)]).toEqual([true, true]);
  });
});
