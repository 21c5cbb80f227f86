/**
 * Session affinity across router replicas, through a real Envoy (envoy-config.ts
 * `replicaAffinityHeader`): Envoy copies the client's `x-session-id` into the ext_proc stream's gRPC
 * metadata and Maglev-hashes the router cluster on it. Every request of a session then reaches the
 * same replica, whose prefix tree sees the whole conversation; sessions spread over the replicas;
 * requests without the header are not piled onto one replica.
 *
 * Prefix affinity (`replicaPrefixKey`, the generated envoy-replicas*.yaml): a request without the
 * header is hashed on the opening of its prompt (Envoy's Lua filter), so requests that open alike reach
 * one replica and different openings spread; a client's session key still wins, and a request of
 * Claude Code is keyed by the session it names (`x-claude-code-session-id`), one that names its
 * conversation in the body's `prompt_cache_key` by that.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnvoy, type EnvoyHandle } from '../../src/envoy/envoy-process.js';
import type { Router } from '../../src/router.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { expectAllLoadsZero, startTestRouter } from '../support/router-fixture.js';
import { replicaThatServed } from '../support/replica-served.js';

const HEADER = 'x-session-id';

let sims: Simulator[] = [];
let routers: Router[] = [];
let envoy: EnvoyHandle;
let prefixEnvoy: EnvoyHandle;
beforeAll(async () => {
  sims = await Promise.all([0, 1].map(() => startSimulator({ timeScale: 0 })));
  routers = await Promise.all(
    [0, 1].map(() => startTestRouter({ workers: sims.map((s) => s.url), policy: 'cache_aware' })),
  );
  envoy = await startEnvoy({
    routers: routers.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    replicaAffinityHeader: HEADER,
  });
  prefixEnvoy = await startEnvoy({
    routers: routers.map((r) => ({ host: '127.0.0.1', port: r.grpcPort })),
    replicaAffinityHeader: HEADER,
    replicaPrefixKey: true,
  });
});
afterAll(async () => {
  await envoy?.close();
  await prefixEnvoy?.close();
  await Promise.all(routers.map((r) => r.close()));
  await Promise.all(sims.map((s) => s.close()));
  routers = [];
  sims = [];
});

/** Sends one chat turn and returns the index of the replica that routed it. */
const turn = (session: string | undefined, text: string, via = envoy): Promise<number> =>
  replicaThatServed(routers, () =>
    fetch(`http://127.0.0.1:${via.listenerPort}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(session ? { [HEADER]: session } : {}) },
      body: JSON.stringify({
        model: 'sim-model',
        messages: [{ role: 'user', content: text }],
        max_tokens: 2,
      }),
    }),
  );

describe('session affinity across router replicas', () => {
  it('every request of a session reaches one replica; sessions spread over both; keyless requests too', async () => {
    const replicaOf = new Map<string, Set<number>>();
    for (let round = 0; round < 4; round++) {
      for (let s = 0; s < 16; s++) {
        const session = `session-${s}`;
        const replica = await turn(session, `conversation ${s}, turn ${round}`);
        let seen = replicaOf.get(session);
        if (!seen) replicaOf.set(session, (seen = new Set()));
        seen.add(replica);
      }
    }
    for (const [session, seen] of replicaOf) expect([session, seen.size]).toEqual([session, 1]);
    const perReplica = [0, 1].map((i) => [...replicaOf.values()].filter((s) => s.has(i)).length);
    expect(perReplica.every((n) => n > 0)).toBe(true); // 16 sessions: both replicas hold some

    // Without the header there is no hash: the requests spread (not one constant key for all).
    const keyless = [0, 0];
    for (let i = 0; i < 32; i++) keyless[await turn(undefined, `anonymous ${i}`)]! += 1;
    expect(keyless.every((n) => n > 0)).toBe(true);

    for (const r of routers) await expectAllLoadsZero(r);
  });
});

describe('prefix affinity across router replicas (no session key)', () => {
  /**
   * A long opening per tenant (past the key's 256 bytes), then a different question each time. Odd
   * tenants write in Chinese: raw UTF-8 in the body, which the key carries as hex.
   */
  const prompt = (tenant: number, question: string) =>
    tenant % 2 === 0
      ? `tenant ${tenant} handbook: ${'policies and procedures '.repeat(16)}\n\nquestion: ${question}`
      : `租户 ${tenant} 手册：${'规章制度与流程。'.repeat(24)}\n\n问题：${question}`;

  it('requests that open alike reach one replica; different openings spread over both', async () => {
    const replicaOf = new Map<number, Set<number>>();
    for (let round = 0; round < 3; round++) {
      for (let t = 0; t < 16; t++) {
        const replica = await turn(undefined, prompt(t, `round ${round}`), prefixEnvoy);
        let seen = replicaOf.get(t);
        if (!seen) replicaOf.set(t, (seen = new Set()));
        seen.add(replica);
      }
    }
    for (const [tenant, seen] of replicaOf) expect([tenant, seen.size]).toEqual([tenant, 1]);
    const perReplica = [0, 1].map((i) => [...replicaOf.values()].filter((s) => s.has(i)).length);
    expect(
      perReplica.every((n) => n > 0),
      `tenants per replica: ${perReplica}`,
    ).toBe(true);
    for (const r of routers) await expectAllLoadsZero(r);
  });

  it("Claude Code's session header keys a whole coding session, whatever its prompt opens with", async () => {
    // Every session opens alike (one agent, one repository): keyed by the opening, all would share one
    // replica. Claude Code names its session on every request instead.
    const ask = (session: string, question: string): Promise<number> =>
      replicaThatServed(routers, () =>
        fetch(`http://127.0.0.1:${prefixEnvoy.listenerPort}/v1/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-claude-code-session-id': session },
          body: JSON.stringify({
            model: 'sim-model',
            max_tokens: 2,
            messages: [{ role: 'user', content: prompt(98, question) }],
          }),
        }),
      );
    const replicaOf = new Map<string, number>();
    for (let s = 0; s < 16; s++) {
      const session = `5f0c${s.toString(16).padStart(4, '0')}-8d2e-4b1a-9c3f-0a1b2c3d4e5f`;
      const first = await ask(session, `step 1 of ${session}`);
      expect(await ask(session, `step 2 of ${session}`)).toBe(first);
      replicaOf.set(session, first);
    }
    expect(new Set(replicaOf.values()).size).toBe(2);
    for (const r of routers) await expectAllLoadsZero(r);
  });

  it("OpenAI's prompt_cache_key keys a conversation, whatever its prompt opens with", async () => {
    // Conversations that open alike (an agent's instructions), each named by the client in the body's
    // prompt_cache_key (written last, as the SDKs do), as agents on the Responses API name theirs.
    const ask = (key: string, question: string): Promise<number> =>
      replicaThatServed(routers, () =>
        fetch(`http://127.0.0.1:${prefixEnvoy.listenerPort}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'sim-model',
            messages: [{ role: 'user', content: prompt(97, question) }],
            max_tokens: 2,
            prompt_cache_key: key,
          }),
        }),
      );
    const replicaOf = new Map<string, number>();
    for (let s = 0; s < 16; s++) {
      const key = `conversation-${s}`;
      const first = await ask(key, `step 1 of ${key}`);
      expect(await ask(key, `step 2 of ${key}`)).toBe(first);
      replicaOf.set(key, first);
    }
    expect(new Set(replicaOf.values()).size).toBe(2);
    for (const r of routers) await expectAllLoadsZero(r);
  });

  it("a client's session key wins over the prompt's opening", async () => {
    // One opening, 16 sessions: without the session key they would all share one replica.
    const replicaOf = new Map<string, number>();
    for (let s = 0; s < 16; s++) {
      const session = `user-${s}`;
      const first = await turn(session, prompt(99, `from ${session}`), prefixEnvoy);
      expect(await turn(session, prompt(99, `again from ${session}`), prefixEnvoy)).toBe(first);
      replicaOf.set(session, first);
    }
    expect(new Set(replicaOf.values()).size).toBe(2);
    for (const r of routers) await expectAllLoadsZero(r);
  });
});
