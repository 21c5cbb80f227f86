/** The model-name rewrite (request/model-rewrite.ts): the body's top-level model, and nothing else. */
import { describe, expect, it } from 'vitest';
import { withModel } from '../../../src/request/model-rewrite.js';

const rewrite = (body: string, model: string): unknown => {
  const out = withModel(Buffer.from(body), model);
  return out === undefined ? undefined : JSON.parse(String(out));
};

describe('withModel', () => {
  it('sets the top-level model and keeps every other member, nested models included', () => {
    expect(
      rewrite('{"model":"a","messages":[{"role":"user","content":"hi","model":"x"}],"stream":true}', 'b'),
    ).toEqual({ model: 'b', messages: [{ role: 'user', content: 'hi', model: 'x' }], stream: true });
  });

  it('adds the model to a body that has none (the gateway names it)', () => {
    expect(rewrite('{"prompt":"hi"}', 'b')).toEqual({ prompt: 'hi', model: 'b' });
  });

  it('keeps non-ASCII text intact', () => {
    expect(rewrite('{"model":"a","prompt":"résumé ✓ 日本"}', 'b')).toEqual({
      model: 'b',
      prompt: 'résumé ✓ 日本',
    });
  });

  it.each(['{"model":', '[1,2]', '"text"', 'null', `${'['.repeat(100)}${']'.repeat(100)}`])(
    'leaves %j alone (its own parse reports it)',
    (body) => {
      expect(withModel(Buffer.from(body), 'b')).toBeUndefined();
    },
  );
});
