import { describe, expect, it } from 'vitest';
import type { Dispatch, Dispatcher, RouteRequest } from '../../../src/extproc/dispatch.js';
import { ModelInFlight, withModelInFlight, withPrefillModel } from '../../../src/load/model-in-flight.js';
import { CacheAwarePolicy } from '../../../src/routing/cache-aware.js';
import { input, makeWorkers } from '../routing/fixtures.js';

const [w0, w1] = makeWorkers(2);
const decision = new CacheAwarePolicy().select(input([w0!], { text: 'x' }));

function req(model: string | undefined): RouteRequest {
  return {
    method: 'POST',
    path: '/v1/completions',
    headers: {},
    ...(model === undefined
      ? {}
      : { inference: { stream: false, model, text: 'x' } as RouteRequest['inference'] }),
  };
}

function dispatcher(worker = w0!, later = false): { d: Dispatcher; finished: () => number } {
  let finished = 0;
  const make = (): Dispatch => ({ worker, decision, setHeaders: {}, finish: () => void (finished += 1) });
  return { d: { dispatch: () => (later ? Promise.resolve(make()) : make()) }, finished: () => finished };
}

describe('ModelInFlight', () => {
  it("counts each request's model on its worker until it finishes, once however often finish is called", async () => {
    const models = new ModelInFlight();
    const a = dispatcher(w0!);
    const b = dispatcher(w1!, true);
    const d = withModelInFlight(a.d, models);
    const x = d.dispatch(req('sql'), new AbortController()) as Dispatch;
    const y = d.dispatch(req('sql'), new AbortController()) as Dispatch;
    const z = await withModelInFlight(b.d, models).dispatch(req('chat'), new AbortController());
    expect([...models.of(w0!)]).toEqual([['sql', 2]]);
    expect([...models.of(w1!)]).toEqual([['chat', 1]]);
    x.finish({ kind: 'response', status: 200 });
    x.finish({ kind: 'cancelled', afterHeaders: true });
    expect([...models.of(w0!)]).toEqual([['sql', 1]]);
    expect(a.finished()).toBe(2); // the inner dispatch still hears every call (it is idempotent itself)
    y.finish({ kind: 'cancelled', afterHeaders: false });
    z.finish({ kind: 'response', status: 200 });
    expect(models.of(w0!).size).toBe(0);
    expect(models.of(w1!).size).toBe(0);
  });

  it('requests without an inference body are not counted', () => {
    const models = new ModelInFlight();
    const d = withModelInFlight(dispatcher().d, models);
    (d.dispatch(req(undefined), new AbortController()) as Dispatch).finish({ kind: 'response', status: 200 });
    expect(models.of(w0!).size).toBe(0);
    models.done(w0!, 'never-added'); // harmless
  });
});

describe('withPrefillModel (P/D prefill legs)', () => {
  it("counts the model on the prefill worker from the leg's start to its end, around the inner hook", () => {
    const models = new ModelInFlight();
    const heard: string[] = [];
    const started = withPrefillModel((w, _d: string, model) => {
      heard.push(`start ${model}`);
      return (ok) => heard.push(`end ${ok}`);
    }, models);
    const end = started(w1!, 'decision', 'sql');
    expect([...models.of(w1!)]).toEqual([['sql', 1]]);
    end(true, 12);
    end(false, 13); // a second end changes no count
    expect(models.of(w1!).size).toBe(0);
    expect(heard).toEqual(['start sql', 'end true', 'end false']);
  });

  it('a leg without a model, or an inner hook with nothing to end, still ends cleanly', () => {
    const models = new ModelInFlight();
    const end = withPrefillModel(() => undefined, models)(w1!, 'decision', '');
    expect(models.of(w1!).size).toBe(0);
    end(true, 1);
    expect(models.of(w1!).size).toBe(0);
  });
});
