/**
 * What a worker serves, from its /v1/models list as vLLM writes it (or its metrics label), and which
 * workers can take a request for a model (served-models.ts).
 */
import { describe, expect, it } from 'vitest';
import {
  MAX_LISTED_MODELS,
  maxModelLenOf,
  ModelCatalog,
  parseModelList,
  servingRule,
  type ServedModels,
} from '../../../src/workers/served-models.js';

// GET /v1/models of `vllm serve meta-llama/Llama-3.1-8B-Instruct --served-model-name llama llama-chat
// --enable-lora --lora-modules sql-lora=/adapters/sql` (vLLM's ModelCard fields, trimmed permission).
const VLLM_LIST = JSON.stringify({
  object: 'list',
  data: [
    {
      id: 'llama',
      object: 'model',
      created: 1733400000,
      owned_by: 'vllm',
      root: 'meta-llama/Llama-3.1-8B-Instruct',
      parent: null,
      max_model_len: 131072,
      permission: [{ id: 'modelperm-1', object: 'model_permission', allow_sampling: true }],
    },
    {
      id: 'llama-chat',
      object: 'model',
      created: 1733400000,
      owned_by: 'vllm',
      root: 'meta-llama/Llama-3.1-8B-Instruct',
      parent: null,
      max_model_len: 131072,
      permission: [],
    },
    {
      id: 'sql-lora',
      object: 'model',
      created: 1733400000,
      owned_by: 'vllm',
      root: '/adapters/sql',
      parent: 'llama',
      max_model_len: null,
      permission: [],
    },
  ],
});

describe('parseModelList', () => {
  it("reads vLLM's list: served names as base models, adapters with their parent", () => {
    const s = parseModelList(VLLM_LIST)!;
    expect(s.base).toEqual(['llama', 'llama-chat']);
    expect([...s.adapters]).toEqual([['sql-lora', 'llama']]);
  });

  it("reads each card's max_model_len; an adapter without one takes its worker's first base model's", () => {
    const s = parseModelList(VLLM_LIST)!;
    expect([...s.maxModelLen!]).toEqual([
      ['llama', 131072],
      ['llama-chat', 131072],
    ]);
    expect(maxModelLenOf(s, 'llama-chat')).toBe(131072);
    expect(maxModelLenOf(s, 'sql-lora')).toBe(131072); // max_model_len: null on its card
    expect(maxModelLenOf(undefined, 'llama')).toBeUndefined();
    const none = parseModelList(
      '{"data":[{"id":"q","max_model_len":"4096"},{"id":"r","max_model_len":-1}]}',
    )!;
    expect(none.maxModelLen).toBeUndefined();
    expect(maxModelLenOf(none, 'q')).toBeUndefined();
  });

  it('reads a list without parent fields (SGLang, older servers) as base models', () => {
    const s = parseModelList(
      '{"object":"list","data":[{"id":"qwen","object":"model","owned_by":"sglang"}]}',
    )!;
    expect(s.base).toEqual(['qwen']);
    expect(s.adapters.size).toBe(0);
  });

  it.each([
    ['not JSON', 'model list'],
    ['not an object', '[1,2]'],
    ['no data array', '{"object":"list"}'],
    ['data not an array', '{"data":{"id":"x"}}'],
    ['null', 'null'],
    ['an empty list (says nothing: the metrics label stays)', '{"object":"list","data":[]}'],
  ])('%s: undefined (a failed poll)', (_name, text) => {
    expect(parseModelList(text)).toBeUndefined();
  });

  it('skips malformed entries and keeps the rest', () => {
    const s = parseModelList(
      JSON.stringify({
        data: [null, 7, { id: 3 }, { id: '' }, { id: 'a' }, { id: 'a' }, { id: 'b', parent: 'a' }],
      }),
    )!;
    expect(s.base).toEqual(['a']);
    expect([...s.adapters]).toEqual([['b', 'a']]);
  });

  it(`reads at most ${MAX_LISTED_MODELS} entries`, () => {
    const data = Array.from({ length: MAX_LISTED_MODELS + 10 }, (_, i) => ({ id: `m${i}` }));
    expect(parseModelList(JSON.stringify({ data }))!.base).toHaveLength(MAX_LISTED_MODELS);
  });
});

describe('ModelCatalog', () => {
  it('uses the list when there is one, else the metrics label; version moves only on a change', () => {
    const c = new ModelCatalog();
    expect(c.of('http://a')).toBeUndefined();
    c.recordLabel('http://a', 'llama');
    expect(c.of('http://a')?.base).toEqual(['llama']);
    const v = c.version;
    c.recordLabel('http://a', 'llama');
    expect(c.version).toBe(v);
    c.recordListed('http://a', parseModelList(VLLM_LIST));
    expect(c.of('http://a')?.base).toEqual(['llama', 'llama-chat']);
    const v2 = c.version;
    expect(v2).toBeGreaterThan(v);
    c.recordListed('http://a', parseModelList(VLLM_LIST)); // an equal list from the next poll
    expect(c.version).toBe(v2);
    c.recordListed('http://a', undefined); // the worker stopped listing (404): the label again
    expect(c.of('http://a')?.base).toEqual(['llama']);
  });

  it("gives the fleet's model list: every listed card once, the first worker's card for an id", () => {
    const c = new ModelCatalog();
    c.recordLabel('http://labelled', 'mistral');
    expect(c.cardsOf(['http://labelled', 'http://unknown'])).toBeUndefined(); // no list: nothing to say
    c.recordListed('http://a', parseModelList(VLLM_LIST));
    const qwen = { id: 'qwen', object: 'model', owned_by: 'vllm', root: 'Qwen/Qwen3-8B', parent: null };
    const other = { ...JSON.parse(VLLM_LIST).data[0], created: 1 }; // llama again, listed later
    c.recordListed('http://b', parseModelList(JSON.stringify({ object: 'list', data: [other, qwen] })));
    const cards = c.cardsOf(['http://labelled', 'http://a', 'http://b'])!;
    expect(cards.map((x) => x.id)).toEqual(['llama', 'llama-chat', 'sql-lora', 'qwen']);
    expect(cards[0]).toEqual(JSON.parse(VLLM_LIST).data[0]);
    expect(cards[3]).toEqual(qwen);
    expect(c.cardsOf(['http://b'])!.map((x) => x.id)).toEqual(['llama', 'qwen']);
  });

  it("lists an adapter reloaded in place (vLLM's load_inplace) with its new root, routing untouched", () => {
    const c = new ModelCatalog();
    const v1 = JSON.parse(VLLM_LIST) as { data: Array<Record<string, unknown>> };
    c.recordListed('http://a', parseModelList(JSON.stringify(v1)));
    const v = c.version;
    // An RL trainer swaps the adapter's weights under its name: `{"lora_name": "sql-lora",
    // "lora_path": "/adapters/sql-step-2", "load_inplace": true}`; vLLM lists it with its new path.
    const v2 = {
      ...v1,
      data: v1.data.map((m) => (m.id === 'sql-lora' ? { ...m, root: '/adapters/sql-step-2' } : m)),
    };
    c.recordListed('http://a', parseModelList(JSON.stringify(v2)));
    expect(c.cardsOf(['http://a'])!.find((m) => m.id === 'sql-lora')?.root).toBe('/adapters/sql-step-2');
    expect(c.version).toBe(v); // what the worker serves did not change: routing memos hold
  });

  it('forgets departed workers, and a read that ends after one left does not bring it back', () => {
    const c = new ModelCatalog();
    c.recordLabel('http://a', 'x');
    c.recordLabel('http://b', 'y');
    c.retain(new Set(['http://b']));
    expect(c.of('http://a')).toBeUndefined();
    expect(c.of('http://b')?.base).toEqual(['y']);
    c.recordLabel('http://a', 'x'); // a scrape that was in flight when it left
    c.recordListed('http://a', parseModelList(VLLM_LIST));
    expect(c.of('http://a')).toBeUndefined();
  });

  it('forgets a worker replaced at its URL (a new process may serve other models)', () => {
    const c = new ModelCatalog();
    c.recordListed('http://a', parseModelList(VLLM_LIST));
    const v = c.version;
    c.forget('http://a');
    expect(c.of('http://a')).toBeUndefined();
    expect(c.version).toBeGreaterThan(v);
  });
});

describe('servingRule', () => {
  const llama: ServedModels = { base: ['llama', 'llama-chat'], adapters: new Map([['sql-lora', 'llama']]) };
  const llamaBare: ServedModels = { base: ['llama'], adapters: new Map() };
  const qwen: ServedModels = { base: ['qwen'], adapters: new Map([['med-lora', 'qwen']]) };
  const members = ['a', 'b', 'c', 'd'];
  const fleet: Record<string, ServedModels | undefined> = { a: llama, b: llamaBare, c: qwen, d: undefined };
  const who = (model: string): string[] | undefined => {
    const rule = servingRule(model, members, (m) => fleet[m]);
    return rule === undefined ? undefined : members.filter(rule);
  };

  it.each([
    ['a base name: the workers serving it', 'llama', ['a', 'b']],
    ['a second served name: only the workers listing it', 'llama-chat', ['a']],
    ["an adapter: the workers listing it and its base model's siblings", 'sql-lora', ['a', 'b']],
    ["another base model's adapter", 'med-lora', ['c']],
    ['a name nobody is known to serve: no rule (every worker)', 'mistral', undefined],
    ['no model: no rule', '', undefined],
  ])('%s', (_name, model, expected) => {
    expect(who(model)).toEqual(expected);
  });
});
