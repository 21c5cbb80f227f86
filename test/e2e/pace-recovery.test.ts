/**
 * End to end through a real Envoy: a worker that was slow and is well again gets its traffic back.
 *
 * One simulated worker runs six times slower than the other (a GPU shared with another job). The
 * default policy learns its pace from its streamed responses and sends one request at a time to the
 * fast worker, so the slow one stops answering anything. Then the other job ends (the simulator's
 * time scale goes back to 1). Nothing the router routes reaches the worker, so nothing could show
 * it is well: without forgetting, its pace stayed where it was and the worker stayed idle for good.
 * With forgetting (`--cost-worker-pace-forget-ms`, 30 s by default, 10 min in this fleet so a loaded
 * machine's wall clock never forgets for the test), the pace of a worker unobserved for that long
 * fades back to its fleet's; the router tries it again, sees it is fast and keeps using it.
 * The router's clock is the test's: real time plus a skew the test moves forward by the minutes that
 * pass in production between the job's end and the worker's next try (the only faked part).
 * Ends with every load back to 0.
 */
import { describe, expect, it } from 'vitest';
import {
  FLEET_PACE_FORGET_MS,
  learnPaces,
  paceOnWorkers,
  uniqueRequest,
  useMixedFleet,
} from '../support/mixed-fleet.js';

/** Added to the router's clock: time the test lets pass at once. */
let skewMs = 0;
const fleet = useMixedFleet({ clock: () => performance.now() + skewMs });

const unique = (i: number): Promise<string> => uniqueRequest(fleet.stack, i);
const paceOf = (url: string): Promise<number> => paceOnWorkers(fleet.stack, url);

describe('a worker priced slow that is well again (cache_aware cost mode, pace forgetting)', () => {
  it('is tried again once its pace has faded, and keeps its share once it shows it is fast', async () => {
    const [slow, fast] = fleet.stack.sims;
    // Learning, one request at a time (mixed-fleet.ts `learnPaces`): until the slow one reads slower.
    const learned = await learnPaces(fleet.stack, { mode: 'sequential' });
    const pace = await paceOf(slow!.url);
    expect(pace).toBeGreaterThan(await paceOf(fast!.url));

    // The job sharing its GPU ends. The router sends it nothing, so only forgetting can bring it back.
    slow!.setTimeScale(1);
    // Within the silence a pace keeps as measured. The skew adds to the real time since the slow
    // worker's last response (up to a minute on a loaded machine), so it stays well inside.
    skewMs += FLEET_PACE_FORGET_MS / 10;
    expect(await paceOf(slow!.url)).toBe(pace);
    skewMs += 5 * FLEET_PACE_FORGET_MS; // five more windows without a response from it
    expect(await paceOf(slow!.url)).toBe(1);

    const routed: string[] = [];
    for (let i = learned; i < learned + 30; i++) routed.push(await unique(i));
    const toRecovered = routed.filter((w) => w === slow!.url).length;
    // Alike again, the two share the requests: idle workers of one pace tie, and each prompt goes to
    // its rendezvous home, either of them by the prompt's hash (fewer than 5 of 30: 1 run in 30,000).
    // It stays priced as the fleet.
    expect(toRecovered, routed.join(' ')).toBeGreaterThanOrEqual(5);
    expect(await paceOf(slow!.url)).toBe(1);
  });
});
