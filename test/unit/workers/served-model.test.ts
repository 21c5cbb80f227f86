/**
 * A fleet mixing models (and LoRA adapters) behind one router: the pool narrows candidates to the
 * workers known to serve the request's model (WorkerPool.candidatesFor), and only on that positive
 * knowledge (served-models.ts).
 */
import { describe, expect, it } from 'vitest';
import type { Worker } from '../../../src/workers/worker.js';
import { WorkerPool } from '../../../src/workers/worker-pool.js';
import { ModelCatalog, parseModelList, type ServedModels } from '../../../src/workers/served-models.js';
import { ctx, harness, route, servingPool } from './pool-harness.js';

const PORTS = [8000, 8001, 8002, 8003];

const port = (w: Worker): number => Number(new URL(w.url).port);

/** A pool of workers on `ports` whose served models come from `catalog` (labels set from `label`). */
function mixedPool(
  label: (port: number) => string | undefined,
  catalog = new ModelCatalog(),
  ports = PORTS,
  h = harness(),
): WorkerPool {
  return servingPool(h, ports, label, catalog);
}

const byPort = (pool: WorkerPool, p: number): Worker => pool.workers.find((w) => port(w) === p)!;

describe('WorkerPool.candidatesFor (served models)', () => {
  it('routes each model only to the workers serving it (round robin within them)', () => {
    const pool = mixedPool((p) => (p < 8002 ? 'llama' : 'qwen'));
    const seen = { llama: new Set<number>(), qwen: new Set<number>() };
    for (const model of ['llama', 'qwen'] as const) {
      for (let i = 0; i < 8; i++) {
        const r = route(pool, ctx('', model), 0);
        seen[model].add(port(r!.decision.worker));
        r!.guard.release();
      }
    }
    expect([...seen.llama].sort()).toEqual([8000, 8001]);
    expect([...seen.qwen].sort()).toEqual([8002, 8003]);
  });

  it("requests for the two models alternating still spread over each model's workers (a cursor per model)", () => {
    const pool = mixedPool((p) => (p < 8002 ? 'llama' : 'qwen'));
    const seen = { llama: [] as number[], qwen: [] as number[] };
    for (let i = 0; i < 8; i++) {
      for (const model of ['llama', 'qwen'] as const) {
        const r = route(pool, ctx('', model), 0);
        seen[model].push(port(r!.decision.worker));
        r!.guard.release();
      }
    }
    // Each model takes its workers in turn: every two consecutive requests went to both.
    for (const [model, ports] of Object.entries(seen)) {
      for (let i = 0; i + 1 < ports.length; i += 2) {
        expect(new Set(ports.slice(i, i + 2)), model).toEqual(
          new Set(model === 'llama' ? [8000, 8001] : [8002, 8003]),
        );
      }
    }
  });

  it('many adapters with one request each per round spread over their workers, not all onto one', () => {
    const catalog = new ModelCatalog();
    const pool = mixedPool(() => 'llama', catalog);
    const adapters = Array.from({ length: 100 }, (_, i) => `lora-${i}`);
    for (const w of pool.workers) {
      catalog.recordListed(w.url, { base: ['llama'], adapters: new Map(adapters.map((a) => [a, 'llama'])) });
    }
    for (let round = 0; round < 3; round++) {
      const perWorker = new Map<number, number>();
      for (const model of adapters) {
        const r = route(pool, ctx('', model), 0);
        perWorker.set(port(r!.decision.worker), (perWorker.get(port(r!.decision.worker)) ?? 0) + 1);
        r!.guard.release();
      }
      expect([...perWorker.values()].sort()).toEqual([25, 25, 25, 25]);
    }
  });

  it.each([
    { name: 'a model no worker is known to serve (an adapter, an alias): every candidate', model: 'sql' },
    { name: 'no model in the request: every candidate', model: '' },
  ])('$name', ({ model }) => {
    const pool = mixedPool((p) => (p < 8002 ? 'llama' : 'qwen'));
    expect(pool.candidatesFor(model)).toBe(pool.candidates());
  });

  it('workers not scraped yet do not narrow anything until some worker is known to serve the model', () => {
    const catalog = new ModelCatalog();
    const pool = mixedPool(() => undefined, catalog);
    expect(pool.candidatesFor('qwen')).toBe(pool.candidates());
    catalog.recordLabel(byPort(pool, 8003).url, 'qwen');
    expect(pool.candidatesFor('qwen').map(port)).toEqual([8003]);
  });

  it('a fleet serving one model gets the same array back (the policies memoize on it)', () => {
    const pool = mixedPool(() => 'llama');
    expect(pool.candidatesFor('llama')).toBe(pool.candidates());
  });
});

describe('WorkerPool.candidatesFor from /v1/models lists', () => {
  const llama: ServedModels = { base: ['llama', 'llama-chat'], adapters: new Map([['sql-lora', 'llama']]) };
  const qwen: ServedModels = { base: ['qwen'], adapters: new Map([['med-lora', 'qwen']]) };

  function listedPool(): { pool: WorkerPool; catalog: ModelCatalog } {
    const catalog = new ModelCatalog();
    const pool = mixedPool((p) => (p < 8002 ? 'llama' : 'qwen'), catalog);
    for (const w of pool.workers) catalog.recordListed(w.url, port(w) < 8002 ? llama : qwen);
    return { pool, catalog };
  }

  it.each([
    ['an adapter goes to the workers of its base model', 'sql-lora', [8000, 8001]],
    ["another base model's adapter", 'med-lora', [8002, 8003]],
    ['a second served name goes where it is served, not everywhere', 'llama-chat', [8000, 8001]],
  ])('%s', (_name, model, ports) => {
    const { pool } = listedPool();
    expect(pool.candidatesFor(model).map(port)).toEqual(ports);
  });

  it("an adapter registered on one worker may go to its base model's siblings, never another model's", () => {
    const { pool, catalog } = listedPool();
    catalog.recordListed(byPort(pool, 8001).url, { base: ['llama'], adapters: new Map() });
    catalog.recordListed(byPort(pool, 8000).url, {
      base: ['llama'],
      adapters: new Map([['new-lora', 'llama']]),
    });
    expect(pool.candidatesFor('new-lora').map(port)).toEqual([8000, 8001]);
  });

  it('answers with one array per model until what the workers serve or their health changes', () => {
    const { pool, catalog } = listedPool();
    const first = pool.candidatesFor('sql-lora');
    expect(pool.candidatesFor('sql-lora')).toBe(first);
    catalog.recordListed(byPort(pool, 8002).url, {
      base: ['qwen'],
      adapters: new Map([['sql-lora', 'llama']]),
    });
    const second = pool.candidatesFor('sql-lora');
    expect(second).not.toBe(first);
    expect(second.map(port)).toEqual([8000, 8001, 8002]);
    byPort(pool, 8000).healthy = false;
    expect(pool.candidatesFor('sql-lora').map(port)).toEqual([8001, 8002]);
  });

  it('any number of distinct model names in requests keeps answering right', () => {
    const { pool } = listedPool();
    for (let i = 0; i < 500; i++) expect(pool.candidatesFor(`client-${i}`)).toBe(pool.candidates());
    expect(pool.candidatesFor('sql-lora').map(port)).toEqual([8000, 8001]);
  });
});

describe('WorkerPool.candidatesFor when the workers serving a model are down', () => {
  it('a down worker that then leaves the pool takes its model away, even with nothing else changed', () => {
    const h = harness();
    const pool = mixedPool((p) => (p === 8000 ? 'llama' : 'qwen'), new ModelCatalog(), [8000, 8001], h);
    byPort(pool, 8001).healthy = false;
    expect(pool.candidatesFor('qwen')).toEqual([]); // its only server is down: a 503
    // It leaves (the catalog is not told): the candidates array stays the same one, the version too.
    h.registry.deregister('regular', byPort(pool, 8001).url);
    pool.reconcile();
    expect(pool.candidatesFor('qwen').map(port)).toEqual([8000]); // nobody known to serve it: the pool
  });

  it("its requests get no worker (a 503) rather than another model's", () => {
    const pool = mixedPool((p) => (p < 8002 ? 'llama' : 'qwen'));
    for (const w of pool.workers) if (port(w) < 8002) w.healthy = false;
    expect(pool.candidatesFor('llama')).toEqual([]);
    expect(pool.candidatesFor('qwen').map(port)).toEqual([8002, 8003]);
    expect(route(pool, ctx('', 'llama'), 0)).toBeUndefined();
  });
});

describe('WorkerPool.served (P/D: a model the decode workers alone serve)', () => {
  it('a model is unserved only once every member has listed its models and none names it', () => {
    const catalog = new ModelCatalog();
    const pool = mixedPool(() => undefined, catalog, [8000, 8001]);
    const list = (...ids: string[]) => parseModelList(JSON.stringify({ data: ids.map((id) => ({ id })) }));
    expect(pool.served('qwen')).toBe('unknown'); // nothing read yet
    catalog.recordListed(byPort(pool, 8000).url, list('llama'));
    expect(pool.served('llama')).toBe('served');
    expect(pool.served('qwen')).toBe('unknown'); // 8001 not read: it may serve it
    catalog.recordLabel(byPort(pool, 8001).url, 'llama');
    expect(pool.served('qwen')).toBe('unknown'); // a metrics label names only the first served name
    catalog.recordListed(byPort(pool, 8001).url, list('llama', 'llama-chat'));
    expect(pool.served('qwen')).toBe('unserved');
    expect(pool.served('llama-chat')).toBe('served');
    expect(pool.served('')).toBe('unknown');
  });
});
