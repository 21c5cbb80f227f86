import { describe, expect, it } from 'vitest';
import { modelListAnswer, type ModelListOptions } from '../../../src/routing/model-list.js';

const CARDS = [{ id: 'llama' }, { id: 'qwen' }];

function options(over: Partial<ModelListOptions> = {}): ModelListOptions {
  return { memberUrls: () => ['http://a', 'http://b'], cardsOf: () => CARDS, ...over };
}

describe('modelListAnswer', () => {
  it("answers GET /v1/models with the fleet's cards", () => {
    for (const path of ['/v1/models', '/v1/models?limit=5']) {
      expect(modelListAnswer(options(), 'GET', path, {})).toEqual({
        status: 200,
        body: { object: 'list', data: CARDS },
        details: 'models',
      });
    }
  });

  it.each([
    ['a POST', 'POST', '/v1/models'],
    ['one model', 'GET', '/v1/models/llama'],
    ['another path', 'GET', '/v1/modelsx'],
    ['a completion', 'POST', '/v1/completions'],
  ])('passes %s on to a worker', (_name, method, path) => {
    expect(modelListAnswer(options(), method, path, {})).toBeUndefined();
  });

  it('passes it on while no worker list is known', () => {
    expect(modelListAnswer(options({ cardsOf: () => undefined }), 'GET', '/v1/models', {})).toBeUndefined();
  });

  it('lists nothing itself that workers started with --api-key would refuse the client', () => {
    const o = options({ apiKey: 'k' });
    expect(modelListAnswer(o, 'GET', '/v1/models', {})).toBeUndefined();
    expect(modelListAnswer(o, 'GET', '/v1/models', { authorization: 'Bearer nope' })).toBeUndefined();
    expect(modelListAnswer(o, 'GET', '/v1/models', { authorization: 'Bearer k' })?.status).toBe(200);
  });
});
