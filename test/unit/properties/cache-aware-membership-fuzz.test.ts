/**
 * cache_aware (all modes) under random membership/health churn: the choice is always a
 * candidate, a removed worker leaves no tenant in any tree, counts stay consistent, and with a
 * capacity the picture stays within it (+1/16 slack) after every routed().
 */
import { describe, expect, it } from 'vitest';
import { CacheAwarePolicy, type CacheAwareMode } from '../../../src/routing/cache-aware.js';
import { seededRandom } from '../../../src/util/seeded-random.js';
import type { Worker } from '../../../src/workers/worker.js';
import { input, makeWorker, route } from '../routing/fixtures.js';

describe('cache_aware membership fuzz', () => {
  for (const mode of ['cost', 'per_request', 'global'] as CacheAwareMode[]) {
    for (const seed of [1, 2, 3]) {
      it(`${mode} seed ${seed}`, () => {
        const rnd = seededRandom(seed);
        const capacity = 50; // tokens -> 200 chars
        const policy = new CacheAwarePolicy(
          { mode, maxTreeSize: 300, maxModels: 2 },
          { capacityTokens: () => capacity },
        );
        let gen = 1;
        const members: Worker[] = [];
        const removed = new Set<string>();
        for (let i = 0; i < 4; i++) {
          const w = makeWorker(i, gen);
          members.push(w);
          policy.addWorker(w);
        }
        const alphabet = 'ab';
        for (let step = 0; step < 600; step++) {
          const r = rnd();
          if (r < 0.05 && members.length > 1) {
            const [w] = members.splice(Math.floor(rnd() * members.length), 1) as [Worker];
            policy.removeWorker(w);
            removed.add(w.id);
          } else if (r < 0.1) {
            const w = makeWorker(Math.floor(rnd() * 6), ++gen);
            members.push(w);
            policy.addWorker(w);
          } else if (r < 0.12) {
            policy.cacheCleared(members[Math.floor(rnd() * members.length)] as Worker);
          } else if (r < 0.14) {
            policy.maintain(step);
          }
          for (const w of members) w.healthy = rnd() < 0.8;
          let cands = members.filter((w) => w.healthy);
          if (cands.length === 0) cands = [members[0] as Worker];
          let text = '';
          const len = Math.floor(rnd() * 300);
          for (let i = 0; i < len; i++) text += alphabet[Math.floor(rnd() * alphabet.length)];
          const model = rnd() < 0.5 ? 'm1' : rnd() < 0.5 ? 'm2' : 'm3';
          const { decision, guard } = route(policy, input(cands, { text, model }), step);
          expect(cands).toContain(decision.worker);
          if (rnd() < 0.8) guard.release();
          for (const m of policy.models()) {
            const tree = policy.treeOf(m)!;
            for (const t of tree.tenants()) expect(removed.has(t)).toBe(false);
            const re = tree.recount();
            expect(tree.totalChars()).toBe(re.totalChars);
            for (const t of tree.tenants()) {
              expect(tree.tenantCharCount(t)).toBe(re.tenantChars.get(t) ?? 0);
              expect(tree.tenantCharCount(t)).toBeLessThanOrEqual(capacity * 4 * (1 + 1 / 16));
            }
          }
        }
      });
    }
  }
});
